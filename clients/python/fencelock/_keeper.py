"""The keep-alive a Lease and a Session share, on threads (DESIGN.md section 4).

The rules are :class:`fencelock._keepalive.KeepAlive`'s, shared with the
asyncio flavour: extend on the budget's cadence after the send of the
last confirmed extension (TTL/3, or sooner to keep 1.5 s free for a
failover), move to the next node at once when one fails, ask the next
one beside a node silent for a third of the attempt's timeout, and
declare the lease lost 0.89×TTL after that send, on this process's
monotonic clock. One thread runs the rules; each attempt is sent on a
short thread of its own, so that a silent node never holds up the next.
What differs between a lease and a session is what one extension sends
(``send``).
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from ._keepalive import Attempt, KeepAlive
from .client import Client, _Hold
from .errors import FencelockError, InternalError

# send(addr, timeout, hold) sends one extension to exactly addr (ended
# early through hold) and returns a function the keeper calls, under its
# lock, once it took the answer.
Send = Callable[[str, float, _Hold], Callable[[], None]]

# Beyond an attempt's own timeout (which the rules enforce), how long its
# HTTP exchange may go on before the socket gives up by itself.
_SOCKET_SLACK = 1.0


class Keeper:
    def __init__(
        self,
        client: Client,
        ttl: float,
        sent: float,
        send: Send,
        *,
        name: str,
        what: str = "extend",
        on_lost: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.ttl = ttl
        self.core = KeepAlive(client._addrs, ttl, sent, what=what)
        self._send = send
        self._on_lost = on_lost
        self._name = name
        self._cv = threading.Condition(threading.Lock())
        self._results: List[Tuple[int, Optional[FencelockError], Optional[Callable[[], None]]]] = []
        self._inflight: Dict[int, _Hold] = {}
        self._thread: Optional[threading.Thread] = None
        self._hooks: List[Callable[[str], None]] = []
        self._due: List[Callable[[], None]] = []  # callbacks to run outside the lock
        self._extended: Optional[threading.Event] = None
        self._announced = False
        self.lost_event = threading.Event()

    # ---- state ------------------------------------------------------

    @property
    def reason(self) -> str:
        return self.core.detail

    @property
    def cause(self) -> str:
        return self.core.cause

    @property
    def extensions(self) -> int:
        return self.core.extensions

    def times(self) -> Tuple[float, float, float]:
        """(deadline, stop_by, held_until) on ``time.monotonic()``."""
        with self._cv:
            return self.core.deadline(), self.core.stop_by(), self.core.held_until()

    def check(self) -> bool:
        """Declare the loss once the deadline has passed; True once ended."""
        with self._cv:
            self.core.check(time.monotonic())
            self._sync_locked()
            ended = self.core.ended
        self._run_due()
        return ended

    def extended(self) -> threading.Event:
        """An event set at the next confirmed extension."""
        with self._cv:
            if self._extended is None:
                self._extended = threading.Event()
            return self._extended

    def on_end(self, hook: Callable[[str], None]) -> None:
        """Call hook(reason) when the keep-alive ends, however (at once if it has)."""
        with self._cv:
            if not self.core.ended:
                self._hooks.append(hook)
                return
        hook(self.core.detail)

    # ---- life -------------------------------------------------------

    def start(self) -> None:
        if self.check():  # granted after the give-up point: already lost
            return
        self._thread = threading.Thread(target=self._loop, name="fencelock-keepalive-" + self._name, daemon=True)
        self._thread.start()

    def stop(self, cause: str) -> bool:
        """End the keep-alive as the owner (``cause`` "released", "closed") and
        wait for its thread. False if it had been lost already."""
        with self._cv:
            held = self.core.end(cause, time.monotonic())
            self._sync_locked()
            self._cv.notify_all()
        self._run_due()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()
        return held

    def _loop(self) -> None:
        while True:
            with self._cv:
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
                self._sync_locked()
                ended = self.core.ended
                if not ended:
                    for a in launch:
                        self._launch_locked(a)
                    wake = self.core.wake_at()
                    if not self._results and wake is not None:
                        self._cv.wait(max(0.0, wake - time.monotonic()))
            self._run_due()
            if ended:
                return

    def _launch_locked(self, a: Attempt) -> None:
        hold = _Hold()
        self._inflight[a.id] = hold
        t = threading.Thread(target=self._attempt, args=(a, hold), name="fencelock-extend-" + self._name,
                             daemon=True)
        t.start()

    def _attempt(self, a: Attempt, hold: _Hold) -> None:
        err: Optional[FencelockError] = None
        confirm: Optional[Callable[[], None]] = None
        try:
            confirm = self._send(a.addr, a.timeout + _SOCKET_SLACK, hold)
        except FencelockError as e:
            err = e
        except Exception as e:  # noqa: BLE001 - a bug in a send must not look like a confirmation
            err = InternalError("fencelock: %s: %s" % (a.addr, e))
        with self._cv:
            self._inflight.pop(a.id, None)
            self._results.append((a.id, err, confirm))
            self._cv.notify_all()

    def _sync_locked(self) -> None:
        """Abandon the attempts the rules gave up on; announce the end, once."""
        out = self.core.out_ids()
        for attempt_id in [i for i in self._inflight if i not in out]:
            self._inflight.pop(attempt_id).abort("%s abandoned" % self.core.what, close=True)
        if not self.core.ended or self._announced:
            return
        self._announced = True
        reason = self.core.detail
        self.lost_event.set()
        for h in self._hooks:
            self._due.append(functools.partial(h, reason))
        self._hooks = []
        if not self.core.by_owner and self._on_lost is not None:
            cb = self._on_lost
            self._due.append(lambda: cb(reason))
        self._cv.notify_all()

    def _run_due(self) -> None:
        with self._cv:
            due, self._due = self._due, []
        for f in due:
            f()
