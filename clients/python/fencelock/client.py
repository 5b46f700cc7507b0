"""Plain calls of the fencelock HTTP/JSON API (docs/API.md), with failover.

Standard library only. One :class:`Client` is safe to share between
threads; it keeps its HTTP/1.1 connections open between calls (a pool per
address, TLS sessions resumed) until :meth:`Client.close`.

>>> with Client("127.0.0.1:7470") as c:                           # doctest: +SKIP
...     g = c.acquire("jobs/nightly", "alice", ttl=30)  # waits its turn
...     c.release("jobs/nightly", "alice", g.token)
True
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Type, TypeVar, Union

from . import _wire
from ._wire import (
    DEFAULT_ADDR,
    DEFAULT_TTL,
    FOREVER,
    MAX_WAIT_ROUND,
    Event,
    ExtendResult,
    Grant,
    Mode,
    Req,
    Revision,
    SessionInfo,
    WhoAmI,
)
from .errors import FencelockError, HeldError, TLSMismatchError, UnreachableError

if TYPE_CHECKING:
    from .watch import Watch

T = TypeVar("T")

__all__ = ["DEFAULT_ADDR", "DEFAULT_TTL", "FOREVER", "Client", "Grant", "SessionInfo", "Event", "Revision"]


class _Hold:
    """The connection of a call in flight, so that another thread can end it
    (a watch's close, a wait whose node stopped answering)."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._conn: Optional[http.client.HTTPConnection] = None
        self.closed = False  # ended for good (Watch.close)
        self.aborted = ""  # why the current exchange was cut

    def attach(self, conn: Optional[http.client.HTTPConnection]) -> None:
        with self._mu:
            self._conn = conn
            if conn is not None:
                self.aborted = ""
            if conn is not None and self.closed:
                self._cut(conn)

    def abort(self, why: str, *, close: bool = False) -> None:
        with self._mu:
            if close:
                self.closed = True
            self.aborted = why
            if self._conn is not None:
                self._cut(self._conn)

    @staticmethod
    def _cut(conn: http.client.HTTPConnection) -> None:
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Client(_wire.ClientSettings):
    """A client of one fencelock server or cluster.

    ``addrs`` is ``"host:port"``, a comma-separated list, or a sequence of
    them (``http://`` or ``https://`` prefixes allowed; an address without
    a port uses the server's, 7470); default ``$FENCELOCK_ADDR`` or
    ``127.0.0.1:7470``. A call goes to the last node that answered; a
    ``not_leader`` answer is followed to its ``leader``, and an
    unreachable or unavailable node makes the call try the next address,
    for up to ``rounds`` passes over the list with jittered back-off
    between them (the default rides out an election). Writes carry a
    ``request_id`` so that a retry is answered with the original result.

    Connections are kept open between calls (HTTP/1.1 keep-alive), up to
    ``max_idle`` idle ones per address, and a TLS session is resumed when
    another connection is opened. :meth:`close` (or leaving ``with``)
    closes the idle ones; the client stays usable and connects again.

    ``auth_token`` is sent as ``Authorization: Bearer``; default
    ``$FENCELOCK_AUTH_TOKEN`` (pass ``""`` to send none).

    TLS: ``ca`` is the CA file (PEM) that signs the servers' certificates,
    ``cert`` and ``key`` this client's certificate and key for a server
    that asks for one (mutual TLS); they default to
    ``$FENCELOCK_CLIENT_CA``, ``$FENCELOCK_CLIENT_CERT`` and
    ``$FENCELOCK_CLIENT_KEY``, the CLI's variables (``""`` ignores the
    variable). ``ssl_context`` replaces all three. With any of them, a
    bare ``host:port`` is reached over https. A file that is missing or
    unreadable raises :class:`InvalidError` naming it and the argument. A
    plain client that meets a TLS server (or the reverse), or TLS settings
    that do not fit the server's, raise :class:`TLSMismatchError` at once,
    naming the address and what to pass.

    >>> c = Client("127.0.0.1:7470,127.0.0.1:7471", ca="ca.pem",
    ...            cert="alice.pem", key="alice-key.pem", auth_token=secret)  # doctest: +SKIP

    ``timeout`` bounds each HTTP exchange in seconds (a waiting acquire
    gets its wait on top). While an acquire waits, the node it waits on is
    asked every ``wait_check`` seconds whether it still answers
    (``/healthz``); one that does not is left, and the wait goes on at the
    next node under the same request id, keeping its queue place.
    """

    _pool: "_Pool"

    def _make_pool(self, max_idle: int) -> "_Pool":
        return _Pool(max_idle)

    def close(self) -> None:
        """Close the idle connections. Calls made afterwards connect again.

        >>> with Client() as c:                                          # doctest: +SKIP
        ...     c.acquire("jobs/nightly", "alice", 30)
        """
        self._pool.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    # ---- lock calls -------------------------------------------------

    def acquire(
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
        """Take ``key`` for ``holder`` for ``ttl`` seconds (default 10), waiting its turn; a NEW fencing token.

        >>> g = c.acquire("jobs/nightly", "alice", 30)                 # doctest: +SKIP
        >>> g = c.acquire("jobs/nightly", "bob", 30, wait=0)           # try once: HeldError
        >>> g = c.acquire("jobs/nightly", "bob", 30, wait=5)           # queue up to 5 s
        >>> g = c.acquire("pool/gpu", "job-7", 30, permits=4)          # one of 4 permits
        >>> g = c.acquire("docs/index", "r1", 30, mode="read")         # a shared hold
        >>> g = c.acquire("jobs/a", "batch", session=s.id)             # under a session

        ``wait`` is how long to queue in the key's FIFO, in seconds: None
        (the default, as the CLI) as long as it takes (rounds of an hour,
        the server's limit), 0 to try once, N for up to N seconds. Raises
        :class:`HeldError` when another holder keeps it past the wait
        (naming the holder), :class:`LockDelayError` during a lock-delay,
        :class:`KindMismatchError` when the key is of another kind. The
        same holder acquiring again renews with a new token.
        ``lock_delay`` (seconds, at most 60) keeps the key granted to
        nobody that long after this lease *expires*. A ``ttl`` over an
        hour needs ``allow_long=True`` (seconds, not milliseconds).
        Not kept alive: :class:`Lease` and :class:`Session` do that.
        """
        req_ttl = DEFAULT_TTL if ttl is None else ttl
        wait = _wire.check_wait(wait)

        def one(rnd: float) -> Grant:
            req = _wire.acquire_req(key, holder, req_ttl, wait=rnd, session=session, lock_delay=lock_delay,
                                    permits=permits, mode=mode, allow_long=allow_long)
            return self._run(req, deadline=deadline)

        if wait <= MAX_WAIT_ROUND:
            return one(wait)
        end = time.monotonic() + wait
        while True:
            try:
                return one(max(min(end - time.monotonic(), MAX_WAIT_ROUND), 0.001))
            except HeldError:
                if end - time.monotonic() < 0.001:
                    raise  # a bounded wait that elapsed; FOREVER never ends here

    def acquire_all(
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
        """Grant every key to ``holder`` in one command, or none; one token per key, in order.

        >>> a, b = c.acquire_all(["acct/1", "acct/2"], "xfer", 30)     # doctest: +SKIP

        A key held by another holder (or in its lock-delay) refuses the lot
        (:class:`HeldError` naming it); nothing is granted. The server never
        queues it: the client tries again for ``wait`` seconds (None, the
        default: as long as it takes; 0: once), 10 ms apart at first
        doubling to 500 ms, jittered (not fair to single-key waiters, who
        queue and go first; never a partial hold, so never a deadlock).
        ``retry_for`` is ``wait``'s old name.
        """
        req_ttl = DEFAULT_TTL if ttl is None else ttl
        wait = _wire.check_wait(retry_for if retry_for is not None else wait)
        end = time.monotonic() + wait
        pause = 0.01
        while True:
            try:
                return self._run(_wire.acquire_all_req(keys, holder, req_ttl, session=session, lock_delay=lock_delay,
                                                       allow_long=allow_long))
            except FencelockError as e:
                left = end - time.monotonic()
                if wait <= 0 or left <= 0 or not _wire.retryable_for_all(e):
                    raise
                time.sleep(min(_wire.jitter(pause), left))
                pause = min(2 * pause, 0.5)

    def renew(self, key: str, holder: str, ttl: float, *, allow_long: bool = False,
              deadline: Optional[float] = None) -> Grant:
        """Re-acquire by the live holder: a NEW token (raises :class:`NotHeldError`).

        >>> g2 = c.renew("jobs/nightly", "alice", 30)                   # doctest: +SKIP
        """
        return self._run(_wire.renew_req(key, holder, ttl, allow_long), deadline=deadline)

    def extend(
        self, key: str, holder: str, token: int, ttl: float, *, allow_long: bool = False,
        deadline: Optional[float] = None
    ) -> Grant:
        """Keep-alive under the SAME token for ``ttl`` seconds (raises :class:`NotHeldError`).

        >>> g = c.extend("jobs/nightly", "alice", g.token, 30)          # doctest: +SKIP
        """
        return self._run(_wire.extend_req(key, holder, token, ttl, allow_long=allow_long), deadline=deadline)

    def extend_batch(self, holder: str, ttl: float, leases: Sequence[Tuple[str, int]], *,
                     allow_long: bool = False) -> List[ExtendResult]:
        """Extend up to 1000 of ``holder``'s leases, given as ``(key, token)``, in one log entry.

        >>> rs = c.extend_batch("alice", 30, [("a", 3), ("b", 4)])      # doctest: +SKIP
        >>> [r.ok for r in rs]                                          # doctest: +SKIP
        [True, True]
        """
        return self._run(_wire.extend_batch_req(holder, ttl, leases, allow_long))

    def release(self, key: str, holder: str, token: int = 0, *, deadline: Optional[float] = None) -> bool:
        """Release ``key`` if ``holder`` holds it (and under ``token``, if not 0).

        >>> c.release("jobs/nightly", "alice", g.token)                 # doctest: +SKIP
        True

        Returns False when there was nothing of the holder's to release.
        """
        return self._run(_wire.release_req(key, holder, token), deadline=deadline)

    def check(self, key: str, token: int) -> bool:
        """Whether ``token`` is the key's current token and its lease is alive.

        >>> c.check("jobs/nightly", g.token)                            # doctest: +SKIP
        True
        """
        return self._run(_wire.check_req(key, token))

    def get(self, key: str) -> Grant:
        """The key's live lease (raises :class:`NotFoundError`); for a semaphore or
        read/write lock its oldest holder, with every holder in ``holders``.

        >>> c.get("jobs/nightly").holder                                # doctest: +SKIP
        'alice'
        """
        return self._run(_wire.get_req(key))

    def list(self, prefix: str = "", *, limit: int = 0, after: str = "") -> List[Grant]:
        """One page of live leases whose keys start with ``prefix``, by key.

        >>> [g.key for g in c.list("jobs/")]                            # doctest: +SKIP
        ['jobs/nightly']

        ``limit`` 0 is the server's default (1000); ``after`` is the last key
        of the previous page. A page shorter than ``limit`` is the last.
        """
        return self._run(_wire.list_req(prefix, limit, after))

    # ---- sessions (plain calls; Session keeps one alive) ---------------

    def open_session(self, holder: str, ttl: float = DEFAULT_TTL, *, allow_long: bool = False) -> SessionInfo:
        """Open a session; nothing keeps it alive (:class:`Session` does).

        >>> info = c.open_session("batch", 30)                          # doctest: +SKIP
        >>> c.acquire("jobs/1", "batch", session=info.id).session      # doctest: +SKIP
        1
        """
        return self._run(_wire.session_open_req(holder, ttl, allow_long))

    def extend_session(self, sid: int, holder: str) -> SessionInfo:
        """Renew ``holder``'s session ``sid``, and every lock under it, for its TTL
        (raises :class:`NoSessionError` once it has ended)."""
        return self._run(_wire.session_extend_req(sid, holder))

    def close_session(self, sid: int, holder: str) -> SessionInfo:
        """End ``holder``'s session ``sid``: every lock under it is released and
        handed to its next waiter in one step; ``locks`` says how many."""
        return self._run(_wire.session_close_req(sid, holder))

    # ---- watches ---------------------------------------------------------

    def watch(
        self,
        prefix: str = "",
        *,
        key: Optional[str] = None,
        after: Union[Revision, str, None] = None,
        wait: float = 30.0,
        limit: int = 0,
    ) -> "Watch":
        """A watch of the keys under ``prefix`` (or of the one ``key``): an iterator of :class:`Event`.

        >>> with c.watch("jobs/", after="0") as w:                      # doctest: +SKIP
        ...     for ev in w:
        ...         print(ev.revision, ev.type, ev.key, ev.holder, ev.token)
        >>> w = c.watch("jobs/").start(print)  # the callback form, on a thread of its own

        Each long-poll waits up to ``wait`` seconds on the server. Without
        ``after`` it starts at the present of the node it first reaches;
        ``w.revision`` is how far it has come, and a watch started
        ``after=`` it later misses nothing. It rides out failovers;
        a revision older than the server keeps raises
        :class:`CompactedError` (resync with :meth:`watch_list`).
        """
        from .watch import Watch

        return Watch(self, prefix, key=key, after=after, wait=wait, limit=limit)

    def watch_list(self, prefix: str = "", *, key: Optional[str] = None) -> Tuple[List[Grant], Revision]:
        """The live leases under ``prefix`` (or of ``key``) and the revision they were read at.

        >>> locks, rev = c.watch_list("jobs/")                          # doctest: +SKIP
        >>> w = c.watch("jobs/", after=rev)  # misses nothing after the state listed
        """
        _, rev, locks = self._run(_wire.watch_list_req(prefix, key))
        return locks, rev

    # ---- ACLs and cluster ----------------------------------------------

    def whoami(self) -> WhoAmI:
        """The principal the credential authenticates as (``auth`` False: no ACLs)."""
        return self._run(_wire.whoami_req())

    def acl_bootstrap(self) -> str:
        """Turn the cluster's ACLs on; returns the secret of principal ``admin``, shown once.

        >>> admin = c.acl_bootstrap()                                   # doctest: +SKIP
        """
        return self._run(_wire.acl_bootstrap_req())

    def acl_create_token(
        self, name: str, policies: Sequence[str], *, no_secret: bool = False, replace: bool = False
    ) -> str:
        """Create principal ``name`` with ``policies``; returns its secret ("" with ``no_secret``,
        for a principal named by client certificates). Admin.

        >>> ci = c.acl_create_token("ci", ["jobs"])                     # doctest: +SKIP
        """
        return self._run(_wire.acl_token_create_req(name, policies, no_secret, replace))

    def acl_delete_token(self, name: str) -> None:
        """Delete a principal; its token stops working (admin)."""
        self._run(_wire.acl_token_delete_req(name))

    def acl_tokens(self) -> List[Dict[str, Any]]:
        """The principals (``name``, ``policies``, ``has_token``), never their secrets (admin)."""
        return self._run(_wire.acl_tokens_req())

    def acl_set_policy(self, name: str, rules: Sequence[Union[str, Dict[str, Any]]]) -> None:
        """Add or replace a policy; rules as the CLI's ``PREFIX:VERBS[:deny]`` (admin).

        >>> c.acl_set_policy("jobs", ["jobs/:lock,read", "jobs/secret/:lock,read:deny"])  # doctest: +SKIP
        """
        self._run(_wire.acl_policy_set_req(name, rules))

    def acl_delete_policy(self, name: str) -> None:
        """Delete a policy (admin)."""
        self._run(_wire.acl_policy_delete_req(name))

    def acl_policies(self) -> List[Dict[str, Any]]:
        """The policies, each ``{"name", "rules": [{"prefix", "verbs", "deny"}]}`` (admin)."""
        return self._run(_wire.acl_policies_req())

    def members(self) -> Dict[str, Any]:
        """The raft configuration as the answering node sees it (``GET /v1/cluster/members``)."""
        return self._run(_wire.members_req())

    def ready(self) -> bool:
        """Whether the current node answers ``/readyz`` with 200 (one try, no failover)."""
        try:
            self._run(Req("GET", "/readyz", lambda d: d, at=self._addrs.pick()))
            return True
        except FencelockError:
            return False

    # ---- holders ---------------------------------------------------------

    def own_holder(self, holder: Optional[str]) -> Tuple[str, bool]:
        """``holder``, or a new :func:`default_holder` prefixed with the caller's
        principal when the client has a token and the cluster's ACLs are on
        (asked once, ``whoami``). The flag says the holder was generated."""
        if holder:
            return holder, False
        h = _wire.default_holder()
        if not self._auth:
            return h, True
        with self._mu:
            p = self._principal
        if p is None:
            w = self.whoami()
            p = w.principal if w.auth else ""
            with self._mu:
                self._principal = p
        return (p + "/" + h if p else h), True

    # ---- transport --------------------------------------------------

    def _run(self, req: Req[T], *, deadline: Optional[float] = None, hold: Optional[_Hold] = None,
             timeout: Optional[float] = None) -> T:
        payload = req.payload()
        base = self.timeout if timeout is None else timeout
        if req.at:
            return req.parse(self._once(req.at, req, payload, base + req.wait, hold))
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
                    d = self._once_watched(addr, req, payload, t, hold)
                else:
                    d = self._once(addr, req, payload, t, hold)
                self._addrs.prefer(addr)
                return req.parse(d)
            except FencelockError as e:
                if hold is not None and hold.closed:
                    raise
                pause = f.failed(addr, e)
                if pause is None:
                    raise
                if pause > 0:
                    if deadline is not None:
                        pause = min(pause, max(0.0, deadline - time.monotonic()))
                    time.sleep(pause)

    def _once_watched(self, addr: str, req: Req[Any], payload: Optional[bytes], timeout: float,
                      hold: Optional[_Hold]) -> Dict[str, Any]:
        """A waiting call whose node is asked every ``wait_check`` whether it still answers."""
        h = hold or _Hold()
        stop = threading.Event()

        def check() -> None:
            while not stop.wait(self.wait_check):
                try:
                    self._once(addr, _wire.health_req(addr), None, self.wait_check, None)
                except FencelockError as e:
                    if not stop.is_set():
                        h.abort("%s stopped answering while we waited: %s" % (addr, e))
                    return

        t = threading.Thread(target=check, name="fencelock-waitcheck", daemon=True)
        t.start()
        try:
            return self._once(addr, req, payload, timeout, h)
        finally:
            stop.set()
            t.join()

    def _ctx(self) -> ssl.SSLContext:
        if self._ssl is not None:
            return self._ssl
        with self._mu:
            if self._default_ssl is None:
                self._default_ssl = ssl.create_default_context()
            return self._default_ssl

    def _once(self, addr: str, req: Req[Any], payload: Optional[bytes], timeout: float,
              hold: Optional[_Hold]) -> Dict[str, Any]:
        """One exchange with addr, on a kept connection if one is idle.

        A kept connection the server closed meanwhile (it drops idle ones)
        fails before any answer; the request then goes once more on a new
        connection. That is safe: a write carries its request id, so the
        server applies it at most once.
        """
        host, port, tls = _wire.host_port(addr)
        hostport = addr.split("://", 1)[1]
        headers = _wire.headers_for(req, self._auth, hostport)
        end = time.monotonic() + timeout
        conn, reused = self._pool.get(addr)
        while True:
            left = max(end - time.monotonic(), 0.001)
            if conn is None:
                conn = self._pool.new(addr, host, port, tls, left, self._ctx() if tls else None)
            keep = again = False
            try:
                if conn.sock is None:
                    conn.connect()
                else:
                    conn.sock.settimeout(left)
                if hold is not None:
                    hold.attach(conn)
                conn.request(req.method, req.target(), body=payload, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                status = resp.status
                keep = not resp.will_close and not _cut(hold)
            except ssl.SSLError as e:
                if not (reused and _stale(e) and not _cut(hold)):
                    if _wire.tls_meets_plain(e):
                        raise _wire.speaks_plain_error(addr) from None
                    setting = _wire.tls_setting_error(addr, e)
                    if setting is not None:
                        raise setting from None
                    raise UnreachableError("fencelock: %s: TLS: %s" % (addr, e)) from None
                again = True
            except (OSError, http.client.HTTPException) as e:
                if _cut(hold):
                    assert hold is not None
                    raise UnreachableError("fencelock: %s: %s" % (addr, hold.aborted or "closed")) from None
                if not (reused and _stale(e)):
                    if not tls and isinstance(e, (http.client.RemoteDisconnected, ConnectionResetError)):
                        if _wire.plain_meets_tls(host, port, left):
                            raise _wire.speaks_tls_error(addr) from None
                    raise UnreachableError("fencelock: %s: %s" % (addr, e or type(e).__name__)) from None
                again = True
            finally:
                if hold is not None:
                    hold.attach(None)
                if not keep:
                    conn.close()
            if again:
                conn, reused = None, False
                continue
            self._pool.put(addr, conn)
            return _wire.decode(addr, status, raw, req.subject())


def _cut(hold: Optional[_Hold]) -> bool:
    """Whether the exchange was ended on purpose (a watch's close, a silent node)."""
    return hold is not None and (hold.closed or bool(hold.aborted))


def _stale(e: BaseException) -> bool:
    """Whether an exchange on a kept connection failed as one the server had
    closed does: before any answer, with no timeout."""
    return isinstance(e, (http.client.RemoteDisconnected, http.client.BadStatusLine, ConnectionResetError,
                          BrokenPipeError, ConnectionAbortedError, ssl.SSLEOFError, ssl.SSLZeroReturnError)) \
        and not isinstance(e, socket.timeout)


class _TLSConnection(http.client.HTTPSConnection):
    """An HTTPS connection that resumes the last TLS session of its address
    (a resumed handshake skips the certificates' exchange and checks)."""

    def __init__(self, host: str, port: int, timeout: float, context: ssl.SSLContext,
                 sessions: "_Pool", addr: str) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._sessions = sessions
        self._addr = addr

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        sock = self._context.wrap_socket(self.sock, server_hostname=self.host,  # type: ignore[attr-defined]
                                         session=self._sessions.session(self._addr))
        self.sock = sock
        if sock.session_reused:
            self._sessions.resumed += 1

    def getresponse(self) -> http.client.HTTPResponse:
        resp = super().getresponse()
        sock = self.sock
        if isinstance(sock, ssl.SSLSocket):
            # A TLS 1.3 server sends its session ticket after the handshake:
            # the session is there once an answer has been read.
            self._sessions.remember(self._addr, sock.session)
        return resp


class _Pool:
    """The idle connections of a client, by address, and the last TLS session
    of each address; thread-safe. A connection is used by one call at a time."""

    IDLE_FOR = 50.0  # seconds; the server closes a connection idle for 2 minutes

    def __init__(self, max_idle: int) -> None:
        self._mu = threading.Lock()
        self._idle: Dict[str, List[Tuple[http.client.HTTPConnection, float]]] = {}
        self._sessions: Dict[str, ssl.SSLSession] = {}
        self.max_idle = max(0, max_idle)
        self.dialed = 0  # connections opened, for the tests and the curious
        self.resumed = 0  # TLS connections that resumed a session

    def get(self, addr: str) -> Tuple[Optional[http.client.HTTPConnection], bool]:
        """An idle connection to addr (the most recently used), or None; and whether it was one."""
        old: List[http.client.HTTPConnection] = []
        found: Optional[http.client.HTTPConnection] = None
        now = time.monotonic()
        with self._mu:
            idle = self._idle.get(addr, [])
            while idle:
                conn, since = idle.pop()
                if now - since < self.IDLE_FOR:
                    found = conn
                    break
                old.append(conn)
        for conn in old:
            conn.close()
        return found, found is not None

    def new(self, addr: str, host: str, port: int, tls: bool, timeout: float,
            ctx: Optional[ssl.SSLContext]) -> http.client.HTTPConnection:
        with self._mu:
            self.dialed += 1
        if tls:
            assert ctx is not None
            return _TLSConnection(host, port, timeout, ctx, self, addr)
        return http.client.HTTPConnection(host, port, timeout=timeout)

    def put(self, addr: str, conn: http.client.HTTPConnection) -> None:
        with self._mu:
            idle = self._idle.setdefault(addr, [])
            if len(idle) < self.max_idle:
                idle.append((conn, time.monotonic()))
                return
        conn.close()

    def session(self, addr: str) -> Optional[ssl.SSLSession]:
        with self._mu:
            return self._sessions.get(addr)

    def remember(self, addr: str, session: Optional[ssl.SSLSession]) -> None:
        if session is not None:
            with self._mu:
                self._sessions[addr] = session

    def close(self) -> None:
        with self._mu:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn, _ in conns:
                conn.close()

    def __del__(self) -> None:
        # A client dropped without close(): its idle sockets go with it.
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit, anything may be gone
            pass
