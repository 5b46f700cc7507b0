"""fencelock on asyncio: the client, leases, sessions, watches and elections
on asyncio streams (standard library only).

The same calls, rules, defaults and errors as the threaded flavour, awaited:

>>> import asyncio
>>> from fencelock.aio import AsyncClient, AsyncLease, AsyncSession
>>> async def main() -> None:                                         # doctest: +SKIP
...     async with AsyncClient("127.0.0.1:7470") as c:
...         g = await c.acquire("jobs/nightly", "alice", 30)   # waits its turn
...         await c.release("jobs/nightly", "alice", g.token)
...         async with AsyncLease(c, "jobs/nightly", ttl=10) as lease:
...             await do_work(lease.token)
...             lease.ensure()                      # LeaseLostError once lost
...         async with AsyncSession(c, ttl=15) as s:
...             a = await s.acquire("jobs/a")
...             b, d = await s.acquire_all(["jobs/b", "jobs/d"])
...         async for ev in c.watch("jobs/", after="0"):
...             print(ev.revision, ev.type, ev.key)
>>> asyncio.run(main())                                                # doctest: +SKIP

Each keep-alive is one task of the running loop, on the rules of
:mod:`fencelock._keepalive` (the Go client's): it extends on the budget's
cadence, asks the next node beside a silent one, and declares the lease
lost 0.89×TTL after the send of the last confirmed extension (DESIGN.md
section 4). It can only do so while the loop runs: a loop blocked by a
synchronous call for longer than the room the cadence leaves costs the
lease, as a paused process would. ``lease.lost`` reads the clock, so it
is right even then.

An :class:`AsyncClient` keeps its connections open between calls (HTTP/1.1
keep-alive, a pool per address) until :meth:`AsyncClient.close`; asyncio
cannot resume a TLS session, so a new TLS connection makes a full handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple, Type, TypeVar, Union

from . import _wire
from ._keepalive import Attempt, KeepAlive, budget_for
from ._wire import (
    DEFAULT_TTL,
    FOREVER,
    MAX_WAIT_ROUND,
    Event,
    ExtendResult,
    Grant,
    Leadership,
    Mode,
    Req,
    Revision,
    SessionInfo,
    WhoAmI,
)
from .errors import (
    CompactedError,
    FencelockError,
    HeldError,
    InternalError,
    InvalidError,
    LeaseLostError,
    NotHeldError,
    SessionLostError,
    UnavailableError,
    UnreachableError,
)

__all__ = [
    "AsyncClient",
    "AsyncElection",
    "AsyncLeader",
    "AsyncLease",
    "AsyncSession",
    "AsyncSessionLock",
    "AsyncWatch",
    "FOREVER",
]

T = TypeVar("T")

_MAX_ANSWER = 8 << 20


async def _read_answer(reader: asyncio.StreamReader) -> Tuple[int, bytes, bool]:
    """Read one HTTP/1.1 answer: (status, body, whether the connection may be kept)."""
    line = await reader.readline()
    if not line:
        raise ConnectionResetError("the server closed the connection without an answer")
    parts = line.decode("latin-1").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ConnectionError("not an HTTP answer: %r" % line[:80])
    status = int(parts[1])
    headers: Dict[str, str] = {}
    while True:
        h = await reader.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    keep = parts[0] == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                break
            body += await reader.readexactly(size)
            await reader.readline()
            if len(body) > _MAX_ANSWER:
                raise ConnectionError("answer too large")
        return status, bytes(body), keep
    if "content-length" in headers:
        return status, await reader.readexactly(int(headers["content-length"])), keep
    return status, await reader.read(_MAX_ANSWER), False


_Conn = Tuple[asyncio.StreamReader, asyncio.StreamWriter]


class _AsyncPool:
    """The idle connections of an AsyncClient, by address (one loop's: no lock)."""

    IDLE_FOR = 50.0  # seconds; the server closes a connection idle for 2 minutes

    def __init__(self, max_idle: int) -> None:
        self._idle: Dict[str, List[Tuple[_Conn, float]]] = {}
        self.max_idle = max(0, max_idle)
        self.dialed = 0

    def get(self, addr: str) -> Optional[_Conn]:
        idle = self._idle.get(addr, [])
        now = time.monotonic()
        while idle:
            conn, since = idle.pop()
            if now - since < self.IDLE_FOR and not conn[0].at_eof() and not conn[1].is_closing():
                return conn
            conn[1].close()
        return None

    def put(self, addr: str, conn: _Conn) -> None:
        idle = self._idle.setdefault(addr, [])
        if len(idle) < self.max_idle:
            idle.append((conn, time.monotonic()))
        else:
            conn[1].close()

    async def close(self) -> None:
        idle, self._idle = self._idle, {}
        writers = [conn[1] for conns in idle.values() for conn, _ in conns]
        for w in writers:
            w.close()
        for w in writers:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(w.wait_closed(), 0.5)


def _stale(e: BaseException) -> bool:
    """Whether an exchange on a kept connection failed as one the server closed does."""
    return isinstance(e, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, asyncio.IncompleteReadError,
                          ssl.SSLEOFError, ssl.SSLZeroReturnError))


class AsyncClient(_wire.ClientSettings):
    """The asyncio flavour of :class:`fencelock.Client`: same arguments, same
    calls (awaited), same defaults, failover, TLS and errors; ``async with``
    closes its idle connections on exit (or ``await c.close()``).

    >>> async with AsyncClient("127.0.0.1:7470", ca="ca.pem", cert="alice.pem",
    ...                        key="alice-key.pem") as c:                          # doctest: +SKIP
    ...     g = await c.acquire("jobs/nightly", "alice", 30)
    """

    _pool: _AsyncPool

    def _make_pool(self, max_idle: int) -> _AsyncPool:
        return _AsyncPool(max_idle)

    async def close(self) -> None:
        """Close the idle connections; calls made afterwards connect again."""
        await self._pool.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()

    # ---- lock calls (see fencelock.Client for each) -------------------

    async def acquire(
        self,
        key: str,
        holder: str,
        ttl: Optional[float] = None,
        *,
        wait: Optional[float] = None,
        session: int = 0,
        lock_delay: float = 0.0,
        permits: int = 0,
        mode: Optional[Mode] = None,
        allow_long: bool = False,
        deadline: Optional[float] = None,
    ) -> Grant:
        """:meth:`fencelock.Client.acquire`, awaited: a NEW fencing token, waiting its turn
        (``wait``: None as long as it takes, 0 once, N seconds).

        >>> g = await c.acquire("jobs/nightly", "bob", 30, wait=5)    # doctest: +SKIP
        """
        if ttl is None:
            ttl = DEFAULT_TTL
        wait = _wire.check_wait(wait)
        end = time.monotonic() + wait
        while True:
            rnd = max(min(end - time.monotonic(), MAX_WAIT_ROUND), 0.001) if wait > 0 else 0.0
            req = _wire.acquire_req(key, holder, ttl, wait=rnd, session=session, lock_delay=lock_delay,
                                    permits=permits, mode=mode, allow_long=allow_long)
            try:
                return await self._run(req, deadline=deadline)
            except HeldError:
                if wait <= MAX_WAIT_ROUND or end - time.monotonic() < 0.001:
                    raise

    async def acquire_all(
        self,
        keys: Sequence[str],
        holder: str,
        ttl: Optional[float] = None,
        *,
        wait: Optional[float] = None,
        session: int = 0,
        lock_delay: float = 0.0,
        allow_long: bool = False,
        retry_for: Optional[float] = None,
    ) -> List[Grant]:
        """:meth:`fencelock.Client.acquire_all`, awaited: every key or none, retried for ``wait``."""
        req_ttl = DEFAULT_TTL if ttl is None else ttl
        wait = _wire.check_wait(retry_for if retry_for is not None else wait)
        end = time.monotonic() + wait
        pause = 0.01
        while True:
            try:
                return await self._run(_wire.acquire_all_req(keys, holder, req_ttl, session=session,
                                                             lock_delay=lock_delay, allow_long=allow_long))
            except FencelockError as e:
                left = end - time.monotonic()
                if wait <= 0 or left <= 0 or not _wire.retryable_for_all(e):
                    raise
                await asyncio.sleep(min(_wire.jitter(pause), left))
                pause = min(2 * pause, 0.5)

    async def renew(self, key: str, holder: str, ttl: float, *, allow_long: bool = False) -> Grant:
        """Re-acquire by the live holder: a NEW token."""
        return await self._run(_wire.renew_req(key, holder, ttl, allow_long))

    async def extend(self, key: str, holder: str, token: int, ttl: float, *, allow_long: bool = False) -> Grant:
        """Keep-alive under the SAME token."""
        return await self._run(_wire.extend_req(key, holder, token, ttl, allow_long=allow_long))

    async def extend_batch(self, holder: str, ttl: float, leases: Sequence[Tuple[str, int]], *,
                           allow_long: bool = False) -> List[ExtendResult]:
        """Extend many of ``holder``'s ``(key, token)`` leases in one log entry."""
        return await self._run(_wire.extend_batch_req(holder, ttl, leases, allow_long))

    async def release(self, key: str, holder: str, token: int = 0, *, deadline: Optional[float] = None) -> bool:
        """Release ``key`` if ``holder`` holds it (under ``token`` if not 0); False if nothing was."""
        return await self._run(_wire.release_req(key, holder, token), deadline=deadline)

    async def check(self, key: str, token: int) -> bool:
        """Whether ``token`` is the key's live token."""
        return await self._run(_wire.check_req(key, token))

    async def get(self, key: str) -> Grant:
        """The key's live lease (:class:`NotFoundError` if none)."""
        return await self._run(_wire.get_req(key))

    async def list(self, prefix: str = "", *, limit: int = 0, after: str = "") -> List[Grant]:
        """One page of live leases under ``prefix``, by key."""
        return await self._run(_wire.list_req(prefix, limit, after))

    async def open_session(self, holder: str, ttl: float = DEFAULT_TTL, *, allow_long: bool = False) -> SessionInfo:
        """Open a session; nothing keeps it alive (:class:`AsyncSession` does)."""
        return await self._run(_wire.session_open_req(holder, ttl, allow_long))

    async def extend_session(self, sid: int, holder: str) -> SessionInfo:
        """Renew a session and every lock under it."""
        return await self._run(_wire.session_extend_req(sid, holder))

    async def close_session(self, sid: int, holder: str) -> SessionInfo:
        """End a session, releasing every lock under it."""
        return await self._run(_wire.session_close_req(sid, holder))

    def watch(
        self,
        prefix: str = "",
        *,
        key: Optional[str] = None,
        after: Union[Revision, str, None] = None,
        wait: float = 30.0,
        limit: int = 0,
    ) -> "AsyncWatch":
        """An async iterator of :class:`Event` (see :meth:`fencelock.Client.watch`).

        >>> async for ev in c.watch("jobs/", after="0"):              # doctest: +SKIP
        ...     print(ev.revision, ev.type, ev.key)
        """
        return AsyncWatch(self, prefix, key=key, after=after, wait=wait, limit=limit)

    async def watch_list(self, prefix: str = "", *, key: Optional[str] = None) -> Tuple[List[Grant], Revision]:
        """The live leases under ``prefix`` (or of ``key``) and the revision they were read at."""
        _, rev, locks = await self._run(_wire.watch_list_req(prefix, key))
        return locks, rev

    async def whoami(self) -> WhoAmI:
        """The principal the credential authenticates as."""
        return await self._run(_wire.whoami_req())

    async def acl_bootstrap(self) -> str:
        """Turn ACLs on; the admin secret, shown once."""
        return await self._run(_wire.acl_bootstrap_req())

    async def acl_create_token(
        self, name: str, policies: Sequence[str], *, no_secret: bool = False, replace: bool = False
    ) -> str:
        """Create a principal; its secret (admin)."""
        return await self._run(_wire.acl_token_create_req(name, policies, no_secret, replace))

    async def acl_set_policy(self, name: str, rules: Sequence[Union[str, Dict[str, Any]]]) -> None:
        """Add or replace a policy, rules as ``PREFIX:VERBS[:deny]`` (admin)."""
        await self._run(_wire.acl_policy_set_req(name, rules))

    async def members(self) -> Dict[str, Any]:
        """The raft configuration as the answering node sees it."""
        return await self._run(_wire.members_req())

    async def own_holder(self, holder: Optional[str]) -> Tuple[str, bool]:
        """See :meth:`fencelock.Client.own_holder`."""
        if holder:
            return holder, False
        h = _wire.default_holder()
        if not self._auth:
            return h, True
        if self._principal is None:
            w = await self.whoami()
            self._principal = w.principal if w.auth else ""
        return (self._principal + "/" + h if self._principal else h), True

    # ---- transport --------------------------------------------------

    async def _run(self, req: Req[T], *, deadline: Optional[float] = None, timeout: Optional[float] = None) -> T:
        payload = req.payload()
        base = self.timeout if timeout is None else timeout
        if req.at:
            return req.parse(await self._once(req.at, req, payload, base + req.wait))
        f = _wire.Failover(self._addrs, self.rounds)
        while True:
            t = base + req.wait
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise f.last or UnreachableError("fencelock: deadline passed before a node answered")
                t = min(t, left)
            addr = f.addr()
            try:
                if req.wait > 0 and self.wait_check > 0:
                    d = await self._once_watched(addr, req, payload, t)
                else:
                    d = await self._once(addr, req, payload, t)
                self._addrs.prefer(addr)
                return req.parse(d)
            except FencelockError as e:
                pause = f.failed(addr, e)
                if pause is None:
                    raise
                if pause > 0:
                    if deadline is not None:
                        pause = min(pause, max(0.0, deadline - time.monotonic()))
                    await asyncio.sleep(pause)

    async def _once_watched(self, addr: str, req: Req[Any], payload: Optional[bytes], timeout: float) -> Dict[str, Any]:
        """A waiting call whose node is asked every ``wait_check`` whether it still answers."""
        task = asyncio.ensure_future(self._once(addr, req, payload, timeout))
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.wait_check)
                if task in done:
                    return task.result()
                try:
                    await self._once(addr, _wire.health_req(addr), None, self.wait_check)
                except FencelockError as e:
                    if task.done():
                        return task.result()
                    raise UnreachableError("fencelock: %s stopped answering while we waited: %s" % (addr, e)) from None
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    def _ctx(self) -> ssl.SSLContext:
        if self._ssl is not None:
            return self._ssl
        if self._default_ssl is None:
            self._default_ssl = ssl.create_default_context()
        return self._default_ssl

    async def _once(self, addr: str, req: Req[Any], payload: Optional[bytes], timeout: float) -> Dict[str, Any]:
        """One exchange with addr, on a kept connection if one is idle; a kept one
        the server closed meanwhile fails before any answer, and the request goes
        once more on a new connection (a write's request id makes that safe)."""
        host, port, tls = _wire.host_port(addr)
        hostport = addr.split("://", 1)[1]
        head = ["%s %s HTTP/1.1" % (req.method, req.target())]
        for k, v in _wire.headers_for(req, self._auth, hostport).items():
            head.append("%s: %s" % (k, v))
        head.append("Content-Length: %d" % len(payload or b""))
        data = ("\r\n".join(head) + "\r\n\r\n").encode() + (payload or b"")
        end = time.monotonic() + timeout
        conn = self._pool.get(addr)
        while True:
            reused = conn is not None
            left = max(end - time.monotonic(), 0.001)
            keep = False
            writer: Optional[asyncio.StreamWriter] = conn[1] if conn is not None else None
            try:
                async def exchange() -> Tuple[int, bytes, bool]:
                    nonlocal conn, writer
                    if conn is None:
                        self._pool.dialed += 1
                        conn = await asyncio.open_connection(
                            host, port, ssl=self._ctx() if tls else None, server_hostname=host if tls else None)
                        writer = conn[1]
                    conn[1].write(data)
                    await conn[1].drain()
                    return await _read_answer(conn[0])

                status, raw, keep = await asyncio.wait_for(exchange(), left)
            except ssl.SSLError as e:
                if reused and _stale(e):
                    conn = None
                    continue
                if _wire.tls_meets_plain(e):
                    raise _wire.speaks_plain_error(addr) from None
                setting = _wire.tls_setting_error(addr, e)
                if setting is not None:
                    raise setting from None
                raise UnreachableError("fencelock: %s: TLS: %s" % (addr, e)) from None
            except asyncio.TimeoutError:
                raise UnreachableError("fencelock: %s: timed out after %.3gs" % (addr, timeout)) from None
            except (OSError, asyncio.IncompleteReadError, ValueError) as e:
                if reused and _stale(e):
                    conn = None
                    continue
                if not tls and isinstance(e, (ConnectionResetError, asyncio.IncompleteReadError)):
                    if await asyncio.get_running_loop().run_in_executor(
                            None, _wire.plain_meets_tls, host, port, left):
                        raise _wire.speaks_tls_error(addr) from None
                raise UnreachableError("fencelock: %s: %s" % (addr, e or type(e).__name__)) from None
            finally:
                if not keep and writer is not None:
                    writer.close()
            assert conn is not None
            self._pool.put(addr, conn)
            return _wire.decode(addr, status, raw, req.subject())


class _AsyncKeeper:
    """The keep-alive task of an AsyncLease or AsyncSession, on KeepAlive's rules:
    one task runs the rules, each attempt is a task of its own."""

    def __init__(
        self,
        client: AsyncClient,
        ttl: float,
        sent: float,
        send: Callable[[str, float], Awaitable[Callable[[], None]]],
        *,
        what: str = "extend",
        on_lost: Optional[Callable[[str], None]],
    ) -> None:
        self.ttl = ttl
        self.core = KeepAlive(client._addrs, ttl, sent, what=what)
        self._send = send
        self._on_lost = on_lost
        self._task: Optional["asyncio.Task[None]"] = None
        self._inflight: Dict[int, "asyncio.Task[None]"] = {}
        self._results: List[Tuple[int, Optional[FencelockError], Optional[Callable[[], None]]]] = []
        self._kick = asyncio.Event()
        self._hooks: List[Callable[[str], None]] = []
        self._extended: Optional[asyncio.Event] = None
        self._announced = False
        self.ended = asyncio.Event()

    @property
    def reason(self) -> str:
        return self.core.detail

    @property
    def cause(self) -> str:
        return self.core.cause

    @property
    def extensions(self) -> int:
        return self.core.extensions

    def check(self) -> bool:
        self.core.check(time.monotonic())
        self._sync()
        return self.core.ended

    def extended(self) -> asyncio.Event:
        if self._extended is None:
            self._extended = asyncio.Event()
        return self._extended

    def on_end(self, hook: Callable[[str], None]) -> None:
        if self.core.ended:
            hook(self.core.detail)
        else:
            self._hooks.append(hook)

    def start(self) -> None:
        if not self.check():
            self._task = asyncio.ensure_future(self._loop())

    async def stop(self, cause: str) -> bool:
        held = self.core.end(cause, time.monotonic())
        self._sync()
        t = self._task
        if t is not None and t is not asyncio.current_task():
            self._kick.set()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        return held

    def _sync(self) -> None:
        """Cancel the attempts the rules gave up on; announce the end, once."""
        out = self.core.out_ids()
        for attempt_id in [i for i in self._inflight if i not in out]:
            self._inflight.pop(attempt_id).cancel()
        if not self.core.ended or self._announced:
            return
        self._announced = True
        self.ended.set()
        self._kick.set()
        reason = self.core.detail
        hooks, self._hooks = self._hooks, []
        for h in hooks:
            h(reason)
        if not self.core.by_owner and self._on_lost is not None:
            self._on_lost(reason)

    async def _loop(self) -> None:
        while True:
            self._kick.clear()
            now = time.monotonic()
            launch: List[Attempt] = []
            results, self._results = self._results, []
            for attempt_id, err, confirm in results:
                ok, more = self.core.answered(attempt_id, now, err)
                launch += more
                if ok:
                    if confirm is not None:
                        confirm()
                    if self._extended is not None:
                        self._extended.set()
                        self._extended = None
            launch += self.core.step(now)
            self._sync()
            if self.core.ended:
                return
            for a in launch:
                self._inflight[a.id] = asyncio.ensure_future(self._attempt(a))
            wake = self.core.wake_at()
            if wake is not None and not self._results:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._kick.wait(), max(0.0, wake - time.monotonic()))

    async def _attempt(self, a: Attempt) -> None:
        err: Optional[FencelockError] = None
        confirm: Optional[Callable[[], None]] = None
        try:
            confirm = await self._send(a.addr, a.timeout + 1.0)
        except FencelockError as e:
            err = e
        except asyncio.CancelledError:
            return  # abandoned by the rules
        except Exception as e:  # noqa: BLE001 - a bug in a send must not look like a confirmation
            err = InternalError("fencelock: %s: %s" % (a.addr, e))
        self._inflight.pop(a.id, None)
        self._results.append((a.id, err, confirm))
        self._kick.set()


class AsyncLease:
    """The asyncio flavour of :class:`fencelock.Lease`: ``async with`` acquires
    (waiting its turn), a task keeps it alive, exit releases.

    >>> async with AsyncLease(c, "jobs/nightly", ttl=10) as lease:    # doctest: +SKIP
    ...     await write(lease.token)
    ...     lease.ensure()
    >>> async with AsyncLease(c, "pool/gpu", permits=4, wait=0) as permit: ...   # doctest: +SKIP

    ``wait`` (None: as long as it takes; 0: once), ``cause``, ``reason``,
    ``safe_until()``, ``stop_by()`` and ``held_until()`` as for
    :class:`fencelock.Lease`; ``lost_event`` is an :class:`asyncio.Event`;
    ``on_lost(reason)`` is called once from the keep-alive task when it is lost.
    """

    def __init__(
        self,
        client: AsyncClient,
        key: str,
        holder: Optional[str] = None,
        ttl: float = DEFAULT_TTL,
        *,
        wait: Optional[float] = None,
        lock_delay: float = 0.0,
        permits: int = 0,
        mode: Optional[Mode] = None,
        allow_long: bool = False,
        on_lost: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.client = client
        self.key = key
        self.holder = holder or ""
        self.ttl = _wire.check_ttl(ttl, allow_long=allow_long)
        self.wait = _wire.check_wait(wait)
        self.lock_delay = _wire.check_lock_delay(lock_delay)
        self.permits = permits
        self.mode = _wire.check_mode(mode)
        self.allow_long = allow_long
        self.grant: Optional[Grant] = None
        self._on_lost = on_lost
        self._keeper: Optional[_AsyncKeeper] = None
        self._closed = False

    @property
    def token(self) -> int:
        """The fencing token (0 before it is acquired)."""
        return self.grant.token if self.grant else 0

    @property
    def slot(self) -> int:
        """A semaphore permit's number (0 for other kinds)."""
        return self.grant.slot if self.grant else 0

    @property
    def lost(self) -> bool:
        """True once the lease stopped being safe to act on (lost, or released); reads the clock."""
        if self._keeper is None:
            return False
        return self._keeper.check()

    @property
    def lost_event(self) -> asyncio.Event:
        """Set when the lease ends."""
        return self._k().ended

    @property
    def cause(self) -> str:
        """Why it ended, in one word ("" while held)."""
        return self._keeper.cause if self._keeper else ""

    @property
    def reason(self) -> str:
        """Why it ended, in a sentence ("" while held)."""
        return self._keeper.reason if self._keeper else ""

    @property
    def extensions(self) -> int:
        """Extensions confirmed so far."""
        return self._keeper.extensions if self._keeper else 0

    def extended(self) -> asyncio.Event:
        """An event set when the next extension is confirmed."""
        return self._k().extended()

    def safe_until(self) -> float:
        """0.89×TTL after the send of the last confirmed extension (``time.monotonic()``)."""
        return self._k().core.deadline()

    def stop_by(self) -> float:
        """0.99×TTL after that send: everything under the lease stopped by then."""
        return self._k().core.stop_by()

    def held_until(self) -> float:
        """TTL after that send: the earliest the server may grant the key to another."""
        return self._k().core.held_until()

    def ensure(self) -> None:
        """Raise :class:`LeaseLostError` if the lease is lost."""
        if self.lost:
            raise LeaseLostError("fencelock: lease on %r lost: %s" % (self.key, self.reason), reason=self.reason,
                                 cause=self.cause, key=self.key)

    def _k(self) -> _AsyncKeeper:
        if self._keeper is None:
            raise LeaseLostError("fencelock: lease on %r not acquired" % self.key, reason="not acquired",
                                 cause="not_acquired", key=self.key)
        return self._keeper

    async def acquire(self) -> "AsyncLease":
        """Take the key and start the keep-alive task; what ``async with`` does on entry."""
        c = self.client
        holder, generated = await c.own_holder(self.holder)
        self.holder = holder
        sent = time.monotonic()
        try:
            g = await c.acquire(self.key, holder, self.ttl, wait=self.wait, lock_delay=self.lock_delay,
                                permits=self.permits, mode=self.mode, allow_long=self.allow_long)
        except FencelockError:
            raise
        except BaseException:
            if self.wait > 0 and generated:
                await asyncio.shield(self._release_quietly(0))
            raise
        b = budget_for(self.ttl)
        if time.monotonic() - sent >= b.every:
            # A queued grant is dated only by when we asked: an extension dates it afresh.
            again = time.monotonic()
            try:
                g = await c.extend(self.key, holder, g.token, self.ttl, allow_long=self.allow_long)
            except NotHeldError as e:
                raise LeaseLostError("fencelock: lease on %r lost right after the wait: %s" % (self.key, e.message),
                                     reason=e.message, cause="not_held", key=self.key)
            sent = again
            if time.monotonic() - sent >= b.give_up:
                await self._release_quietly(g.token)
                raise LeaseLostError("fencelock: lease on %r: the extension after the wait came too late" % self.key,
                                     reason="expired: the extension after the wait came too late", cause="expired",
                                     key=self.key)
        self.grant = g
        token, ttl, allow_long = g.token, self.ttl, self.allow_long

        async def send(addr: str, timeout: float) -> Callable[[], None]:
            ext = await c._run(_wire.extend_req(self.key, holder, token, ttl, at=addr, allow_long=allow_long),
                               timeout=timeout)

            def confirm() -> None:
                self.grant = ext

            return confirm

        self._keeper = _AsyncKeeper(c, self.ttl, sent, send, on_lost=self._on_lost)
        self._keeper.start()
        return self

    async def release(self) -> None:
        """Stop the keep-alive and give the lock back; raises :class:`LeaseLostError`
        if it had been lost, :class:`NotHeldError` if the server no longer had it."""
        if self._closed or self._keeper is None or self.grant is None:
            return
        self._closed = True
        k = self._keeper
        held = await k.stop("released")
        lost = None if held else LeaseLostError("fencelock: lease on %r lost: %s" % (self.key, k.reason),
                                                reason=k.reason, cause=k.cause, key=self.key)
        try:
            ok = await self.client.release(self.key, self.holder, self.grant.token,
                                           deadline=time.monotonic() + self.client.timeout)
        except FencelockError as e:
            if lost is not None:
                raise lost from e
            raise
        if lost is not None:
            raise lost
        if not ok:
            raise NotHeldError("fencelock: the server had no live lease on %r with token %d to release"
                               % (self.key, self.grant.token), code="not_held")

    async def close(self) -> None:
        """:meth:`release`, quietly: what ``async with`` does on exit."""
        with contextlib.suppress(FencelockError):
            await self.release()

    async def _release_quietly(self, token: int) -> None:
        with contextlib.suppress(FencelockError):
            await self.client.release(self.key, self.holder, token, deadline=time.monotonic() + 2.0)

    async def __aenter__(self) -> "AsyncLease":
        if self._keeper is None:
            await self.acquire()
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()


class AsyncSession:
    """The asyncio flavour of :class:`fencelock.Session`: many locks, one keep-alive task.

    >>> async with AsyncSession(c, "batch", ttl=15) as s:             # doctest: +SKIP
    ...     a = await s.acquire("jobs/a")            # waits its turn
    ...     b = await s.acquire("jobs/b", wait=0)    # try once
    ...     x, y = await s.acquire_all(["acct/1", "acct/2"])
    """

    def __init__(
        self,
        client: AsyncClient,
        holder: Optional[str] = None,
        ttl: float = DEFAULT_TTL,
        *,
        allow_long: bool = False,
        on_lost: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.client = client
        self.holder = holder or ""
        self.ttl = _wire.check_ttl(ttl, allow_long=allow_long)
        self.allow_long = allow_long
        self.id = 0
        self.info: Optional[SessionInfo] = None
        self._on_lost = on_lost
        self._keeper: Optional[_AsyncKeeper] = None
        self._closed = False
        self._waits: "set[asyncio.Task[Any]]" = set()

    @property
    def lost(self) -> bool:
        """True once the session ended: lost, or closed; reads the clock."""
        if self._keeper is None:
            return False
        return self._keeper.check()

    @property
    def lost_event(self) -> asyncio.Event:
        """Set when the session ends."""
        return self._k().ended

    @property
    def cause(self) -> str:
        """Why it ended, in one word ("closed" after close)."""
        return self._keeper.cause if self._keeper else ""

    @property
    def reason(self) -> str:
        """Why it ended, in a sentence."""
        return self._keeper.reason if self._keeper else ""

    @property
    def extensions(self) -> int:
        """Extensions confirmed so far."""
        return self._keeper.extensions if self._keeper else 0

    def extended(self) -> asyncio.Event:
        """An event set when the next extension is confirmed."""
        return self._k().extended()

    def safe_until(self) -> float:
        """0.89×TTL after the send of the last confirmed extension (``time.monotonic()``)."""
        return self._k().core.deadline()

    def stop_by(self) -> float:
        """0.99×TTL after that send."""
        return self._k().core.stop_by()

    def held_until(self) -> float:
        """TTL after that send: the earliest the server may end the session."""
        return self._k().core.held_until()

    def ensure(self) -> None:
        """Raise :class:`SessionLostError` if the session has ended."""
        self._k()
        if self.lost:
            raise self._lost_error()

    def _k(self) -> _AsyncKeeper:
        if self._keeper is None:
            raise SessionLostError("fencelock: session not open", reason="not open", cause="not_open")
        return self._keeper

    def _lost_error(self) -> SessionLostError:
        said = "closed" if self.cause == "closed" else "lost: " + self.reason
        return SessionLostError("fencelock: session %d %s" % (self.id, said), reason=self.reason, cause=self.cause)

    async def open(self) -> "AsyncSession":
        """Open the session and start its keep-alive task; what ``async with`` does on entry."""
        c = self.client
        self.holder, _ = await c.own_holder(self.holder)
        sent = time.monotonic()
        self.info = await c.open_session(self.holder, self.ttl, allow_long=self.allow_long)
        self.id = self.info.id
        holder, sid = self.holder, self.id

        async def send(addr: str, timeout: float) -> Callable[[], None]:
            info = await c._run(_wire.session_extend_req(sid, holder, at=addr), timeout=timeout)

            def confirm() -> None:
                self.info = info

            return confirm

        self._keeper = _AsyncKeeper(c, self.ttl, sent, send, what="session extend", on_lost=self._on_lost)
        self._keeper.on_end(self._ended)
        self._keeper.start()
        return self

    def _ended(self, reason: str) -> None:
        for t in list(self._waits):
            t.cancel()  # waits under the session end with it

    async def close(self) -> None:
        """Stop the keep-alive and close the session, releasing every lock under it (best effort)."""
        if self._closed or self._keeper is None:
            return
        self._closed = True
        await self._keeper.stop("closed")
        with contextlib.suppress(FencelockError):
            self.info = await self.client.close_session(self.id, self.holder)

    async def __aenter__(self) -> "AsyncSession":
        if self._keeper is None:
            await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()

    async def acquire(self, key: str, *, wait: Optional[float] = None, lock_delay: float = 0.0) -> "AsyncSessionLock":
        """Take ``key`` under the session (``wait`` as :meth:`fencelock.Session.acquire`:
        None, the default, as long as it takes; 0 once)."""
        self.ensure()
        wait = _wire.check_wait(wait)
        task = asyncio.ensure_future(
            self.client.acquire(key, self.holder, wait=wait, session=self.id, lock_delay=lock_delay))
        self._waits.add(task)
        try:
            g = await task
        except asyncio.CancelledError:
            if self.lost:
                if wait > 0:
                    await asyncio.shield(self._release_quietly(key))
                raise self._lost_error() from None
            raise
        except FencelockError as e:
            if self.lost:
                raise self._lost_error() from e
            raise
        finally:
            self._waits.discard(task)
        if self.lost:
            raise self._lost_error()
        return AsyncSessionLock(self, g)

    async def _release_quietly(self, key: str) -> None:
        with contextlib.suppress(FencelockError):
            await self.client.release(key, self.holder, deadline=time.monotonic() + 2.0)

    async def acquire_all(
        self, keys: Sequence[str], *, wait: Optional[float] = None, lock_delay: float = 0.0
    ) -> List["AsyncSessionLock"]:
        """Take every key under the session in one command, or none (retried for ``wait``:
        None, the default, as long as it takes; the retries stop when the session ends)."""
        self.ensure()
        wait = _wire.check_wait(wait)
        end = time.monotonic() + wait
        while True:
            try:
                gs = await self.client.acquire_all(keys, self.holder, session=self.id, lock_delay=lock_delay,
                                                   wait=max(0.0, min(end - time.monotonic(), 1.0)))
                break
            except FencelockError as e:
                if self.lost:
                    raise self._lost_error() from e
                if end - time.monotonic() <= 0 or e.code not in ("held", "lock_delay"):
                    raise
        return [AsyncSessionLock(self, g) for g in gs]


class AsyncSessionLock:
    """A lock held under an :class:`AsyncSession`; ``token`` is its fencing token."""

    def __init__(self, session: AsyncSession, grant: Grant) -> None:
        self.session = session
        self.grant = grant
        self.key = grant.key
        self.token = grant.token
        self._released = False

    @property
    def lost(self) -> bool:
        """True once released, or once the session ended."""
        return self._released or self.session.lost

    @property
    def cause(self) -> str:
        """Why it ended, in one word: "released", or the session's cause."""
        return "released" if self._released else self.session.cause

    def ensure(self) -> None:
        """Raise :class:`SessionLostError` once released or once the session ended."""
        if self._released:
            raise SessionLostError("fencelock: lock on %r released" % self.key, reason="released",
                                   cause="released", key=self.key)
        self.session.ensure()

    async def release(self) -> None:
        """Give this lock back, leaving the session (:class:`NotHeldError` if the server had none)."""
        if self._released:
            return
        self._released = True
        s = self.session
        if not await s.client.release(self.key, s.holder, self.token):
            raise NotHeldError("fencelock: the server had no live lock on %r with token %d to release"
                               % (self.key, self.token), code="not_held")

    async def __aenter__(self) -> "AsyncSessionLock":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        with contextlib.suppress(FencelockError):
            await self.release()


class AsyncWatch:
    """An async iterator of :class:`Event`: the asyncio flavour of :class:`fencelock.Watch`.

    >>> async for ev in c.watch("jobs/", after="0"):                  # doctest: +SKIP
    ...     print(ev.revision, ev.type)

    ``revision`` is how far it has come; leaving the ``async for`` (or
    cancelling the task) ends the long-poll in flight. It ends with
    :class:`CompactedError` when the history no longer reaches back.
    """

    def __init__(
        self,
        client: AsyncClient,
        prefix: str = "",
        *,
        key: Optional[str] = None,
        after: Union[Revision, str, None] = None,
        wait: float = 30.0,
        limit: int = 0,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.key = key
        self.wait = min(wait, 300.0) if wait > 0 else 30.0
        self.limit = limit
        self._started = after is not None
        self._after = Revision.parse(after) if after is not None else Revision(0, 0)
        self._rev = self._after
        self._tail: Optional[Revision] = None
        self._buf: List[Event] = []
        self.error: Optional[FencelockError] = None

    @property
    def revision(self) -> Revision:
        """The revision reached; watching after it later misses nothing."""
        return self._rev

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        backoff = 0.05
        while True:
            if self._buf:
                ev = self._buf.pop(0)
                self._rev = ev.revision
                if not self._buf and self._tail is not None:
                    self._rev, self._tail = max(self._rev, self._tail), None
                return ev
            if self.error is not None:
                raise StopAsyncIteration
            req = _wire.watch_req(self.prefix, self.key, self._after if self._started else None, self.wait, self.limit)
            try:
                events, rev, _ = await self.client._run(req)
            except FencelockError as e:
                if isinstance(e, UnavailableError):
                    await asyncio.sleep(_wire.jitter(backoff))
                    backoff = min(2 * backoff, 1.0)
                    continue
                if isinstance(e, CompactedError):
                    e.message = "fencelock: watch after %s: compacted: the oldest revision kept is %s" % (
                        self._after, e.compact_revision or "?")
                self.error = e
                raise
            backoff = 0.05
            for ev in events:
                if self._started and ev.revision <= self._after:
                    continue
                self._buf.append(ev)
                self._after = ev.revision
            if not self._started or rev > self._after:
                self._after = rev
                if self._buf:
                    self._tail = rev
                else:
                    self._rev = rev
            self._started = True


class AsyncLeader(AsyncLease):
    """An elected candidate (:meth:`AsyncElection.campaign`): an :class:`AsyncLease`
    whose ``token`` is the leadership's fencing token."""

    @property
    def candidate(self) -> str:
        """The leader's name."""
        return self.holder

    async def resign(self) -> None:
        """Give leadership up: the next candidate is elected in the same step."""
        await self.close()


class AsyncElection:
    """The asyncio flavour of :class:`fencelock.Election`.

    >>> e = AsyncElection(c, "elections/billing", ttl=10)              # doctest: +SKIP
    >>> async with await e.campaign("worker-7") as leader:
    ...     await db.write(job, leader.token)
    >>> async for ld in e.observe():
    ...     print(ld.candidate, ld.token)
    """

    def __init__(self, client: AsyncClient, name: str, *, ttl: float = DEFAULT_TTL, allow_long: bool = False) -> None:
        self.client = client
        self.name = name
        self.ttl = _wire.check_ttl(ttl, allow_long=allow_long)
        self.allow_long = allow_long

    async def campaign(
        self, candidate: str, *, wait: Optional[float] = None, on_lost: Optional[Callable[[str], None]] = None
    ) -> AsyncLeader:
        """Queue ``candidate`` and return once it is elected."""
        if not candidate:
            raise InvalidError("fencelock: a candidate needs a name", code="invalid_argument", field="holder")
        leader = AsyncLeader(self.client, self.name, candidate, self.ttl, wait=wait, allow_long=self.allow_long,
                             on_lost=on_lost)
        await leader.acquire()
        return leader

    async def leader(self) -> Leadership:
        """Who leads now ("" when nobody does)."""
        locks, rev = await self.client.watch_list(key=self.name)
        if len(locks) == 1:
            return Leadership(locks[0].holder, locks[0].token, rev)
        return Leadership("", 0, rev)

    async def observe(self) -> AsyncIterator[Leadership]:
        """Now, then every change; reads the present again after a compaction."""
        while True:
            now = await self.leader()
            yield now
            w = self.client.watch(key=self.name, after=now.revision)
            try:
                async for ev in w:
                    if ev.type == "granted":
                        yield Leadership(ev.holder, ev.token, ev.revision, ev.at)
                    elif ev.type in ("released", "expired"):
                        yield Leadership("", 0, ev.revision, ev.at)
            except CompactedError:
                continue
