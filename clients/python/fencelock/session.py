"""Sessions (docs/PRIMITIVES.md, "Sessions"): many locks, one keep-alive,
lost together.

A :class:`Session` is a lease of the server's own with an id; locks taken
under it need no keep-alive of their own, and when it is closed or expires
every one of them ends in one committed step, each key handed to its next
waiter. One thread keeps it alive with the same rule as a
:class:`~fencelock.Lease`: extend on the Go client's schedule (TTL/3, or
sooner to keep 1.5 s free for a failover), lost 0.89×TTL after the send
of the last confirmed extension. Each lock still has its own fencing
token: the session's id is not a token.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Callable, List, Optional, Sequence, Set, Type

from ._keeper import Keeper
from ._wire import (
    DEFAULT_TTL,
    FOREVER,
    MAX_WAIT_ROUND,
    Grant,
    SessionInfo,
    acquire_req,
    check_lock_delay,
    check_ttl,
    check_wait,
    session_extend_req,
)
from .client import Client, _Hold
from .errors import FencelockError, NotHeldError, SessionLostError

__all__ = ["Session", "SessionLock", "FOREVER"]


class Session:
    """A server-side session kept alive by one thread; open it with ``with`` or :meth:`open`.

    >>> with Session(client, "batch", ttl=15) as s:                   # doctest: +SKIP
    ...     a = s.acquire("jobs/a")                 # waits its turn in the FIFO
    ...     b = s.acquire("jobs/b", wait=0)         # try once (HeldError)
    ...     x, y = s.acquire_all(["acct/1", "acct/2"])
    ...     work(a.token, b.token)                  # each lock has its own token
    ...     s.ensure()                              # SessionLostError once lost

    ``holder`` (default: a new ``hostname-pid-random`` name, prefixed with
    the caller's principal under ACLs) is carried by every lock under it.
    ``ttl`` (seconds, 0.1 to 3600; up to a day with ``allow_long=True``)
    is fixed when it opens. ``lost``, ``cause`` (``"expired"``,
    ``"unreachable"``, ``"unavailable"``, ``"no_session"``, another code
    the server refused with, or ``"closed"``), ``reason`` and
    ``lost_event`` say whether and why it ended; ``on_lost(reason)`` is
    called once, from the keep-alive thread, when it is lost (not when it
    is closed). Exit closes it on the server, which releases every lock
    under it.
    """

    def __init__(
        self,
        client: Client,
        holder: Optional[str] = None,
        ttl: float = DEFAULT_TTL,
        *,
        allow_long: bool = False,
        on_lost: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.client = client
        self.holder = holder or ""
        self.ttl = check_ttl(ttl, allow_long=allow_long)
        self.allow_long = allow_long
        self.id = 0
        self.info: Optional[SessionInfo] = None
        self._on_lost = on_lost
        self._keeper: Optional[Keeper] = None
        self._closed = False
        self._mu = threading.Lock()
        self._waits: Set[_Hold] = set()

    # ---- state ------------------------------------------------------

    @property
    def lost(self) -> bool:
        """True once the session ended: lost, or closed; reads the clock."""
        k = self._keeper
        if k is None:
            return False
        return k.check()

    @property
    def lost_event(self) -> threading.Event:
        """A :class:`threading.Event` set when the session ends."""
        return self._k().lost_event

    @property
    def cause(self) -> str:
        """Why it ended, in one word ("" while alive; "closed" after close)."""
        return self._keeper.cause if self._keeper else ""

    @property
    def reason(self) -> str:
        """Why it ended, in a sentence that starts with :attr:`cause` ("" while alive)."""
        return self._keeper.reason if self._keeper else ""

    @property
    def extensions(self) -> int:
        """Extensions confirmed so far."""
        return self._keeper.extensions if self._keeper else 0

    def extended(self) -> threading.Event:
        """An event set when the next extension is confirmed."""
        return self._k().extended()

    def safe_until(self) -> float:
        """The ``time.monotonic()`` instant at which, unconfirmed, the session is declared lost:
        0.89×TTL after the send of the last confirmed extension."""
        return self._k().times()[0]

    def stop_by(self) -> float:
        """0.99×TTL after that send: everything under the session must have stopped by then."""
        return self._k().times()[1]

    def held_until(self) -> float:
        """The earliest ``time.monotonic()`` instant at which the server may end the session."""
        return self._k().times()[2]

    def ensure(self) -> None:
        """Raise :class:`SessionLostError` (a :class:`LeaseLostError`) if the session has ended."""
        self._k()
        if self.lost:
            raise self._lost_error()

    def _lost_error(self) -> SessionLostError:
        said = "closed" if self.cause == "closed" else "lost: " + self.reason
        return SessionLostError("fencelock: session %d %s" % (self.id, said), reason=self.reason, cause=self.cause)

    def _k(self) -> Keeper:
        if self._keeper is None:
            raise SessionLostError("fencelock: session not open", reason="not open", cause="not_open")
        return self._keeper

    # ---- life -------------------------------------------------------

    def open(self) -> "Session":
        """Open the session on the server and start its keep-alive; what ``with`` does on entry.

        >>> s = Session(client, ttl=15).open()                          # doctest: +SKIP
        """
        c = self.client
        self.holder, _ = c.own_holder(self.holder)
        sent = time.monotonic()
        self.info = c.open_session(self.holder, self.ttl, allow_long=self.allow_long)
        self.id = self.info.id
        holder, sid = self.holder, self.id

        def send(addr: str, timeout: float, hold: _Hold) -> Callable[[], None]:
            info = c._run(session_extend_req(sid, holder, at=addr), timeout=timeout, hold=hold)

            def confirm() -> None:
                self.info = info

            return confirm

        self._keeper = Keeper(c, self.ttl, sent, send, name="session-%d" % sid, what="session extend",
                              on_lost=self._on_lost)
        self._keeper.on_end(self._ended)
        self._keeper.start()
        return self

    def _ended(self, reason: str) -> None:
        # Waits under the session end with it.
        with self._mu:
            waits = list(self._waits)
        for h in waits:
            h.abort("session %d ended: %s" % (self.id, reason), close=True)

    def close(self) -> None:
        """Stop the keep-alive, wait for its thread and close the session on the
        server, which releases every lock under it (best effort; a session
        that cannot be reached expires by itself). Calls after the first do nothing.

        >>> s.close()                                                    # doctest: +SKIP
        """
        if self._closed or self._keeper is None:
            return
        self._closed = True
        self._keeper.stop("closed")
        try:
            self.info = self.client.close_session(self.id, self.holder)
        except FencelockError:
            pass

    def __enter__(self) -> "Session":
        if self._keeper is None:
            self.open()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    # ---- locks ------------------------------------------------------

    def acquire(self, key: str, *, wait: Optional[float] = None, lock_delay: float = 0.0) -> "SessionLock":
        """Take ``key`` under the session: a :class:`SessionLock` with its own token.

        >>> l = s.acquire("jobs/a")                    # as long as it takes  # doctest: +SKIP
        >>> l = s.acquire("jobs/a", wait=30)           # queue up to 30 s
        >>> l = s.acquire("jobs/a", wait=0)            # try once

        ``wait`` is seconds as for :meth:`Client.acquire` (None, the
        default: as long as it takes). Raises :class:`HeldError` (or
        :class:`LockDelayError`) when it cannot have it, and
        :class:`SessionLostError` when the session has ended, before or
        during the wait (a waiter queued under a session leaves the queue
        when the session ends).
        """
        self.ensure()
        wait = check_wait(wait)
        check_lock_delay(lock_delay)
        c = self.client
        hold = _Hold()
        with self._mu:
            self._waits.add(hold)
        try:
            end = time.monotonic() + wait
            while True:
                rnd = min(end - time.monotonic(), MAX_WAIT_ROUND) if wait > 0 else 0.0
                req = acquire_req(key, self.holder, self.ttl, wait=max(rnd, 0.001) if wait > 0 else 0.0,
                                  session=self.id, lock_delay=lock_delay)
                try:
                    g = c._run(req, hold=hold if wait > 0 else None)
                    break
                except FencelockError as e:
                    if self.lost:
                        raise self._lost_error() from e
                    if wait > 0 and end - time.monotonic() >= 0.001 and e.code == "held":
                        continue  # a round of an hour elapsed: queue again
                    raise
        except BaseException as e:
            if wait > 0 and not isinstance(e, FencelockError):
                # A grant may have crossed the interruption; the holder is the session's alone.
                try:
                    c.release(key, self.holder, deadline=time.monotonic() + 2.0)
                except FencelockError:
                    pass
            raise
        finally:
            with self._mu:
                self._waits.discard(hold)
        if self.lost:
            raise self._lost_error()  # ended as the grant came: the lock went with it
        return SessionLock(self, g)

    def acquire_all(
        self, keys: Sequence[str], *, wait: Optional[float] = None, lock_delay: float = 0.0
    ) -> List["SessionLock"]:
        """Take every key under the session in one command, or none.

        >>> a, b = s.acquire_all(["acct/1", "acct/2"])                  # doctest: +SKIP

        A key held by another refuses the lot (:class:`HeldError`) once
        ``wait`` has passed (None, the default: the client retries as long
        as it takes; 0: once; see :meth:`Client.acquire_all` for why it
        retries rather than queues). The retries stop when the session ends.
        """
        self.ensure()
        wait = check_wait(wait)
        end = time.monotonic() + wait
        while True:
            try:
                # In slices, so that a session lost meanwhile stops the retries.
                gs = self.client.acquire_all(keys, self.holder, session=self.id, lock_delay=lock_delay,
                                             wait=max(0.0, min(end - time.monotonic(), 1.0)))
                break
            except FencelockError as e:
                if self.lost:
                    raise self._lost_error() from e
                if end - time.monotonic() <= 0 or e.code not in ("held", "lock_delay"):
                    raise
        return [SessionLock(self, g) for g in gs]


class SessionLock:
    """A lock held under a :class:`Session`; it has no thread of its own.

    ``token`` is its fencing token: carry it to the resource. ``lost`` is
    True once it was released or its session ended. As a context manager
    it releases the lock (and only it) on exit.
    """

    def __init__(self, session: Session, grant: Grant) -> None:
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
        if self._released:
            return "released"
        return self.session.cause

    @property
    def reason(self) -> str:
        """Why it ended: "released", or the session's reason."""
        if self._released:
            return "released"
        return self.session.reason

    def ensure(self) -> None:
        """Raise :class:`SessionLostError` once the session has ended (a :class:`LeaseLostError`)."""
        if self._released:
            raise SessionLostError("fencelock: lock on %r released" % self.key, reason="released",
                                   cause="released", key=self.key)
        self.session.ensure()

    def release(self) -> None:
        """Give the lock back, leaving the session and its other locks.

        >>> l.release()                                                  # doctest: +SKIP

        Raises :class:`NotHeldError` when the server no longer had it.
        Calls after the first do nothing.
        """
        if self._released:
            return
        self._released = True
        s = self.session
        if not s.client.release(self.key, s.holder, self.token):
            raise NotHeldError("fencelock: the server had no live lock on %r with token %d to release"
                               % (self.key, self.token), code="not_held")

    def __enter__(self) -> "SessionLock":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            self.release()
        except FencelockError:
            pass
