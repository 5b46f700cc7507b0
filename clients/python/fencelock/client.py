"""Plain calls of the fencelock HTTP/JSON API (docs/API.md), with failover.

Standard library only. One :class:`Client` is safe to share between threads:
each call opens its own connection.

>>> c = Client("127.0.0.1:7470")                      # doctest: +SKIP
>>> g = c.acquire("jobs/nightly", "alice", ttl=30)    # doctest: +SKIP
>>> c.release("jobs/nightly", "alice", g.token)       # doctest: +SKIP
True
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

from . import _wire
from ._wire import (
    DEFAULT_ADDR,
    DEFAULT_TTL,
    FOREVER,
    MAX_WAIT_ROUND,
    Event,
    ExtendResult,
    Grant,
    Req,
    Revision,
    SessionInfo,
    WhoAmI,
)
from .errors import FencelockError, HeldError, UnreachableError

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
    them (``http://`` or ``https://`` prefixes allowed); default
    ``$FENCELOCK_ADDR`` or ``127.0.0.1:7470``. A call goes to the last node
    that answered; a ``not_leader`` answer is followed to its ``leader``,
    and an unreachable or unavailable node makes the call try the next
    address, for up to ``rounds`` passes over the list with jittered
    back-off between them (the default rides out an election). Writes
    carry a ``request_id`` so that a retry is answered with the original
    result.

    ``auth_token`` is sent as ``Authorization: Bearer``; default
    ``$FENCELOCK_AUTH_TOKEN`` (pass ``""`` to send none).

    TLS: ``ca`` is the CA file (PEM) that signs the servers' certificates,
    ``cert`` and ``key`` this client's certificate and key for a server
    that asks for one (mutual TLS); they default to
    ``$FENCELOCK_CLIENT_CA``, ``$FENCELOCK_CLIENT_CERT`` and
    ``$FENCELOCK_CLIENT_KEY``, the CLI's variables (``""`` ignores the
    variable). ``ssl_context`` replaces all three. With any of them, a
    bare ``host:port`` is reached over https. A plain client that meets a
    TLS server (or the reverse) raises :class:`TLSMismatchError` naming the
    address and what to pass.

    >>> c = Client("127.0.0.1:7470,127.0.0.1:7471", ca="ca.pem",
    ...            cert="alice.pem", key="alice-key.pem", auth_token=secret)  # doctest: +SKIP

    ``timeout`` bounds each HTTP exchange in seconds (a waiting acquire
    gets its wait on top). While an acquire waits, the node it waits on is
    asked every ``wait_check`` seconds whether it still answers
    (``/healthz``); one that does not is left, and the wait goes on at the
    next node under the same request id, keeping its queue place.
    """

    # ---- lock calls -------------------------------------------------

    def acquire(
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
        """Take ``key`` for ``holder`` for ``ttl`` seconds (default 10); a NEW fencing token.

        >>> g = c.acquire("jobs/nightly", "alice", 30)                 # doctest: +SKIP
        >>> g = c.acquire("jobs/nightly", "bob", 30, wait=5)           # queue up to 5 s
        >>> g = c.acquire("jobs/nightly", "bob", 30, wait=FOREVER)     # as long as it takes
        >>> g = c.acquire("pool/gpu", "job-7", 30, permits=4)          # one of 4 permits
        >>> g = c.acquire("docs/index", "r1", 30, mode="read")         # a shared hold
        >>> g = c.acquire("jobs/a", "batch", session=s.id)             # under a session

        ``wait`` > 0 queues in the key's FIFO for up to that many seconds
        (``FOREVER``: rounds of an hour, the server's limit, for as long as
        it takes). Raises :class:`HeldError` when another holder keeps it
        (or the wait elapsed), :class:`LockDelayError` during a lock-delay,
        :class:`KindMismatchError` when the key is of another kind. The
        same holder acquiring again renews with a new token.
        ``lock_delay`` (seconds, at most 60) keeps the key granted to
        nobody that long after this lease *expires*. Not kept alive:
        :class:`Lease` and :class:`Session` do that.
        """
        if ttl is None:
            ttl = DEFAULT_TTL
        if wait <= MAX_WAIT_ROUND:
            req = _wire.acquire_req(key, holder, ttl, wait=max(wait, 0.0), session=session,
                                    lock_delay=lock_delay, permits=permits, mode=mode)
            return self._run(req, deadline=deadline)
        end = time.monotonic() + wait
        while True:
            left = end - time.monotonic()
            rnd = min(left, MAX_WAIT_ROUND)
            req = _wire.acquire_req(key, holder, ttl, wait=max(rnd, 0.001), session=session,
                                    lock_delay=lock_delay, permits=permits, mode=mode)
            try:
                return self._run(req, deadline=deadline)
            except HeldError:
                if end - time.monotonic() < 0.001:
                    raise  # a bounded wait that elapsed; FOREVER never ends here

    def acquire_all(
        self,
        keys: Sequence[str],
        holder: str,
        ttl: Optional[float] = None,
        *,
        session: int = 0,
        lock_delay: float = 0.0,
        retry_for: float = 0.0,
    ) -> List[Grant]:
        """Grant every key to ``holder`` in one command, or none; one token per key, in order.

        >>> a, b = c.acquire_all(["acct/1", "acct/2"], "xfer", 30)     # doctest: +SKIP

        A key held by another holder (or in its lock-delay) refuses the lot
        (:class:`HeldError` naming it); nothing is granted. The server never
        queues it: with ``retry_for`` > 0 the client tries again for that
        many seconds, 10 ms apart at first doubling to 500 ms, jittered
        (not fair to single-key waiters, who queue and go first; never a
        partial hold, so never a deadlock).
        """
        req_ttl = DEFAULT_TTL if ttl is None else ttl
        end = time.monotonic() + retry_for
        pause = 0.01
        while True:
            try:
                return self._run(_wire.acquire_all_req(keys, holder, req_ttl, session=session, lock_delay=lock_delay))
            except FencelockError as e:
                left = end - time.monotonic()
                if retry_for <= 0 or left <= 0 or not _wire.retryable_for_all(e):
                    raise
                time.sleep(min(_wire.jitter(pause), left))
                pause = min(2 * pause, 0.5)

    def renew(self, key: str, holder: str, ttl: float, *, deadline: Optional[float] = None) -> Grant:
        """Re-acquire by the live holder: a NEW token (raises :class:`NotHeldError`).

        >>> g2 = c.renew("jobs/nightly", "alice", 30)                   # doctest: +SKIP
        """
        return self._run(_wire.renew_req(key, holder, ttl), deadline=deadline)

    def extend(
        self, key: str, holder: str, token: int, ttl: float, *, deadline: Optional[float] = None
    ) -> Grant:
        """Keep-alive under the SAME token for ``ttl`` seconds (raises :class:`NotHeldError`).

        >>> g = c.extend("jobs/nightly", "alice", g.token, 30)          # doctest: +SKIP
        """
        return self._run(_wire.extend_req(key, holder, token, ttl), deadline=deadline)

    def extend_batch(self, holder: str, ttl: float, leases: Sequence[Tuple[str, int]]) -> List[ExtendResult]:
        """Extend up to 1000 of ``holder``'s leases, given as ``(key, token)``, in one log entry.

        >>> rs = c.extend_batch("alice", 30, [("a", 3), ("b", 4)])      # doctest: +SKIP
        >>> [r.ok for r in rs]                                          # doctest: +SKIP
        [True, True]
        """
        return self._run(_wire.extend_batch_req(holder, ttl, leases))

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

    def open_session(self, holder: str, ttl: float = DEFAULT_TTL) -> SessionInfo:
        """Open a session; nothing keeps it alive (:class:`Session` does).

        >>> info = c.open_session("batch", 30)                          # doctest: +SKIP
        >>> c.acquire("jobs/1", "batch", session=info.id).session      # doctest: +SKIP
        1
        """
        return self._run(_wire.session_open_req(holder, ttl))

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
        host, port, tls = _wire.host_port(addr)
        conn: http.client.HTTPConnection
        if tls:
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=self._ctx())
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        hostport = addr.split("://", 1)[1]
        try:
            if hold is not None:
                conn.connect()
                hold.attach(conn)
            conn.request(req.method, req.target(), body=payload, headers=_wire.headers_for(req, self._auth, hostport))
            resp = conn.getresponse()
            raw = resp.read()
            status = resp.status
        except ssl.SSLError as e:
            if _wire.tls_meets_plain(e):
                raise _wire.speaks_plain_error(addr) from None
            raise UnreachableError("fencelock: %s: TLS: %s" % (addr, e)) from None
        except (OSError, http.client.HTTPException) as e:
            if hold is not None and (hold.closed or hold.aborted):
                raise UnreachableError("fencelock: %s: %s" % (addr, hold.aborted or "closed")) from None
            if not tls and isinstance(e, (http.client.RemoteDisconnected, ConnectionResetError)):
                if _wire.plain_meets_tls(host, port, timeout):
                    raise _wire.speaks_tls_error(addr) from None
            raise UnreachableError("fencelock: %s: %s" % (addr, e or type(e).__name__)) from None
        finally:
            if hold is not None:
                hold.attach(None)
            conn.close()
        return _wire.decode(addr, status, raw)
