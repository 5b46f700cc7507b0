"""The keep-alive's rules as a state machine with no I/O and no clock of its
own (DESIGN.md section 4; the Go client's ``client/budget.go`` and
``client/keepalive.go``, rule for rule).

Every time is an argument: the drivers (:mod:`fencelock._keeper` on
threads, :mod:`fencelock.aio` on asyncio) read ``time.monotonic()`` and
send the extensions; the tests drive it with times they choose.

The safe-stop rule. The server cannot grant the key to anyone else before
TTL after the *send* of the last confirmed extension, by its own clock.
Everything under the lease must have stopped by TTL less TTL/100 (a bound
on the rate difference of the two clocks and on the moment a kill takes
to land: ``stop_by``); the lease is declared lost TTL/10 before that (the
stop grace: ``give_up``, 0.89×TTL), so a holder has that long to stop.
Between an extension falling due and the give-up point, 1.5 s are kept
free for a failover (a leader elected, 0.7 to 1.3 s with the server's
default raft timing, and found), so extensions go out earlier than TTL/3
when TTL/3 would leave less, but never more often than every TTL/8.
"""

from __future__ import annotations

import random
from typing import Callable, Dict, List, NamedTuple, Optional, Set

from ._wire import Addrs, leader_url
from .errors import FencelockError, InternalError, NoSessionError, NoSpaceError, NotHeldError, UnavailableError, UnreachableError

# The time kept free, between an extension falling due and the give-up
# point, for a leader to be elected and found (the Go client's
# failoverAllowance). For a TTL under about 2 s it no longer fits.
FAILOVER_ALLOWANCE = 1.5


def clock_allowance(ttl: float) -> float:
    """TTL/100: the bound kept on clock-rate error between client and server."""
    return ttl / 100


def stop_grace(ttl: float) -> float:
    """TTL/10: how long a holder has to stop once its lease is declared lost."""
    return ttl / 10


class Budget(NamedTuple):
    """One TTL's timing, each an offset from the send of the last confirmed extension."""

    every: float  # extend this long after (less up to 10% of jitter, never more)
    give_up: float  # declare the lease lost at this offset: 0.89×TTL
    stop_by: float  # everything under the lease stopped by then: 0.99×TTL


def budget_for(ttl: float) -> Budget:
    """The Go client's ``budgetFor``: extend at TTL/3, or sooner to keep
    :data:`FAILOVER_ALLOWANCE` free before the give-up point, never sooner than TTL/8.

    >>> budget_for(3.0)
    Budget(every=1.0, give_up=2.67, stop_by=2.97)
    >>> [round(x, 3) for x in budget_for(2.0)]
    [0.28, 1.78, 1.98]
    """
    stop_by = ttl - clock_allowance(ttl)
    give_up = stop_by - stop_grace(ttl)
    every = min(max(give_up - FAILOVER_ALLOWANCE, ttl / 8), ttl / 3)
    return Budget(every, give_up, stop_by)


def attempt_timeout(ttl: float) -> float:
    """One extension to one node: about TTL/12 (100 ms to 2 s, never more than TTL/6)."""
    return min(max(ttl / 12, 0.1), 2.0, max(ttl / 6, 0.001))


def hedge_delay(ttl: float) -> float:
    """How long an attempt may go unanswered before the next address is asked beside it."""
    return max(attempt_timeout(ttl) / 3, 0.001)


def retry_delay_max(ttl: float) -> float:
    """The longest pause between rounds of failed attempts: about TTL/30, at most 250 ms."""
    return min(max(ttl / 30, 0.002), 0.25)


class Attempt:
    """One extension sent to one node: ``sent`` dates the lease if it is confirmed."""

    __slots__ = ("id", "addr", "sent", "timeout", "ends")

    def __init__(self, id: int, addr: str, sent: float, timeout: float) -> None:
        self.id = id
        self.addr = addr
        self.sent = sent
        self.timeout = timeout
        self.ends = sent + timeout

    def __repr__(self) -> str:
        return "Attempt(%d, %s, sent=%.3f, timeout=%.3f)" % (self.id, self.addr, self.sent, self.timeout)


# Failures after which an extension is tried again (elsewhere, or later):
# the node could not be reached, was not the leader, or could not serve.
TRANSIENT = (UnavailableError, InternalError, NoSpaceError)


class KeepAlive:
    """The keep-alive of one lease or session (not thread-safe: a driver holds it).

    A driver calls :meth:`step` at :meth:`wake_at` (and whenever it likes),
    sends each :class:`Attempt` it returns, and reports each outcome with
    :meth:`answered`; an attempt no longer in :meth:`out_ids` is over
    (timed out, superseded, or the keep-alive ended) and its request may be
    abandoned. ``ended`` is set once the lease is lost or its owner ended
    it; ``cause`` says why in one word and ``detail`` in a sentence.

    Within an extension: an attempt goes to one node; one that fails moves
    the extension at once to the next address (or to the leader a node
    named), one address at a time; one unanswered for :func:`hedge_delay`
    is left running and the next address is asked beside it; one
    unanswered for :func:`attempt_timeout` is abandoned and its node marked
    silent, passed over by later attempts while another address is left.
    A round asks each address at most once; after a round of failures the
    extension pauses about TTL/60 to TTL/30 (at most 250 ms) and starts the
    next. A round answered only by nodes that know no leader means the
    leader was elected among the silent ones: they are asked again.
    """

    def __init__(self, addrs: Addrs, ttl: float, sent: float, *, what: str = "extend",
                 rand: Callable[[], float] = random.random) -> None:
        self.addrs = addrs
        self.ttl = ttl
        self.budget = budget_for(ttl)
        self.what = what
        self._rand = rand
        self.last_sent = sent  # send time of the last confirmed grant or extension
        self.last_err: Optional[FencelockError] = None  # since the last confirmation
        self.extensions = 0
        self.ended = False
        self.cause = ""  # "released", "closed", "expired", "unreachable", "unavailable", or the server's code
        self.detail = ""
        self.by_owner = False
        self.lost_at: Optional[float] = None  # when the loss was declared
        self.error: Optional[FencelockError] = None  # the refusal that ended it, if one did
        self.due = sent + self.interval()
        self.extending = False
        self.paused = False
        self.hedge_at: Optional[float] = None
        self.resume_at: Optional[float] = None
        self.out: Dict[int, Attempt] = {}
        self.asked: Set[str] = set()
        self.silent: Set[str] = set()
        self.tries = 0
        self.no_leader = 0
        self._ids = 0

    # ---- the rule -----------------------------------------------------------

    def deadline(self) -> float:
        """The give-up point: 0.89×TTL after the send of the last confirmed extension."""
        return self.last_sent + self.budget.give_up

    def stop_by(self) -> float:
        """0.99×TTL after that send: everything under the lease must have stopped."""
        return self.last_sent + self.budget.stop_by

    def held_until(self) -> float:
        """TTL after that send: the earliest the server may grant the key to another."""
        return self.last_sent + self.ttl

    def interval(self) -> float:
        """The budget's cadence less up to 10%, so clients started together do not
        extend in step; never later (one sent late would eat the failover's room)."""
        every = self.budget.every
        return every - self._rand() * every / 10

    def retry_delay(self) -> float:
        d = retry_delay_max(self.ttl)
        return d / 2 + self._rand() * d / 2

    def check(self, now: float) -> bool:
        """Declare the loss once ``now`` has reached the deadline; True once ended."""
        if not self.ended and now >= self.deadline():
            self._lost(now)
        return self.ended

    def out_ids(self) -> Set[int]:
        return set(self.out)

    def wake_at(self) -> Optional[float]:
        """When :meth:`step` has something to do, at the latest (None once ended)."""
        if self.ended:
            return None
        t = self.deadline()
        if not self.extending:
            t = min(t, self.due)
        elif self.paused:
            if self.resume_at is not None:
                t = min(t, self.resume_at)
        elif self.hedge_at is not None:
            t = min(t, self.hedge_at)
        for a in self.out.values():
            t = min(t, a.ends)
        return t

    # ---- events -------------------------------------------------------------

    def step(self, now: float) -> List[Attempt]:
        """Do what is due at ``now``; the attempts to send."""
        launch: List[Attempt] = []
        if self.check(now):
            self.out.clear()
            return launch
        for a in sorted(self.out.values(), key=lambda a: a.ends):
            if now >= a.ends and a.id in self.out:
                del self.out[a.id]
                self.silent.add(a.addr)
                err = UnreachableError("fencelock: %s: no answer to %s within %.3gs" % (a.addr, self.what, a.timeout))
                self._failed(a, err, now, launch)
                if self.ended:
                    return []
        if not self.extending:
            if now >= self.due:
                self.extending = True
                self._launch(now, launch)
        elif self.paused:
            if self.resume_at is not None and now >= self.resume_at:
                self.paused, self.resume_at = False, None
                self.asked.clear()  # a new round
                self._launch(now, launch)
        elif self.hedge_at is not None and now >= self.hedge_at:
            self.hedge_at = None
            self._launch(now, launch)
        return launch

    def answered(self, attempt_id: int, now: float, err: Optional[FencelockError]) -> "tuple[bool, List[Attempt]]":
        """Take in one attempt's outcome: (confirmed, the attempts to send next).

        ``confirmed`` True means the driver must apply the answer (the
        lease's new grant); an answer to an attempt no longer out, or one
        that came after the deadline, is not taken.
        """
        a = self.out.pop(attempt_id, None)
        launch: List[Attempt] = []
        if a is None or self.ended:
            return False, launch
        if err is None:
            if self.check(now):  # a confirmation after the deadline is too late
                self.out.clear()
                return False, launch
            self.addrs.prefer(a.addr)
            self.asked.clear()
            self.silent.clear()
            self.tries = self.no_leader = 0
            # A later send confirmed first keeps the later date.
            self.last_sent = max(self.last_sent, a.sent)
            self.last_err = None
            self.extensions += 1
            self.extending = self.paused = False
            self.hedge_at = self.resume_at = None
            self.out.clear()  # the others are abandoned
            self.due = self.last_sent + self.interval()
            return True, launch
        self._failed(a, err, now, launch)
        return False, launch

    def end(self, cause: str, now: float) -> bool:
        """The owner ends it (``cause`` "released" or "closed"); False if it had been lost."""
        self.check(now)
        if self.ended:
            return self.by_owner
        self.ended, self.by_owner, self.cause, self.detail = True, True, cause, cause
        self._stop()
        return True

    # ---- inside -------------------------------------------------------------

    def _failed(self, a: Attempt, err: FencelockError, now: float, launch: List[Attempt]) -> None:
        """Record a failed attempt and go on (Go's ``settle``, then its loop)."""
        if err.code == "not_leader" and err.leader:
            try:
                url = leader_url(a.addr, err.leader)
            except FencelockError:
                url = a.addr
            if url != a.addr:
                self.addrs.prefer(url)
                self.silent.discard(url)  # named as the leader: ask it, in this round too
                self.asked.discard(url)
        elif isinstance(err, TRANSIENT):
            if err.code == "not_leader":
                self.no_leader += 1
        else:
            self._refused(err, now)
            return
        self.last_err = err
        self.tries += 1
        if self.check(now):
            self.out.clear()
            return
        if not self.extending or self.paused:
            return  # waiting for the pause to end, or for attempts still out
        if self.tries < self.addrs.size() and self._launch(now, launch):
            return
        # A round with no address left to ask, or a failure per address
        # (nodes naming each other as the leader): pause, so that a cluster
        # without a leader is not asked in a tight loop.
        self.paused, self.hedge_at = True, None
        if self.tries > 0 and self.no_leader == self.tries:
            self.silent.clear()
        self.tries = self.no_leader = 0
        self.resume_at = now + self.retry_delay()

    def _launch(self, now: float, launch: List[Attempt]) -> bool:
        """Send the next attempt of the round; False when the round has no address left."""
        if self.check(now):
            return True
        addr = self._pick()
        if not addr:
            return False
        self.asked.add(addr)
        timeout = max(min(attempt_timeout(self.ttl), self.deadline() - now), 0.001)
        self._ids += 1
        a = Attempt(self._ids, addr, now, timeout)
        self.out[a.id] = a
        launch.append(a)
        self.hedge_at = now + hedge_delay(self.ttl)
        return True

    def _pick(self) -> str:
        """From the preferred address on, the first not asked in this round and
        with no attempt out, passing over silent ones while one is not silent."""
        n = self.addrs.size()
        busy = {a.addr for a in self.out.values()}
        all_silent = len(self.silent) >= n
        for i in range(n):
            a = self.addrs.pick(i)
            if a not in busy and a not in self.asked and (all_silent or a not in self.silent):
                return a
        return ""

    def _lost(self, now: float) -> None:
        err = self.last_err
        if err is None:
            cause = "expired"
        elif isinstance(err, UnreachableError):
            cause = "unreachable"
        else:
            cause = "unavailable"
        detail = "%s: no %s confirmed within %.3gs (0.89 x TTL %.3gs) of the send of the last confirmed one" % (
            cause, self.what, self.budget.give_up, self.ttl)
        if err is not None:
            detail += "; last error: " + _bare(err.message)
        self.ended, self.by_owner, self.cause, self.detail, self.lost_at = True, False, cause, detail, now
        self._stop()

    def _refused(self, err: FencelockError, now: float) -> None:
        if isinstance(err, NotHeldError):
            cause, why = "not_held", "the server no longer has this grant"
        elif isinstance(err, NoSessionError):
            cause, why = "no_session", "the server no longer has this session"
        else:
            cause, why = err.code or "refused", "%s refused" % self.what
        self.ended, self.by_owner, self.cause, self.lost_at, self.error = True, False, cause, now, err
        self.detail = "%s: %s: %s" % (cause, why, _bare(err.message))
        self._stop()

    def _stop(self) -> None:
        self.extending = self.paused = False
        self.hedge_at = self.resume_at = None
        self.out.clear()


def _bare(message: str) -> str:
    """An error's message inside another's: without its own "fencelock: "."""
    return message[len("fencelock: "):] if message.startswith("fencelock: ") else message
