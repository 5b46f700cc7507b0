"""The keep-alive a Lease and a Session share: one thread (DESIGN.md section 4).

It extends about every TTL/3 after the send of the last confirmed
extension, tries the cluster's addresses in turn when one fails (each
attempt bounded by about TTL/12), and declares the lease or session lost
at TTL/2 after that send, measured on this process's monotonic clock.
What differs between a lease and a session is what one extension sends
(``send``) and what a refusal is called (``refused``).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, List, Optional, Set

from . import _wire
from .client import Client
from .errors import FencelockError, TLSMismatchError, UnreachableError

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
        self.client = client
        self.ttl = ttl
        self.policy = _wire.KeepPolicy(ttl)
        self._send = send
        self._refused = refused
        self._on_lost = on_lost
        self._name = name
        self._mu = threading.RLock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._last_sent = sent
        self._last_err = ""
        self._next = 0
        self._tries = 0
        self._silent: Set[str] = set()
        self._fire: List[str] = []
        self._hooks: List[Callable[[str], None]] = []
        self._pending_hooks: List[Callable[[str], None]] = []
        self.lost_event = threading.Event()
        self.reason = ""
        self.ended_by_owner = False
        self.extensions = 0

    # ---- state ------------------------------------------------------

    def safe_until(self) -> float:
        with self._mu:
            return self._last_sent + self.ttl / 2

    def held_until(self) -> float:
        with self._mu:
            return self._last_sent + self.ttl

    def check(self) -> None:
        """Declare the loss once the deadline has passed; run the loss callbacks."""
        with self._mu:
            self._check_locked(time.monotonic())
        self._run_callbacks()

    def on_end(self, hook: Callable[[str], None]) -> None:
        """Call hook(reason) when the keep-alive ends (at once if it has)."""
        with self._mu:
            if not self.lost_event.is_set():
                self._hooks.append(hook)
                return
        hook(self.reason)

    def _check_locked(self, now: float) -> None:
        if self.lost_event.is_set() or now < self._last_sent + self.ttl / 2:
            return
        why = "no extension confirmed within TTL/2 (%.3fs) of the last confirmed send" % (self.ttl / 2)
        if self._last_err:
            why += "; last error: " + self._last_err
        self._end_locked(why, owner=False)

    def _end_locked(self, reason: str, *, owner: bool) -> None:
        if self.lost_event.is_set():
            return
        self.reason = reason
        self.ended_by_owner = owner
        self.lost_event.set()
        self._stop.set()
        if not owner and self._on_lost is not None:
            self._fire.append(reason)
        self._pending_hooks.extend(self._hooks)  # run by _run_callbacks, outside the lock
        self._hooks = []

    def _run_callbacks(self) -> None:
        with self._mu:
            fire, self._fire = self._fire, []
            hooks, self._pending_hooks = self._pending_hooks, []
        for h in hooks:
            h(self.reason)
        for r in fire:
            if self._on_lost is not None:
                self._on_lost(r)

    # ---- life -------------------------------------------------------

    def start(self) -> None:
        with self._mu:
            self._check_locked(time.monotonic())  # granted after TTL/2: already lost
        self._run_callbacks()
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
        try:
            while True:
                with self._mu:
                    due = self._last_sent + self.policy.interval()
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
        finally:
            self._run_callbacks()

    def _sleep_until(self, t: float) -> bool:
        while True:
            now = time.monotonic()
            with self._mu:
                self._check_locked(now)
            self._run_callbacks()
            if self.lost_event.is_set():
                return False
            if now >= t:
                return True
            if self._stop.wait(min(t, self.safe_until()) - now):
                return False

    def _pick_locked(self) -> str:
        addrs = self.client._addrs
        n = addrs.size()
        for i in range(n):
            a = addrs.pick(self._next + i)
            if a not in self._silent:
                self._next += i
                return a
        return addrs.pick(self._next)

    def _extend_once(self) -> "tuple[bool, float]":
        """One extension to one node: (done, pause before the next attempt)."""
        sent = time.monotonic()
        with self._mu:
            self._check_locked(sent)
            if self.lost_event.is_set():
                return True, 0.0
            left = self._last_sent + self.ttl / 2 - sent
            addr = self._pick_locked()
        timeout = max(min(self.policy.attempt_timeout(), left), 0.001)
        err: Optional[FencelockError] = None
        confirm: Optional[Callable[[], None]] = None
        try:
            confirm = self._send(addr, timeout)
        except FencelockError as e:
            err = e
        with self._mu:
            if self.lost_event.is_set():
                return True, 0.0  # ended while the request was out
            now = time.monotonic()
            if err is None:
                self._check_locked(now)  # a confirmation after the deadline is too late
                if self.lost_event.is_set():
                    return True, 0.0
                self.client._addrs.prefer(addr)
                self._next, self._tries = 0, 0
                self._silent.clear()
                self._last_sent, self._last_err = sent, ""
                if confirm is not None:
                    confirm()
                self.extensions += 1
                return True, 0.0
            if isinstance(err, UnreachableError) and "timed out" in err.message:
                self._silent.add(addr)
            if err.code == "not_leader" and err.leader:
                try:
                    url = _wire.leader_url(addr, err.leader)
                except FencelockError:
                    url = addr
                if url != addr:
                    self.client._addrs.prefer(url)
                    self._next = 0
                    self._silent.discard(url)  # named as the leader: ask it
                else:
                    self._next += 1
            elif isinstance(err, _wire.KEEP_RETRY) and not isinstance(err, TLSMismatchError):
                self._next += 1
            else:
                self._end_locked(self._refused(err), owner=False)
                return True, 0.0
            self._last_err = err.message
            self._check_locked(now)
            if self.lost_event.is_set():
                return True, 0.0
            self._tries += 1
            if self._tries % self.client._addrs.size() != 0:
                return False, 0.0  # this round has addresses left: at once
            return False, self.policy.retry_delay()
