"""The keep-alive a Lease and a Session share: one thread (DESIGN.md section 4).

It extends about every TTL/3 after the send of the last confirmed
extension, tries the cluster's addresses in turn when one fails (each
attempt bounded by about TTL/12), and declares the lease or session lost
at TTL/2 after that send, measured on this process's monotonic clock.
The rules are :class:`fencelock._wire.KeepState`'s, shared with the
asyncio flavour. What differs between a lease and a session is what one
extension sends (``send``) and what a refusal is called (``refused``).
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Callable, List, Optional, Tuple

from ._wire import KeepState
from .client import Client
from .errors import FencelockError

# send(addr, timeout) sends one extension to exactly addr and returns a
# function the keeper calls, under its lock, once it accepted the answer.
Send = Callable[[str, float], Callable[[], None]]


class Keeper:
    def __init__(
        self,
        client: Client,
        ttl: float,
        sent: float,
        send: Send,
        *,
        name: str,
        refused: Callable[[FencelockError], str],
        on_lost: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.ttl = ttl
        self._state = KeepState(client._addrs, ttl, sent)
        self._send = send
        self._refused = refused
        self._on_lost = on_lost
        self._name = name
        self._mu = threading.RLock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._hooks: List[Callable[[str], None]] = []
        self._due_callbacks: List[Callable[[], None]] = []
        self.lost_event = threading.Event()
        self.reason = ""
        self.ended_by_owner = False
        self.extensions = 0

    # ---- state ------------------------------------------------------

    def safe_until(self) -> float:
        with self._mu:
            return self._state.deadline()

    def held_until(self) -> float:
        with self._mu:
            return self._state.last_sent + self.ttl

    def check(self) -> None:
        """Declare the loss once the deadline has passed."""
        with self._mu:
            self._check_locked(time.monotonic())
        self._run_callbacks()

    def on_end(self, hook: Callable[[str], None]) -> None:
        """Call hook(reason) when the keep-alive ends, however (at once if it has)."""
        with self._mu:
            if not self.lost_event.is_set():
                self._hooks.append(hook)
                return
        hook(self.reason)

    def _check_locked(self, now: float) -> None:
        if not self.lost_event.is_set() and now >= self._state.deadline():
            self._end_locked(self._state.lost_reason(), owner=False)

    def _end_locked(self, reason: str, *, owner: bool) -> None:
        if self.lost_event.is_set():
            return
        self.reason = reason
        self.ended_by_owner = owner
        self.lost_event.set()
        self._stop.set()
        # Run outside the lock, by whoever ended it (_run_callbacks).
        for h in self._hooks:
            self._due_callbacks.append(functools.partial(h, reason))
        self._hooks = []
        if not owner and self._on_lost is not None:
            cb = self._on_lost
            self._due_callbacks.append(lambda: cb(reason))

    def _run_callbacks(self) -> None:
        with self._mu:
            due, self._due_callbacks = self._due_callbacks, []
        for f in due:
            f()

    # ---- life -------------------------------------------------------

    def start(self) -> None:
        self.check()  # granted after TTL/2: already lost
        if self.lost_event.is_set():
            return
        self._thread = threading.Thread(target=self._loop, name="fencelock-keepalive-" + self._name, daemon=True)
        self._thread.start()

    def stop(self, reason: str) -> bool:
        """End the keep-alive as the owner (``reason`` "released", "closed")
        and wait for its thread. False if it had been lost already."""
        with self._mu:
            self._check_locked(time.monotonic())
            was_lost = self.lost_event.is_set() and not self.ended_by_owner
            self._end_locked(reason, owner=True)
        self._run_callbacks()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()
        return not was_lost

    def _loop(self) -> None:
        while True:
            with self._mu:
                due = self._state.due()
            if not self._sleep_until(due):
                return
            while True:
                done, pause = self._extend_once()
                if done:
                    break
                if pause > 0 and self._stop.wait(min(pause, max(0.0, self.safe_until() - time.monotonic()))):
                    return
            if self.lost_event.is_set():
                return

    def _sleep_until(self, t: float) -> bool:
        while True:
            now = time.monotonic()
            self.check()
            if self.lost_event.is_set():
                return False
            if now >= t:
                return True
            if self._stop.wait(min(t, self.safe_until()) - now):
                return False

    def _extend_once(self) -> Tuple[bool, float]:
        """One extension to one node: (done, pause before the next attempt)."""
        sent = time.monotonic()
        with self._mu:
            self._check_locked(sent)
            if self.lost_event.is_set():
                self._run_callbacks()
                return True, 0.0
            addr = self._state.pick()
            timeout = self._state.attempt_timeout(sent)
        err: Optional[FencelockError] = None
        confirm: Optional[Callable[[], None]] = None
        try:
            confirm = self._send(addr, timeout)
        except FencelockError as e:
            err = e
        try:
            with self._mu:
                if self.lost_event.is_set():
                    return True, 0.0  # ended while the request was out
                now = time.monotonic()
                if err is None:
                    self._check_locked(now)  # a confirmation after the deadline is too late
                    if self.lost_event.is_set():
                        return True, 0.0
                    self._state.confirmed(addr, sent)
                    if confirm is not None:
                        confirm()
                    self.extensions += 1
                    return True, 0.0
                pause = self._state.failed(addr, err)
                if pause is None:
                    self._end_locked(self._refused(err), owner=False)
                    return True, 0.0
                self._check_locked(now)  # the reason names the last failure
                return self.lost_event.is_set(), pause
        finally:
            self._run_callbacks()
