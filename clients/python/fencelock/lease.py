"""A held lock that keeps itself alive: :class:`Lease` (DESIGN.md section 4).

The lease extends in one background thread, keeping its token, on the Go
client's schedule: every TTL/3, or more often for a TTL under about 2.7 s
so that 1.5 s are left for a failover before the give-up point, never
more often than every TTL/8. Its safety rule is on the holder's own
clock: once no extension has been confirmed for 0.89×TTL since the
*send* of the last confirmed one (the acquire counts), the lease marks
itself lost and stops. The server cannot grant the key to anyone else
before TTL after that send; of the rest, TTL/10 is the holder's time to
stop (``stop_by()``, TTL/100 before that instant, is when everything
under the lease must have stopped) and TTL/100 bounds the difference in
rate of the two clocks. Work done after ``lost`` must not touch the
resource; fence it anyway (:class:`~fencelock.Fence`), since a process can
be paused between looking at ``lost`` and acting.

The same handle holds a semaphore's permit (``permits=N``) or a read/write
lock's hold (``mode="read"`` or ``"write"``): each is a lease of its own,
with its own token.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Callable, Optional, Type

from ._keepalive import budget_for
from ._keeper import Keeper
from ._wire import DEFAULT_TTL, Grant, Mode, check_lock_delay, check_mode, check_ttl, check_wait, extend_req
from .client import Client, _Hold
from .errors import FencelockError, LeaseLostError, NotHeldError


class Lease:
    """Acquire ``key`` on entry (waiting its turn), keep it alive, release it on exit.

    >>> with Lease(client, "jobs/nightly", "worker-1", ttl=10) as lease:  # doctest: +SKIP
    ...     do_work(lease.token)
    ...     lease.ensure()  # raises LeaseLostError if the lease was lost
    >>> with Lease(client, "pool/gpu", permits=4) as permit:             # doctest: +SKIP
    ...     train(permit.token, permit.slot)
    >>> with Lease(client, "docs/index", mode="read", wait=0) as r:       # doctest: +SKIP
    ...     read_index(r.token)                    # HeldError at once if a writer has it

    ``holder`` defaults to a new ``hostname-pid-random`` name (prefixed
    with the caller's principal when ACLs are on). ``ttl`` and ``wait``
    are seconds; ``wait`` is how long to queue in the key's FIFO: None
    (the default, as the CLI) as long as it takes, 0 to try once
    (:class:`HeldError`, naming the holder), N for up to N seconds. A
    ``ttl`` over an hour needs ``allow_long=True``. ``lock_delay``
    (seconds) keeps the key granted to nobody for that long should this
    lease expire rather than be released.

    ``lost`` (bool), ``cause`` (one word: ``"expired"``,
    ``"unreachable"``, ``"unavailable"``, ``"not_held"``, another code the
    server refused with, or ``"released"``), ``reason`` (a sentence) and
    ``lost_event`` (:class:`threading.Event`) say whether and why the
    lease ended; ``on_lost(reason)`` is called once, from the keep-alive
    thread, when it is lost (not when it is released). ``token`` is the
    fencing token. On exit the context manager stops extending and
    releases the lease (best effort: if the release cannot be sent the
    lease expires by itself); it does not suppress exceptions. After exit
    ``lost`` is True with cause ``"released"``: the lease is no longer
    safe to act on.
    """

    def __init__(
        self,
        client: Client,
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
        self.ttl = check_ttl(ttl, allow_long=allow_long)
        self.wait = check_wait(wait)
        self.lock_delay = check_lock_delay(lock_delay)
        self.permits = permits
        self.mode = check_mode(mode)
        self.allow_long = allow_long
        self.grant: Optional[Grant] = None
        self._on_lost = on_lost
        self._keeper: Optional[Keeper] = None
        self._closed = False

    # ---- state ------------------------------------------------------

    @property
    def token(self) -> int:
        """The fencing token of the grant (0 before it is acquired); extensions keep it."""
        return self.grant.token if self.grant else 0

    @property
    def slot(self) -> int:
        """A semaphore permit's number, 1..permits (0 for other kinds)."""
        return self.grant.slot if self.grant else 0

    @property
    def lost(self) -> bool:
        """True once the lease stopped being safe to act on (lost, or released); reads the clock."""
        k = self._keeper
        if k is None:
            return False
        return k.check()

    @property
    def lost_event(self) -> threading.Event:
        """A :class:`threading.Event` set when the lease ends."""
        return self._k().lost_event

    @property
    def cause(self) -> str:
        """Why the lease ended, in one word ("" while held; "released" after release)."""
        return self._keeper.cause if self._keeper else ""

    @property
    def reason(self) -> str:
        """Why the lease ended, in a sentence that starts with :attr:`cause` ("" while held)."""
        return self._keeper.reason if self._keeper else ""

    @property
    def extensions(self) -> int:
        """Extensions confirmed so far."""
        return self._keeper.extensions if self._keeper else 0

    def extended(self) -> threading.Event:
        """An event set when the next extension is confirmed (a new one after that)."""
        return self._k().extended()

    def safe_until(self) -> float:
        """The ``time.monotonic()`` instant at which, unconfirmed, the lease is declared lost:
        0.89×TTL after the send of the last confirmed extension."""
        return self._k().times()[0]

    def stop_by(self) -> float:
        """The ``time.monotonic()`` instant by which everything under the lease must have
        stopped: 0.99×TTL after that send (:meth:`safe_until` plus the stop grace, TTL/10)."""
        return self._k().times()[1]

    def held_until(self) -> float:
        """The earliest ``time.monotonic()`` instant at which the server may grant the key to
        another: TTL after that send, if the two clocks run at the same rate."""
        return self._k().times()[2]

    def ensure(self) -> None:
        """Raise :class:`LeaseLostError` (with the cause and reason) if the lease is lost.

        >>> lease.ensure()   # doctest: +SKIP
        """
        if self.lost:
            raise LeaseLostError("fencelock: lease on %r lost: %s" % (self.key, self.reason), reason=self.reason,
                                 cause=self.cause, key=self.key)

    def _k(self) -> Keeper:
        if self._keeper is None:
            raise LeaseLostError("fencelock: lease on %r not acquired" % self.key, reason="not acquired",
                                 cause="not_acquired", key=self.key)
        return self._keeper

    # ---- life -------------------------------------------------------

    def acquire(self) -> "Lease":
        """Take the key and start extending; what ``with`` does on entry.

        >>> lease = Lease(client, "jobs/nightly", ttl=10).acquire()   # doctest: +SKIP
        """
        c = self.client
        holder, generated = c.own_holder(self.holder)
        self.holder = holder
        sent = time.monotonic()
        try:
            g = c.acquire(self.key, holder, self.ttl, wait=self.wait, lock_delay=self.lock_delay,
                          permits=self.permits, mode=self.mode, allow_long=self.allow_long)
        except FencelockError:
            raise
        except BaseException:
            if self.wait > 0 and generated:
                # A grant may have crossed our interruption on the wire; the
                # holder is ours alone, so releasing by it is safe.
                self._release_quietly(0)
            raise
        b = budget_for(self.ttl)
        if time.monotonic() - sent >= b.every:
            # A grant that waited in the queue is dated only by when we
            # asked, maybe long ago; an extension dates it afresh.
            again = time.monotonic()
            try:
                g = c.extend(self.key, holder, g.token, self.ttl, allow_long=self.allow_long)
            except NotHeldError as e:
                raise LeaseLostError("fencelock: lease on %r lost right after the wait: %s" % (self.key, e.message),
                                     reason=e.message, cause="not_held", key=self.key)
            except BaseException:
                self.grant = g
                self._release_quietly(g.token)
                raise
            sent = again
            if time.monotonic() - sent >= b.give_up:
                self._release_quietly(g.token)
                raise LeaseLostError("fencelock: lease on %r: the extension after the wait came too late" % self.key,
                                     reason="expired: the extension after the wait came too late", cause="expired",
                                     key=self.key)
        self.grant = g
        token, ttl, allow_long = g.token, self.ttl, self.allow_long

        def send(addr: str, timeout: float, hold: _Hold) -> Callable[[], None]:
            ext = c._run(extend_req(self.key, holder, token, ttl, at=addr, allow_long=allow_long), timeout=timeout,
                         hold=hold)

            def confirm() -> None:
                self.grant = ext

            return confirm

        self._keeper = Keeper(c, self.ttl, sent, send, name=self.key, on_lost=self._on_lost)
        self._keeper.start()
        return self

    def release(self) -> None:
        """Stop extending, wait for the keep-alive thread and give the lock back.

        >>> lease.release()   # doctest: +SKIP

        Raises :class:`LeaseLostError` if the lease had been lost (the
        release is still sent, in case the server still holds it), and
        :class:`NotHeldError` if the server no longer had it. Calls after
        the first do nothing.
        """
        if self._closed or self._keeper is None or self.grant is None:
            return
        self._closed = True
        k = self._keeper
        held = k.stop("released")
        lost = None if held else LeaseLostError("fencelock: lease on %r lost: %s" % (self.key, k.reason),
                                                reason=k.reason, cause=k.cause, key=self.key)
        try:
            ok = self.client.release(self.key, self.holder, self.grant.token,
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

    def close(self) -> None:
        """:meth:`release`, quietly: what ``with`` does on exit."""
        try:
            self.release()
        except FencelockError:
            pass  # lost, or gone: the lease expires by itself

    def _release_quietly(self, token: int) -> None:
        try:
            self.client.release(self.key, self.holder, token, deadline=time.monotonic() + 2.0)
        except FencelockError:
            pass

    def __enter__(self) -> "Lease":
        if self._keeper is None:
            self.acquire()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()
