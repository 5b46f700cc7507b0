"""A held lock that keeps itself alive: :class:`Lease` (DESIGN §4).

The lease extends at TTL/3 in a background thread. Its safety rule is on
the holder's own clock: once no extension has been confirmed for TTL/2
since the *send* of the last confirmed one (the acquire counts), the lease
marks itself lost and stops. Half the TTL leaves the other half as margin
for clock rate differences and the time the answer was in flight, so a
holder that still believes it holds the lock is, by then, still inside
the server's TTL. Work done after ``lost`` must not touch the resource;
fence it anyway (:class:`~fencelock.Fence`), since a process can be paused
between looking at ``lost`` and acting.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Optional, Type

from .client import Client, Grant
from .errors import FencelockError, LeaseLostError, NotHeldError, UnavailableError


class Lease:
    """Acquire ``key`` for ``holder`` on entry, keep it alive, release it on exit.

    >>> with Lease(client, "jobs/nightly", "worker-1", ttl=10) as lease:  # doctest: +SKIP
    ...     do_work(lease.token)
    ...     lease.ensure()  # raises LeaseLostError if the lease was lost

    ``ttl`` and ``wait`` are seconds; ``wait`` > 0 queues for the key.
    ``lost`` (bool), ``reason`` (str) and ``lost_event``
    (:class:`threading.Event`) say whether and why the lease was lost;
    ``token`` is the fencing token. The context manager does not suppress
    exceptions; on exit it stops extending and releases the lease (best
    effort: if the release cannot be sent the lease expires by itself).
    After exit ``lost`` is True with reason ``"released"``: the lease is no
    longer safe to act on.
    """

    def __init__(self, client: Client, key: str, holder: str, ttl: float, *, wait: float = 0.0) -> None:
        if ttl <= 0:
            raise ValueError("fencelock: ttl must be positive")
        self.client = client
        self.key = key
        self.holder = holder
        self.ttl = float(ttl)
        self.wait = float(wait)
        self.grant: Optional[Grant] = None
        self.lost_event = threading.Event()
        self.reason = ""
        self.extensions = 0  # extensions confirmed so far
        self._mu = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._confirmed_send = 0.0  # monotonic time of the send of the last confirmed grant/extend

    # ---- state ------------------------------------------------------

    @property
    def token(self) -> int:
        """The fencing token of the grant (0 before it is acquired)."""
        return self.grant.token if self.grant else 0

    @property
    def lost(self) -> bool:
        """True once the lease stopped being safe to act on."""
        return self.lost_event.is_set()

    def safe_until(self) -> float:
        """The ``time.monotonic()`` instant past which, unconfirmed, the lease counts as lost."""
        with self._mu:
            return self._confirmed_send + self.ttl / 2

    def ensure(self) -> None:
        """Raise :class:`LeaseLostError` (with the reason) if the lease is lost or past TTL/2."""
        if not self.lost and time.monotonic() >= self.safe_until():
            self._mark_lost("no extension confirmed within TTL/2 (%.3fs)" % (self.ttl / 2))
        if self.lost:
            raise LeaseLostError("fencelock: lease on %r lost: %s" % (self.key, self.reason))

    # ---- life -------------------------------------------------------

    def acquire(self) -> "Lease":
        """Take the key and start extending; what ``with`` does on entry."""
        sent = time.monotonic()
        self.grant = self.client.acquire(self.key, self.holder, self.ttl, wait=self.wait)
        if self.wait > 0:
            # A queued grant was made at some moment during the wait, which
            # the send time does not bound. An extend under the same token
            # does: its send time is a safe start for the TTL/2 rule.
            sent = time.monotonic()
            try:
                self.grant = self.client.extend(self.key, self.holder, self.grant.token, self.ttl)
            except NotHeldError as e:
                raise LeaseLostError("fencelock: lease on %r lost right after the wait: %s" % (self.key, e.message))
        with self._mu:
            self._confirmed_send = sent
        self._thread = threading.Thread(target=self._run, name="fencelock-lease-" + self.key, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop extending and release the lease unless it was lost; what ``with`` does on exit."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self.grant is None or self.lost:
            return
        self._mark_lost("released")
        try:
            self.client.release(self.key, self.holder, self.grant.token, deadline=time.monotonic() + self.client.timeout)
        except FencelockError:
            pass  # the lease expires by itself

    def __enter__(self) -> "Lease":
        return self.acquire()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    # ---- keep-alive -------------------------------------------------

    def _mark_lost(self, reason: str) -> None:
        with self._mu:
            if self.lost_event.is_set():
                return
            self.reason = reason
            self.lost_event.set()

    def _run(self) -> None:
        retry_gap = max(self.ttl / 20, 0.01)
        next_extend = self.safe_until() - self.ttl / 2 + self.ttl / 3
        last_err = ""
        while True:
            deadline = self.safe_until()
            now = time.monotonic()
            if now >= deadline:
                why = "no extension confirmed within TTL/2 (%.3fs) of the last confirmed send" % (self.ttl / 2)
                if last_err:
                    why += "; last error: " + last_err
                self._mark_lost(why)
                return
            if self._stop.wait(max(0.0, min(next_extend, deadline) - now)):
                return
            if time.monotonic() >= deadline:
                continue  # the loop head marks it lost
            sent = time.monotonic()
            try:
                g = self.client.extend(self.key, self.holder, self.token, self.ttl, deadline=deadline)
            except NotHeldError as e:
                self._mark_lost("the server no longer has this grant: " + e.message)
                return
            except UnavailableError as e:  # includes unreachable and timeouts; retry until TTL/2
                last_err = e.message
                next_extend = time.monotonic() + retry_gap
                continue
            except FencelockError as e:  # permission, invalid, internal: no point retrying
                self._mark_lost("extend refused: %s (%s)" % (e.message, e.code or e.status))
                return
            if self._stop.is_set():
                return
            with self._mu:
                self._confirmed_send = sent
                self.grant = g
                self.extensions += 1
            last_err = ""
            next_extend = sent + self.ttl / 3
