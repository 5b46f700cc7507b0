"""fencelock on asyncio: the client, leases, sessions, watches and elections
on asyncio streams (standard library only).

The same calls, rules and errors as the threaded flavour, awaited:

>>> import asyncio
>>> from fencelock.aio import AsyncClient, AsyncLease, AsyncSession
>>> async def main() -> None:                                         # doctest: +SKIP
...     c = AsyncClient("127.0.0.1:7470")
...     g = await c.acquire("jobs/nightly", "alice", 30)
...     await c.release("jobs/nightly", "alice", g.token)
...     async with AsyncLease(c, "jobs/nightly", ttl=10) as lease:
...         await do_work(lease.token)
...         lease.ensure()                      # LeaseLostError once lost
...     async with AsyncSession(c, ttl=15) as s:
...         a = await s.acquire("jobs/a")
...         b, d = await s.acquire_all(["jobs/b", "jobs/d"])
...     async for ev in c.watch("jobs/", after="0"):
...         print(ev.revision, ev.type, ev.key)
>>> asyncio.run(main())                                                # doctest: +SKIP

Each keep-alive is one task of the running loop: it extends about every
TTL/3 and declares the lease lost TTL/2 after the send of the last
confirmed extension (DESIGN.md section 4). It can only do so while the
loop runs: a loop blocked by a synchronous call for longer than TTL/6
costs the lease, as a paused process would. ``lease.lost`` reads the
clock, so it is right even then.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple, Type, TypeVar, Union

from . import _wire
from ._wire import (
    DEFAULT_TTL,
    FOREVER,
    MAX_WAIT_ROUND,
    Event,
    ExtendResult,
    Grant,
    KeepState,
    Leadership,
    Req,
    Revision,
    SessionInfo,
    WhoAmI,
)
from .errors import (
    CompactedError,
    FencelockError,
    HeldError,
    InvalidError,
    LeaseLostError,
    NoSessionError,
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


async def _read_answer(reader: asyncio.StreamReader) -> Tuple[int, bytes]:
    """Read one HTTP/1.1 answer: (status, body)."""
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
        return status, bytes(body)
    if "content-length" in headers:
        return status, await reader.readexactly(int(headers["content-length"]))
    return status, await reader.read(_MAX_ANSWER)


class AsyncClient(_wire.ClientSettings):
    """The asyncio flavour of :class:`fencelock.Client`: same arguments, same
    calls (awaited), same failover, TLS and errors.

    >>> c = AsyncClient("127.0.0.1:7470", ca="ca.pem", cert="alice.pem", key="alice-key.pem")  # doctest: +SKIP
    >>> g = await c.acquire("jobs/nightly", "alice", 30)               # doctest: +SKIP
    """

    # ---- lock calls (see fencelock.Client for each) -------------------

    async def acquire(
        self,
        key: str,
        holder: str,
        ttl: Optional[float] = None,
        *,
        wait: float = 0.0,
        session: int = 0,
        lock_delay: float = 0.0,
        permits: int = 0,
        mode: str = "",
        deadline: Optional[float] = None,
    ) -> Grant:
        """:meth:`fencelock.Client.acquire`, awaited: a NEW fencing token.

        >>> g = await c.acquire("jobs/nightly", "bob", 30, wait=5)    # doctest: +SKIP
        """
        if ttl is None:
            ttl = DEFAULT_TTL
        end = time.monotonic() + wait
        while True:
            rnd = min(end - time.monotonic(), MAX_WAIT_ROUND) if wait > 0 else 0.0
            req = _wire.acquire_req(key, holder, ttl, wait=max(rnd, 0.001) if wait > 0 else 0.0, session=session,
                                    lock_delay=lock_delay, permits=permits, mode=mode)
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
        session: int = 0,
        lock_delay: float = 0.0,
        retry_for: float = 0.0,
    ) -> List[Grant]:
        """:meth:`fencelock.Client.acquire_all`, awaited: every key or none."""
        req_ttl = DEFAULT_TTL if ttl is None else ttl
        end = time.monotonic() + retry_for
        pause = 0.01
        while True:
            try:
                return await self._run(_wire.acquire_all_req(keys, holder, req_ttl, session=session,
                                                             lock_delay=lock_delay))
            except FencelockError as e:
                left = end - time.monotonic()
                if retry_for <= 0 or left <= 0 or not _wire.retryable_for_all(e):
                    raise
                await asyncio.sleep(min(_wire.jitter(pause), left))
                pause = min(2 * pause, 0.5)

    async def renew(self, key: str, holder: str, ttl: float) -> Grant:
        """Re-acquire by the live holder: a NEW token."""
        return await self._run(_wire.renew_req(key, holder, ttl))

    async def extend(self, key: str, holder: str, token: int, ttl: float) -> Grant:
        """Keep-alive under the SAME token."""
        return await self._run(_wire.extend_req(key, holder, token, ttl))

    async def extend_batch(self, holder: str, ttl: float, leases: Sequence[Tuple[str, int]]) -> List[ExtendResult]:
        """Extend many of ``holder``'s ``(key, token)`` leases in one log entry."""
        return await self._run(_wire.extend_batch_req(holder, ttl, leases))

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

    async def open_session(self, holder: str, ttl: float = DEFAULT_TTL) -> SessionInfo:
        """Open a session; nothing keeps it alive (:class:`AsyncSession` does)."""
        return await self._run(_wire.session_open_req(holder, ttl))

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
        host, port, tls = _wire.host_port(addr)
        hostport = addr.split("://", 1)[1]
        head = ["%s %s HTTP/1.1" % (req.method, req.target())]
        for k, v in _wire.headers_for(req, self._auth, hostport).items():
            head.append("%s: %s" % (k, v))
        head.append("Content-Length: %d" % len(payload or b""))
        head.append("Connection: close")
        data = ("\r\n".join(head) + "\r\n\r\n").encode() + (payload or b"")
        writer: Optional[asyncio.StreamWriter] = None
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=self._ctx() if tls else None, server_hostname=host if tls else None)
                writer.write(data)
                await writer.drain()
                status, raw = await _read_answer(reader)
        except ssl.SSLError as e:
            if _wire.tls_meets_plain(e):
                raise _wire.speaks_plain_error(addr) from None
            raise UnreachableError("fencelock: %s: TLS: %s" % (addr, e)) from None
        except TimeoutError:
            raise UnreachableError("fencelock: %s: timed out after %.3gs" % (addr, timeout)) from None
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            if not tls and isinstance(e, (ConnectionResetError, asyncio.IncompleteReadError)):
                if await asyncio.to_thread(_wire.plain_meets_tls, host, port, timeout):
                    raise _wire.speaks_tls_error(addr) from None
            raise UnreachableError("fencelock: %s: %s" % (addr, e or type(e).__name__)) from None
        finally:
            if writer is not None:
                writer.close()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(writer.wait_closed(), 0.5)
        return _wire.decode(addr, status, raw)


class _AsyncKeeper:
    """The keep-alive task of an AsyncLease or AsyncSession (KeepState's rules)."""

    def __init__(
        self,
        client: AsyncClient,
        ttl: float,
        sent: float,
        send: Callable[[str, float], Awaitable[Callable[[], None]]],
        *,
        refused: Callable[[FencelockError], str],
        on_lost: Optional[Callable[[str], None]],
    ) -> None:
        self.ttl = ttl
        self.state = KeepState(client._addrs, ttl, sent)
        self._send = send
        self._refused = refused
        self._on_lost = on_lost
        self._task: Optional["asyncio.Task[None]"] = None
        self._hooks: List[Callable[[str], None]] = []
        self.ended = asyncio.Event()
        self.reason = ""
        self.ended_by_owner = False
        self.extensions = 0

    def check(self) -> None:
        if not self.ended.is_set() and time.monotonic() >= self.state.deadline():
            self.end(self.state.lost_reason(), owner=False)

    def end(self, reason: str, *, owner: bool) -> None:
        if self.ended.is_set():
            return
        self.reason, self.ended_by_owner = reason, owner
        self.ended.set()
        hooks, self._hooks = self._hooks, []
        for h in hooks:
            h(reason)
        if not owner and self._on_lost is not None:
            self._on_lost(reason)

    def on_end(self, hook: Callable[[str], None]) -> None:
        if self.ended.is_set():
            hook(self.reason)
        else:
            self._hooks.append(hook)

    def start(self) -> None:
        self.check()
        if not self.ended.is_set():
            self._task = asyncio.ensure_future(self._loop())

    async def stop(self, reason: str) -> bool:
        self.check()
        was_lost = self.ended.is_set() and not self.ended_by_owner
        self.end(reason, owner=True)
        t = self._task
        if t is not None and t is not asyncio.current_task():
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        return not was_lost

    async def _loop(self) -> None:
        while True:
            if not await self._sleep_until(self.state.due()):
                return
            while True:
                done, pause = await self._extend_once()
                if done:
                    break
                if pause > 0:
                    await asyncio.sleep(min(pause, max(0.0, self.state.deadline() - time.monotonic())))
            if self.ended.is_set():
                return

    async def _sleep_until(self, t: float) -> bool:
        while True:
            now = time.monotonic()
            self.check()
            if self.ended.is_set():
                return False
            if now >= t:
                return True
            await asyncio.sleep(min(t, self.state.deadline()) - now)

    async def _extend_once(self) -> Tuple[bool, float]:
        sent = time.monotonic()
        self.check()
        if self.ended.is_set():
            return True, 0.0
        addr = self.state.pick()
        try:
            confirm = await self._send(addr, self.state.attempt_timeout(sent))
        except FencelockError as err:
            if self.ended.is_set():
                return True, 0.0
            pause = self.state.failed(addr, err)
            if pause is None:
                self.end(self._refused(err), owner=False)
                return True, 0.0
            self.check()
            return self.ended.is_set(), pause
        if self.ended.is_set():
            return True, 0.0
        self.check()  # a confirmation after the deadline is too late
        if self.ended.is_set():
            return True, 0.0
        self.state.confirmed(addr, sent)
        confirm()
        self.extensions += 1
        return True, 0.0


class AsyncLease:
    """The asyncio flavour of :class:`fencelock.Lease`: ``async with`` acquires,
    a task keeps it alive, exit releases.

    >>> async with AsyncLease(c, "jobs/nightly", ttl=10, wait=FOREVER) as lease:  # doctest: +SKIP
    ...     await write(lease.token)
    ...     lease.ensure()
    >>> async with AsyncLease(c, "pool/gpu", permits=4) as permit: ...            # doctest: +SKIP

    ``lost_event`` is an :class:`asyncio.Event`; ``on_lost(reason)`` is
    called once from the keep-alive task when it is lost.
    """

    def __init__(
        self,
        client: AsyncClient,
        key: str,
        holder: Optional[str] = None,
        ttl: float = DEFAULT_TTL,
        *,
        wait: float = 0.0,
        lock_delay: float = 0.0,
        permits: int = 0,
        mode: str = "",
        on_lost: Optional[Callable[[str], None]] = None,
    ) -> None:
        if not ttl > 0:
            raise ValueError("fencelock: ttl must be positive")
        self.client = client
        self.key = key
        self.holder = holder or ""
        self.ttl = float(ttl)
        self.wait = float(wait)
        self.lock_delay = float(lock_delay)
        self.permits = permits
        self.mode = mode
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
        """True once the lease stopped being safe to act on (lost, or released)."""
        if self._keeper is None:
            return False
        self._keeper.check()
        return self._keeper.ended.is_set()

    @property
    def lost_event(self) -> asyncio.Event:
        """Set when the lease ends."""
        return self._k().ended

    @property
    def reason(self) -> str:
        """Why it ended ("" while held)."""
        return self._keeper.reason if self._keeper else ""

    @property
    def extensions(self) -> int:
        """Extensions confirmed so far."""
        return self._keeper.extensions if self._keeper else 0

    def safe_until(self) -> float:
        """TTL/2 after the send of the last confirmed extension (``time.monotonic()``)."""
        return self._k().state.deadline()

    def held_until(self) -> float:
        """TTL after that send: the earliest the server may grant the key to another."""
        return self._k().state.last_sent + self.ttl

    def ensure(self) -> None:
        """Raise :class:`LeaseLostError` if the lease is lost."""
        if self.lost:
            raise LeaseLostError("fencelock: lease on %r lost: %s" % (self.key, self.reason), reason=self.reason)

    def _k(self) -> _AsyncKeeper:
        if self._keeper is None:
            raise LeaseLostError("fencelock: lease on %r not acquired" % self.key, reason="not acquired")
        return self._keeper

    async def acquire(self) -> "AsyncLease":
        """Take the key and start the keep-alive task; what ``async with`` does on entry."""
        c = self.client
        holder, generated = await c.own_holder(self.holder)
        self.holder = holder
        sent = time.monotonic()
        try:
            g = await c.acquire(self.key, holder, self.ttl, wait=self.wait, lock_delay=self.lock_delay,
                                permits=self.permits, mode=self.mode)
        except FencelockError:
            raise
        except BaseException:
            if self.wait > 0 and generated:
                await asyncio.shield(self._release_quietly(0))
            raise
        if time.monotonic() - sent >= self.ttl / 3:
            again = time.monotonic()
            try:
                g = await c.extend(self.key, holder, g.token, self.ttl)
            except NotHeldError as e:
                raise LeaseLostError("fencelock: lease on %r lost right after the wait: %s" % (self.key, e.message),
                                     reason=e.message)
            sent = again
            if time.monotonic() - sent >= self.ttl / 2:
                await self._release_quietly(g.token)
                raise LeaseLostError("fencelock: lease on %r: the extension after the wait came too late" % self.key,
                                     reason="expired")
        self.grant = g
        token = g.token

        async def send(addr: str, timeout: float) -> Callable[[], None]:
            ext = await c._run(_wire.extend_req(self.key, holder, token, self.ttl, at=addr), timeout=timeout)

            def confirm() -> None:
                self.grant = ext

            return confirm

        def refused(e: FencelockError) -> str:
            if isinstance(e, NotHeldError):
                return "the server no longer has this grant: " + e.message
            return "extend refused: %s (%s)" % (e.message, e.code or e.status)

        self._keeper = _AsyncKeeper(c, self.ttl, sent, send, refused=refused, on_lost=self._on_lost)
        self._keeper.start()
        return self

    async def release(self) -> None:
        """Stop the keep-alive and give the lock back; raises :class:`LeaseLostError`
        if it had been lost, :class:`NotHeldError` if the server no longer had it."""
        if self._closed or self._keeper is None or self.grant is None:
            return
        self._closed = True
        held = await self._keeper.stop("released")
        lost = "" if held else self._keeper.reason
        ok = await self.client.release(self.key, self.holder, self.grant.token,
                                       deadline=time.monotonic() + self.client.timeout)
        if lost:
            raise LeaseLostError("fencelock: lease on %r lost: %s" % (self.key, lost), reason=lost)
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
    ...     a = await s.acquire("jobs/a")
    ...     b = await s.acquire("jobs/b", wait=FOREVER)
    ...     x, y = await s.acquire_all(["acct/1", "acct/2"])
    """

    def __init__(
        self,
        client: AsyncClient,
        holder: Optional[str] = None,
        ttl: float = DEFAULT_TTL,
        *,
        on_lost: Optional[Callable[[str], None]] = None,
    ) -> None:
        if not ttl > 0:
            raise ValueError("fencelock: ttl must be positive")
        self.client = client
        self.holder = holder or ""
        self.ttl = float(ttl)
        self.id = 0
        self.info: Optional[SessionInfo] = None
        self._on_lost = on_lost
        self._keeper: Optional[_AsyncKeeper] = None
        self._closed = False
        self._waits: "set[asyncio.Task[Any]]" = set()

    @property
    def lost(self) -> bool:
        """True once the session ended: lost, or closed."""
        if self._keeper is None:
            return False
        self._keeper.check()
        return self._keeper.ended.is_set()

    @property
    def lost_event(self) -> asyncio.Event:
        """Set when the session ends."""
        if self._keeper is None:
            raise SessionLostError("fencelock: session not open", reason="not open")
        return self._keeper.ended

    @property
    def reason(self) -> str:
        """Why it ended ("closed" after close)."""
        return self._keeper.reason if self._keeper else ""

    @property
    def extensions(self) -> int:
        """Extensions confirmed so far."""
        return self._keeper.extensions if self._keeper else 0

    def safe_until(self) -> float:
        """TTL/2 after the send of the last confirmed extension (``time.monotonic()``)."""
        if self._keeper is None:
            raise SessionLostError("fencelock: session not open", reason="not open")
        return self._keeper.state.deadline()

    def ensure(self) -> None:
        """Raise :class:`SessionLostError` if the session has ended."""
        if self._keeper is None:
            raise SessionLostError("fencelock: session not open", reason="not open")
        if self.lost:
            raise self._lost_error()

    def _lost_error(self) -> SessionLostError:
        said = "closed" if self.reason == "closed" else "lost: " + self.reason
        return SessionLostError("fencelock: session %d %s" % (self.id, said), reason=self.reason)

    async def open(self) -> "AsyncSession":
        """Open the session and start its keep-alive task; what ``async with`` does on entry."""
        c = self.client
        self.holder, _ = await c.own_holder(self.holder)
        sent = time.monotonic()
        self.info = await c.open_session(self.holder, self.ttl)
        self.id = self.info.id
        holder, sid = self.holder, self.id

        async def send(addr: str, timeout: float) -> Callable[[], None]:
            info = await c._run(_wire.session_extend_req(sid, holder, at=addr), timeout=timeout)

            def confirm() -> None:
                self.info = info

            return confirm

        def refused(e: FencelockError) -> str:
            if isinstance(e, NoSessionError):
                return "the server no longer has this session: " + e.message
            return "session extend refused: %s (%s)" % (e.message, e.code or e.status)

        self._keeper = _AsyncKeeper(c, self.ttl, sent, send, refused=refused, on_lost=self._on_lost)
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

    async def acquire(self, key: str, *, wait: float = 0.0, lock_delay: float = 0.0) -> "AsyncSessionLock":
        """Take ``key`` under the session (``wait`` as :meth:`fencelock.Session.acquire`)."""
        self.ensure()
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
        self, keys: Sequence[str], *, wait: float = 0.0, lock_delay: float = 0.0
    ) -> List["AsyncSessionLock"]:
        """Take every key under the session in one command, or none."""
        self.ensure()
        try:
            gs = await self.client.acquire_all(keys, self.holder, session=self.id, lock_delay=lock_delay,
                                               retry_for=wait)
        except FencelockError as e:
            if self.lost:
                raise self._lost_error() from e
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

    def ensure(self) -> None:
        """Raise :class:`SessionLostError` once released or once the session ended."""
        if self._released:
            raise SessionLostError("fencelock: lock on %r released" % self.key, reason="released")
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

    def __init__(self, client: AsyncClient, name: str, *, ttl: float = DEFAULT_TTL) -> None:
        self.client = client
        self.name = name
        self.ttl = ttl

    async def campaign(
        self, candidate: str, *, wait: float = FOREVER, on_lost: Optional[Callable[[str], None]] = None
    ) -> AsyncLeader:
        """Queue ``candidate`` and return once it is elected."""
        if not candidate:
            raise InvalidError("fencelock: a candidate needs a name", code="invalid_argument", field="holder")
        leader = AsyncLeader(self.client, self.name, candidate, self.ttl, wait=wait, on_lost=on_lost)
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
                        yield Leadership(ev.holder, ev.token, ev.revision, ev.at_ms)
                    elif ev.type in ("released", "expired"):
                        yield Leadership("", 0, ev.revision, ev.at_ms)
            except CompactedError:
                continue
