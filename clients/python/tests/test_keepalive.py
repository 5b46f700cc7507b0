"""The keep-alive's rules (fencelock._keepalive), driven with explicit times:
the budget's arithmetic against the Go client's (client/budget_test.go),
the cadence, the give-up point and its cause, hedging a silent node,
following a named leader, pausing between rounds, and a failover at the
worst phase of the cadence in a model cluster. No server, no sleeping.
"""

from __future__ import annotations

import heapq
import math
import unittest
from typing import Callable, List, Optional, Tuple

from fencelock._keepalive import (
    FAILOVER_ALLOWANCE,
    Attempt,
    KeepAlive,
    attempt_timeout,
    budget_for,
    hedge_delay,
    retry_delay_max,
)
from fencelock._wire import Addrs
from fencelock.errors import (
    FencelockError,
    InternalError,
    NoSpaceError,
    NotHeldError,
    UnavailableError,
    UnreachableError,
    error_for,
)

A, B, C = "http://a:7470", "http://b:7470", "http://c:7470"

# answer(addr, sent) -> None (no answer, ever), or (after how long, the error or None for a confirmation)
Answer = Callable[[str, float], Optional[Tuple[float, Optional[FencelockError]]]]


def refused(addr: str) -> UnreachableError:
    return UnreachableError("fencelock: %s: [Errno 111] Connection refused" % addr)


def not_leader(leader: str = "") -> UnavailableError:
    return UnavailableError("fencelock: not the leader", code="not_leader", status=503,
                            leader=leader.split("://", 1)[-1])


class World:
    """Runs a KeepAlive as its drivers do, on a clock that moves only here."""

    def __init__(self, core: KeepAlive, answer: Answer, now: float = 0.0) -> None:
        self.core = core
        self.answer = answer
        self.now = now
        self.sent: List[Attempt] = []
        self._heap: List[Tuple[float, int, int, Optional[FencelockError]]] = []
        self._seq = 0

    def _send(self, attempts: List[Attempt]) -> None:
        for a in attempts:
            self.sent.append(a)
            r = self.answer(a.addr, self.now)
            if r is not None:
                self._seq += 1
                heapq.heappush(self._heap, (self.now + r[0], self._seq, a.id, r[1]))

    def run(self, until: float, stop: Callable[[], bool] = lambda: False) -> None:
        """Move time to ``until`` (or until stop() or the end), event by event."""
        for _ in range(100000):
            self._send(self.core.step(self.now))
            if self.core.ended or stop() or self.now >= until:
                return
            wake = self.core.wake_at()
            nxt = min(wake if wake is not None else math.inf, self._heap[0][0] if self._heap else math.inf, until)
            self.now = max(self.now, nxt)
            while self._heap and self._heap[0][0] <= self.now:
                _, _, attempt_id, err = heapq.heappop(self._heap)
                _, more = self.core.answered(attempt_id, self.now, err)
                self._send(more)
        raise AssertionError("the keep-alive never rests")


def keep(ttl: float, addrs: Tuple[str, ...] = (A, B, C), jitter: float = 0.0, sent: float = 0.0) -> KeepAlive:
    return KeepAlive(Addrs(list(addrs)), ttl, sent, rand=lambda: jitter)


def ok(latency: float = 0.002) -> Answer:
    return lambda addr, sent: (latency, None)


class BudgetTest(unittest.TestCase):
    def test_budget_as_go(self) -> None:
        # client/budget_test.go's TestBudget, in seconds.
        for ttl, every, give_up, stop_by in [
            (0.1, 0.0125, 0.089, 0.099),
            (1, 0.125, 0.89, 0.99),
            (2, 0.28, 1.78, 1.98),
            (3, 1.0, 2.67, 2.97),
            (6, 2.0, 5.34, 5.94),
            (10, 10 / 3, 8.9, 9.9),
            (60, 20.0, 53.4, 59.4),
        ]:
            b = budget_for(ttl)
            for got, want in zip(b, (every, give_up, stop_by)):
                self.assertAlmostEqual(got, want, places=9, msg="TTL %g: %r" % (ttl, b))

    def test_promises_over_every_ttl(self) -> None:
        ttl = 0.1
        while ttl <= 86400:
            b = budget_for(ttl)
            self.assertAlmostEqual(b.give_up, 0.89 * ttl, delta=1e-9 * ttl)
            self.assertAlmostEqual(b.stop_by - b.give_up, ttl / 10, delta=1e-9 * ttl)
            self.assertLessEqual(b.every, ttl / 3 + 1e-12)
            self.assertGreaterEqual(b.every, ttl / 8 - 1e-12)
            if ttl >= 2:
                self.assertGreaterEqual(b.give_up - b.every, FAILOVER_ALLOWANCE - 1e-9, "TTL %g" % ttl)
            ttl *= 1.07

    def test_attempt_hedge_and_retry_timing(self) -> None:
        self.assertAlmostEqual(attempt_timeout(2), 2 / 12)
        self.assertAlmostEqual(hedge_delay(2), 2 / 36)
        self.assertAlmostEqual(attempt_timeout(3), 0.25)
        self.assertAlmostEqual(hedge_delay(3), 0.25 / 3)
        self.assertEqual(attempt_timeout(1.2), 0.1)  # at least 100 ms...
        self.assertAlmostEqual(attempt_timeout(0.3), 0.05)  # ...but never more than TTL/6
        self.assertEqual(attempt_timeout(600), 2.0)
        self.assertAlmostEqual(retry_delay_max(3), 0.1)
        self.assertEqual(retry_delay_max(60), 0.25)


class CadenceTest(unittest.TestCase):
    def test_extends_on_the_budget_dated_from_the_send(self) -> None:
        k = keep(3)
        self.assertEqual(k.wake_at(), 1.0)  # no jitter drawn: TTL/3 after the grant's send
        self.assertEqual(k.step(0.999), [])
        [a] = k.step(1.0)
        self.assertEqual((a.addr, a.sent), (A, 1.0))
        self.assertAlmostEqual(a.timeout, 0.25)
        confirmed, more = k.answered(a.id, 1.4, None)  # a slow answer
        self.assertTrue(confirmed)
        self.assertEqual(more, [])
        self.assertEqual(k.last_sent, 1.0)  # dated from the send, not the answer
        self.assertAlmostEqual(k.deadline(), 1.0 + 2.67)
        self.assertAlmostEqual(k.stop_by(), 1.0 + 2.97)
        self.assertEqual(k.held_until(), 4.0)
        self.assertEqual(k.wake_at(), 2.0)
        self.assertEqual(k.extensions, 1)

    def test_jitter_only_moves_an_extension_earlier(self) -> None:
        for j in (0.0, 0.5, 0.999):
            k = keep(2, jitter=j)
            due = k.wake_at()
            assert due is not None
            self.assertLessEqual(due, 0.28)
            self.assertGreaterEqual(due, 0.28 * 0.9)

    def test_a_healthy_lease_at_ttl_2_extends_every_280ms(self) -> None:
        k = keep(2)
        w = World(k, ok())
        w.run(10.0)
        self.assertFalse(k.ended)
        self.assertEqual([a.addr for a in w.sent], [A] * len(w.sent))
        gaps = [round(b.sent - a.sent, 6) for a, b in zip(w.sent, w.sent[1:])]
        self.assertEqual(set(gaps), {0.28})  # every, from send to send


class GiveUpTest(unittest.TestCase):
    def test_lost_at_089_ttl_when_nothing_answers(self) -> None:
        for ttl in (2.0, 3.0, 10.0):
            k = keep(ttl)
            w = World(k, lambda addr, sent: (0.0005, refused(addr)))
            w.run(0.89 * ttl - 1e-6)
            self.assertFalse(k.ended, "TTL %g: lost before 0.89 x TTL" % ttl)
            w.run(ttl)
            self.assertTrue(k.ended)
            self.assertEqual(k.cause, "unreachable")
            self.assertAlmostEqual(k.lost_at or 0, 0.89 * ttl, places=6)
            self.assertLess(k.lost_at or 0, k.held_until())
            self.assertIn("Connection refused", k.detail)
            self.assertTrue(k.detail.startswith("unreachable: no extend confirmed within"), k.detail)

    def test_a_paused_process_finds_its_lease_expired(self) -> None:
        k = keep(2)
        self.assertFalse(k.check(1.779))
        self.assertTrue(k.check(5.0))  # nothing ran meanwhile: no failure to blame
        self.assertEqual(k.cause, "expired")
        self.assertEqual(k.step(5.0), [])
        self.assertIsNone(k.wake_at())

    def test_unavailable_when_the_nodes_answer_but_cannot_serve(self) -> None:
        k = keep(2)
        w = World(k, lambda addr, sent: (0.001, not_leader()))
        w.run(5)
        self.assertEqual(k.cause, "unavailable")

    def test_a_full_disk_is_tried_elsewhere_not_a_refusal(self) -> None:
        err = error_for(507, {"code": "no_space", "message": "write log: no space left on device"})
        self.assertIsInstance(err, NoSpaceError)
        self.assertNotIsInstance(err, InternalError)
        k = keep(3)
        [a] = k.step(1.0)
        k.answered(a.id, 1.01, err)
        self.assertFalse(k.ended, "a node out of disk space ended the lease at once: %s" % k.detail)
        self.assertTrue(k.out_ids() or k.wake_at() is not None)

    def test_a_confirmation_after_the_deadline_is_too_late(self) -> None:
        k = keep(2)
        [a] = k.step(0.28)
        confirmed, _ = k.answered(a.id, 1.781, None)  # past 0.89 x TTL after the grant's send
        self.assertFalse(confirmed)
        self.assertTrue(k.ended)
        self.assertEqual(k.last_sent, 0.0)

    def test_a_refusal_ends_it_at_once(self) -> None:
        k = keep(3)
        [a] = k.step(1.0)
        k.answered(a.id, 1.01, NotHeldError("fencelock: not the live holder of this token", code="not_held"))
        self.assertTrue(k.ended)
        self.assertFalse(k.by_owner)
        self.assertEqual(k.cause, "not_held")
        self.assertEqual(k.lost_at, 1.01)
        self.assertIn("no longer has this grant", k.detail)

    def test_owner_end(self) -> None:
        k = keep(3)
        self.assertTrue(k.end("released", 1.0))
        self.assertEqual((k.cause, k.by_owner), ("released", True))
        k2 = keep(3)
        self.assertFalse(k2.end("released", 3.0))  # past the deadline: it had been lost
        self.assertEqual(k2.cause, "expired")


class FailoverTest(unittest.TestCase):
    def test_a_silent_node_is_hedged_and_then_passed_over(self) -> None:
        k = keep(3)
        [a] = k.step(1.0)
        self.assertEqual(a.addr, A)
        self.assertEqual(k.wake_at(), 1.0 + hedge_delay(3))
        [b] = k.step(1.0 + hedge_delay(3))  # A is still out: B is asked beside it
        self.assertEqual(b.addr, B)
        self.assertEqual(k.out_ids(), {a.id, b.id})
        confirmed, _ = k.answered(b.id, b.sent + 0.003, None)
        self.assertTrue(confirmed)
        self.assertEqual(k.last_sent, b.sent)
        self.assertEqual(k.out_ids(), set())  # A's attempt is abandoned
        self.assertEqual(k.addrs.pick(0), B)  # and B preferred from now on

    def test_an_attempt_timed_out_marks_its_node_silent(self) -> None:
        k = keep(3)
        frozen = {A}
        w = World(k, lambda addr, sent: None if addr in frozen else (0.002, refused(addr)))
        w.run(1.0 + attempt_timeout(3) + 1e-9)
        self.assertIn(A, k.silent)
        # The next round asks B and C, not A again, while they are left.
        later = [a.addr for a in w.sent[1:]]
        self.assertEqual(later[:2], [B, C])
        w.run(2.0)
        self.assertEqual(sum(1 for a in w.sent if a.addr == A), 1, [a.addr for a in w.sent])

    def test_follows_the_leader_named_even_if_silent(self) -> None:
        k = keep(3)
        k.silent.add(C)
        [a] = k.step(1.0)
        _, more = k.answered(a.id, 1.001, not_leader(C))
        self.assertEqual([m.addr for m in more], [C])  # at once, not after a pause

    def test_a_round_of_failures_pauses_then_starts_again(self) -> None:
        k = keep(3)
        w = World(k, lambda addr, sent: (0.001, refused(addr)))
        w.run(1.0035)
        self.assertEqual([a.addr for a in w.sent], [A, B, C])
        self.assertTrue(k.paused)
        assert k.resume_at is not None
        self.assertAlmostEqual(k.resume_at - 1.003, retry_delay_max(3) / 2)  # no jitter drawn
        w.run(k.resume_at + 0.0001)
        self.assertEqual(w.sent[3].addr, A)

    def test_silent_nodes_are_asked_again_when_the_others_know_no_leader(self) -> None:
        # A froze; B and C know no leader yet: the leader was elected among
        # the silent, so the round after theirs asks A again.
        k = keep(3)
        w = World(k, lambda addr, sent: None if addr == A else (0.001, not_leader()))
        w.run(1.8)
        asked_a = [a.sent for a in w.sent if a.addr == A]
        self.assertGreaterEqual(len(asked_a), 2, [(a.addr, round(a.sent, 3)) for a in w.sent])

    def test_rides_a_failover_at_the_worst_phase(self) -> None:
        # client/budget_test.go's TestLeaseRidesAFailoverAtTheWorstPhase in
        # the model: A leads; just before an extension is due it dies (its
        # port refuses) or freezes (no answer); B and C name A until they
        # have elected C, as slowly as the slowest election measured
        # (1.3 s); then B names C and C confirms. The lease must ride through.
        election = 1.3
        for ttl in (2.0, 3.0, 6.0, 10.0):
            for fault in ("kill", "freeze"):
                with self.subTest(ttl=ttl, fault=fault):
                    k = keep(ttl, jitter=0.5)
                    fault_at = [math.inf]

                    def answer(addr: str, sent: float) -> Optional[Tuple[float, Optional[FencelockError]]]:
                        if sent < fault_at[0]:
                            return (0.002, None) if addr == A else (0.001, not_leader(A))
                        if addr == A:
                            return None if fault == "freeze" else (0.0005, refused(A))
                        if sent < fault_at[0] + election:
                            return 0.001, not_leader(A)
                        return (0.001, None) if addr == C else (0.001, not_leader(C))

                    w = World(k, answer)
                    w.run(10 * ttl, stop=lambda: k.extensions >= 1)
                    self.assertEqual(k.extensions, 1)
                    fault_at[0] = k.due - 0.001
                    confirmed = k.last_sent
                    w.run(fault_at[0])
                    w.run(100 * ttl, stop=lambda: k.last_sent != confirmed)
                    self.assertFalse(k.ended, "lost: %s" % k.detail)
                    self.assertGreater(k.last_sent, fault_at[0] + election)
                    self.assertEqual(k.addrs.pick(0), C)
                    room = k.budget.give_up - (k.last_sent - confirmed)
                    self.assertGreater(room, 0)


if __name__ == "__main__":
    unittest.main()
