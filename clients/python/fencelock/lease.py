"""A held lock that keeps itself alive: :class:`Lease` (DESIGN.md section 4).

The lease extends about every TTL/3 in one background thread, keeping its
token. Its safety rule is on the holder's own clock: once no extension has
been confirmed for TTL/2 since the *send* of the last confirmed one (the
acquire counts), the lease marks itself lost and stops. The server cannot
grant the key to anyone else before TTL after that send, so the other half
of the TTL is the holder's time to stop, with margin for clock-rate
differences. Work done after ``lost`` must not touch the resource; fence it
anyway (:class:`~fencelock.Fence`), since a process can be paused between
looking at ``lost`` and acting.

The same handle holds a semaphore's permit (``permits=N``) or a read/write
lock's hold (``mode="read"`` or ``"write"``): each is a lease of its own,
with its own token.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Callable, Optional, Type

from ._keeper import Keeper
from ._wire import DEFAULT_TTL, Grant, extend_req
from .client import Client
from .errors import FencelockError, LeaseLostError, NotHeldError


class Lease:
    """Acquire ``key`` on entry, keep it alive, release it on exit.

    >>> with Lease(client, "jobs/nightly", "worker-1", ttl=10) as lease:  # doctest: +SKIP
    ...     do_work(lease.token)
    ...     lease.ensure()  # raises LeaseLostError if the lease was lost
    >>> with Lease(client, "pool/gpu", permits=4, wait=FOREVER) as permit:  # doctest: +SKIP
    ...     train(permit.token, permit.slot)
    >>> with Lease(client, "docs/index", mode="read") as r:               # doctest: +SKIP
    ...     read_index(r.token)

    ``holder`` defaults to a new ``hostname-pid-random`` name (prefixed
    with the caller's principal when ACLs are on). ``ttl`` and ``wait``
    are seconds; ``wait`` > 0 queues in the key's FIFO for up to that long
    (``FOREVER``: as long as it takes), 0 tries once (:class:`HeldError`).
    ``lock_delay`` (seconds) keeps the key granted to nobody for that long
    should this lease expire rather than be released.

    ``lost`` (bool), ``reason`` (str) and ``lost_event``
    (:class:`threading.Event`) say whether and why the lease was lost;
    ``on_lost(reason)`` is called once, from the keep-alive thread, when it
    is lost (not when it is released). ``token`` is the fencing token. On
    exit the context manager stops extending and releases the lease (best
    effort: if the release cannot be sent the lease expires by itself); it
    does not suppress exceptions. After exit ``lost`` is True with reason
    ``"released"``: the lease is no longer safe to act on.
    """

    def __init__(
        self,
        client: Client,
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
        """True once the lease stopped being safe to act on (lost, or released)."""
        k = self._keeper
        if k is None:
            return False
        k.check()
        return k.lost_event.is_set()

    @property
    def lost_event(self) -> threading.Event:
        """A :class:`threading.Event` set when the lease ends."""
        return self._k().lost_event

    @property
    def reason(self) -> str:
        """Why the lease ended ("" while held; "released" after release)."""
        return self._keeper.reason if self._keeper else ""

    @property
    def extensions(self) -> int:
        """Extensions confirmed so far."""
        return self._keeper.extensions if self._keeper else 0

    def safe_until(self) -> float:
        """The ``time.monotonic()`` instant past which, unconfirmed, the lease counts as lost: TTL/2
        after the send of the last confirmed extension."""
        return self._k().safe_until()

    def held_until(self) -> float:
        """The earliest ``time.monotonic()`` instant at which the server may grant the key to
        another: TTL after that send. Anything still running under the lease must stop before."""
        return self._k().held_until()

    def ensure(self) -> None:
        """Raise :class:`LeaseLostError` (with the reason) if the lease is lost or past TTL/2.

        >>> lease.ensure()   # doctest: +SKIP
        """
        if self.lost:
            raise LeaseLostError("fencelock: lease on %r lost: %s" % (self.key, self.reason), reason=self.reason)

    def _k(self) -> Keeper:
        if self._keeper is None:
            raise LeaseLostError("fencelock: lease on %r not acquired" % self.key, reason="not acquired")
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
                          permits=self.permits, mode=self.mode)
        except FencelockError:
            raise
        except BaseException:
            if self.wait > 0 and generated:
                # A grant may have crossed our interruption on the wire; the
                # holder is ours alone, so releasing by it is safe.
                self._release_quietly(0)
            raise
        if time.monotonic() - sent >= self.ttl / 3:
            # A grant that waited in the queue is dated only by when we
            # asked, maybe long ago; an extension dates it afresh.
            again = time.monotonic()
            try:
                g = c.extend(self.key, holder, g.token, self.ttl)
            except NotHeldError as e:
                raise LeaseLostError("fencelock: lease on %r lost right after the wait: %s" % (self.key, e.message),
                                     reason=e.message)
            except BaseException:
                self.grant = g
                self._release_quietly(g.token)
                raise
            sent = again
            if time.monotonic() - sent >= self.ttl / 2:
                self._release_quietly(g.token)
                raise LeaseLostError("fencelock: lease on %r: the extension after the wait came too late" % self.key,
                                     reason="expired")
        self.grant = g

        def send(addr: str, timeout: float) -> Callable[[], None]:
            ext = c._run(extend_req(self.key, holder, g.token, self.ttl, at=addr), timeout=timeout)

            def confirm() -> None:
                self.grant = ext

            return confirm

        def refused(e: FencelockError) -> str:
            if isinstance(e, NotHeldError):
                return "the server no longer has this grant: " + e.message
            return "extend refused: %s (%s)" % (e.message, e.code or e.status)

        self._keeper = Keeper(c, self.ttl, sent, send, name=self.key, refused=refused, on_lost=self._on_lost)
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
        held = self._keeper.stop("released")
        lost_reason = "" if held else self._keeper.reason
        ok = self.client.release(self.key, self.holder, self.grant.token,
                                 deadline=time.monotonic() + self.client.timeout)
        if lost_reason:
            raise LeaseLostError("fencelock: lease on %r lost: %s" % (self.key, lost_reason), reason=lost_reason)
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
