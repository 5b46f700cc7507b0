"""A Python Lease through a leader's death or freeze at the worst phase of
its keep-alive's cadence, on a real 3-node cluster: the Python twin of
cmd/fencelock's TestFailoverProcessWorstPhase (issue 44).

The lease's client reaches each node through a proxy of the test's, which
the node advertises as its address, so that not_leader answers send the
client through the proxies too. Once an extension has been confirmed, the
leader's proxy is armed: when the next extension of the cadence reaches
it, the leader is killed with SIGKILL (or frozen with SIGSTOP) before the
request goes on. The leader goes as long after the last confirmed send as
the cadence allows, with an extension in flight, and the survivors must
elect a leader and confirm a retry before the client gives the lease up
(0.89 x TTL after that send). Every lease must ride through, under the
same token; the killed node is restarted (the frozen one continued) and
catches up before the next fault, so a majority is always up.

With FENCELOCK_WORST_PHASE_RUNS=N each fault is repeated N times per TTL
and the phase and gap of each are printed, one line per fault and TTL.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
import unittest
from typing import Callable, List, NamedTuple, Optional, Tuple

from fencelock import Client, Lease

from .harness import Cluster, Server
from .test_client import BOUND

TTLS = (2.0, 3.0)


def runs() -> int:
    s = os.environ.get("FENCELOCK_WORST_PHASE_RUNS", "")
    if not s:
        return 1
    n = int(s)
    if n < 1:
        raise ValueError("FENCELOCK_WORST_PHASE_RUNS=%r: want a positive count" % s)
    return n


class PhaseRun(NamedTuple):
    phase: float  # the fault, after the send of the last confirmed extension
    gap: float  # the send of the first extension confirmed after the fault, after that send
    lost: str  # the lease's cause, if it was lost


def until_set(ev: threading.Event, lease: Lease, bound: float) -> bool:
    """Wait for ev, or for the lease's end; False if neither came within bound (a hang)."""
    end = time.monotonic() + bound
    while time.monotonic() < end:
        if ev.wait(0.01) or lease.lost_event.is_set():
            return True
    return False


class WorstPhaseTest(unittest.TestCase):
    def setUp(self) -> None:
        self.cluster = Cluster(3, proxied=True)
        self.addCleanup(self.cluster.close)

    def test_kill(self) -> None:
        self.worst_phase("kill")

    def test_stop(self) -> None:
        self.worst_phase("stop")

    def worst_phase(self, fault: str) -> None:
        n = runs()
        losses: List[str] = []
        with Client(self.cluster.proxy_addrs, auth_token="") as c:
            summary = []
            for ttl in TTLS:
                key = "worst/%g" % ttl
                lease = Lease(c, key, "h", ttl=ttl, wait=0).acquire()
                results: List[PhaseRun] = []
                for i in range(n):
                    r = self.fault_at_worst_phase(lease, ttl, fault)
                    results.append(r)
                    if r.lost:
                        losses.append("TTL %gs, run %d: lease lost after a %s of the leader %.3fs after the last "
                                      "confirmed send, a majority up: %s" % (ttl, i + 1, fault, r.phase, lease.reason))
                        # Taken again (a renewal: same holder) once the cluster has settled.
                        self.cluster.converge()
                        lease = Lease(c, key, "h", ttl=ttl).acquire()
                        continue
                    # Kept, under the same token: extended, never granted again.
                    self.assertTrue(c.check(key, lease.token))
                    self.assertEqual(c.get(key).token, lease.token)
                lease.release()
                summary.append(summarize(fault, ttl, results))
            if "FENCELOCK_WORST_PHASE_RUNS" in os.environ:
                print("\n%s of the leader at the worst phase, %d runs per TTL:\n%s" % (fault, n, "\n".join(summary)),
                      file=sys.stderr)
        self.assertEqual(losses, [])

    def fault_at_worst_phase(self, lease: Lease, ttl: float, fault: str) -> PhaseRun:
        cl = self.cluster
        leader = cl.converge()
        # Start from a confirmation, so that the next extension request the
        # leader's proxy sees is the next of the cadence.
        self.assertTrue(until_set(lease.extended(), lease, 2 * ttl), "no extension confirmed")
        if lease.lost:
            return PhaseRun(0, 0, lease.cause)
        killed: "queue.Queue[Tuple[float, float]]" = queue.Queue()

        def at_extend(chunk: bytes) -> bool:
            if b"/v1/extend" not in chunk:
                return False  # the nodes talk through the proxies too
            at, sent = time.monotonic(), lease.held_until() - ttl
            if fault == "stop":
                leader.stop_process()
            else:
                leader.kill9()
            killed.put((at, sent))
            return True

        cl.proxy(leader).arm(at_extend)
        try:
            at, sent = killed.get(timeout=2 * ttl)  # a hang, not a timing
        except queue.Empty:
            cl.proxy(leader).arm(None)
            self.fail("the next extension never reached the leader's proxy")
        # The first extension sent after the fault and confirmed, read the
        # moment it is (a poll could read the one after it instead).
        after: Optional[float] = None
        while after is None and not lease.lost:
            ext = lease.extended()
            s = lease.held_until() - ttl
            if s > at:
                after = s
                break
            self.assertTrue(until_set(ext, lease, 2 * ttl), "neither an extension nor the loss")
            s = lease.held_until() - ttl
            if s > at:
                after = s
        r = PhaseRun(at - sent, (after or at) - sent, lease.cause if lease.lost else "")
        if fault == "stop":
            leader.cont_process()
        else:
            leader.restart()
        return r


def summarize(fault: str, ttl: float, rs: List[PhaseRun]) -> str:
    kept = [r for r in rs if not r.lost]

    def mm(xs: List[float]) -> str:
        if not xs:
            return "-"
        xs = sorted(xs)
        return "%.3f / %.3f / %.3f" % (xs[0], xs[len(xs) // 2], xs[-1])

    return "| %s | %gs | %d | %d | %s | %s | %.3f |" % (fault, ttl, len(rs), len(rs) - len(kept),
                                                       mm([r.phase for r in kept]), mm([r.gap for r in kept]),
                                                       0.89 * ttl)


class ClusterDownTest(unittest.TestCase):
    """A cluster that stays out past the budget: the lease is reported lost
    before the server could grant the key to anyone else, with the cause."""

    def setUp(self) -> None:
        self.cluster = Cluster(3)
        self.addCleanup(self.cluster.close)

    def lost_while(self, c: Client, key: str, ttl: float, fault: Callable[[], object]) -> Lease:
        lost: List[float] = []
        lease = Lease(c, key, "h", ttl=ttl, wait=0, on_lost=lambda _: lost.append(time.monotonic())).acquire()
        self.assertTrue(until_set(lease.extended(), lease, 2 * ttl))
        fault()
        self.assertTrue(lease.lost_event.wait(BOUND), "never reported lost")
        k = lease._keeper
        assert k is not None
        lost_at = k.core.lost_at
        assert lost_at is not None
        deadline, stop_by, held_until = k.times()
        self.assertGreaterEqual(lost_at, deadline)  # not before 0.89 x TTL after the last confirmed send...
        self.assertLess(lost_at, held_until)  # ...and before the server could grant it to another
        self.assertLess(lost[0], held_until)  # on_lost ran by then too
        return lease

    def test_frozen_cluster(self) -> None:
        cl = self.cluster
        with Client(cl.addrs, auth_token="") as c:
            def freeze() -> None:
                for n in cl.nodes:
                    n.stop_process()

            lease = self.lost_while(c, "down/frozen", 2.0, freeze)
            self.assertEqual(lease.cause, "unreachable", lease.reason)
            for n in cl.nodes:
                n.cont_process()

    def test_cluster_without_quorum(self) -> None:
        cl = self.cluster
        with Client(cl.addrs, auth_token="") as c:
            leader = cl.leader()
            others = [n for n in cl.nodes if n is not leader]

            def lose_quorum() -> None:
                leader.kill9()
                others[0].kill9()

            lease = self.lost_while(c, "down/quorum", 2.0, lose_quorum)
            # The survivor answers that it knows no leader, or does not answer.
            self.assertIn(lease.cause, ("unavailable", "unreachable"), lease.reason)


if __name__ == "__main__":
    unittest.main()
