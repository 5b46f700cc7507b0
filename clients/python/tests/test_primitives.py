"""Sessions, semaphores, read/write locks, multi-key acquire, lock-delay,
election and watch against a real single-node server."""

from __future__ import annotations

import threading
import time
import unittest
from typing import Any, Callable, List

from fencelock import (
    FOREVER,
    Client,
    CompactedError,
    Election,
    Fence,
    HeldError,
    InvalidError,
    KindMismatchError,
    Lease,
    LeaseLostError,
    LockDelayError,
    NoSessionError,
    NotFoundError,
    Revision,
    Session,
    SessionLostError,
    StaleTokenError,
)

from .harness import Server
from .test_client import BOUND, until, waiters


def gauge(addr: str, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen("http://%s/metrics" % addr, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


class _Bg:
    """A call on a thread of its own; ``result()`` joins it (bounded) and re-raises."""

    def __init__(self, f: Callable[[], Any]) -> None:
        self.out: List[Any] = []
        self.err: List[BaseException] = []

        def run() -> None:
            try:
                self.out.append(f())
            except BaseException as e:  # noqa: BLE001 - re-raised by result()
                self.err.append(e)

        self.t = threading.Thread(target=run, daemon=True)
        self.t.start()

    def done(self) -> bool:
        return not self.t.is_alive()

    def result(self) -> Any:
        self.t.join(BOUND)
        if self.t.is_alive():
            raise AssertionError("background call still running after %.0fs" % BOUND)
        if self.err:
            raise self.err[0]
        return self.out[0]


class PrimitivesTest(unittest.TestCase):
    srv: Server
    c: Client

    @classmethod
    def setUpClass(cls) -> None:
        cls.srv = Server()
        cls.c = Client(cls.srv.addr, auth_token="")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.srv.close()

    def queued(self, n: int) -> None:
        until(lambda: waiters(self.srv.addr) >= n, "%d waiter(s) queued" % n)

    # ---- sessions -----------------------------------------------------

    def test_session_many_locks_one_keepalive_released_together(self) -> None:
        c = self.c
        with Session(c, "batch", ttl=0.6) as s:
            self.assertGreater(s.id, 0)
            a = s.acquire("sess/a")
            b, d = s.acquire_all(["sess/b", "sess/d"])
            self.assertEqual(len({a.token, b.token, d.token}), 3)
            self.assertEqual(d.token, b.token + 1)  # consecutive: one command
            until(lambda: s.extensions >= 3, "three session extensions")  # ~1 s: past the locks' 0.6 s
            s.ensure()
            self.assertTrue(all(c.check(l.key, l.token) for l in (a, b, d)))
            self.assertEqual([g.key for g in c.list("sess/")], ["sess/a", "sess/b", "sess/d"])
            with self.assertRaises(HeldError):
                c.acquire("sess/a", "other", 10, wait=0)
            waiter = _Bg(lambda: c.acquire("sess/a", "other", 10, wait=BOUND))
            self.queued(1)
            b.release()  # one lock alone; the session and the others stay
            self.assertFalse(c.check("sess/b", b.token))
            self.assertTrue(b.lost and not a.lost)
        self.assertTrue(s.lost)
        self.assertEqual((s.cause, s.reason), ("closed", "closed"))
        self.assertEqual(s.info.locks if s.info else -1, 2)  # the close released a and d
        got = waiter.result()  # handed a's key in the close's step
        self.assertEqual(got.holder, "other")
        self.assertGreater(got.token, d.token)
        self.assertFalse(c.check("sess/d", d.token))
        with self.assertRaises(SessionLostError):
            s.acquire("sess/z")
        c.release("sess/a", "other")

    def test_session_lost_when_the_server_ends_it(self) -> None:
        c = self.c
        lost: List[str] = []
        s = Session(c, ttl=0.9, on_lost=lost.append).open()
        self.assertTrue(s.holder)  # a generated holder
        l = s.acquire("sesslost/a")
        c.close_session(s.id, s.holder)  # behind its back
        self.assertTrue(s.lost_event.wait(BOUND))
        self.assertIn("no longer has this session", s.reason)
        self.assertEqual(s.cause, "no_session")
        self.assertEqual(lost, [s.reason])
        self.assertTrue(l.lost)
        with self.assertRaises(SessionLostError) as cm:
            l.ensure()
        self.assertIsInstance(cm.exception, LeaseLostError)  # every lock under it is lost too
        with self.assertRaises(NoSessionError):
            c.extend_session(s.id, s.holder)
        s.close()

    def test_session_wait_in_the_queue(self) -> None:
        c = self.c
        g = c.acquire("sesswait/k", "alice", 30)
        with Session(c, "bob", ttl=5) as s:
            bg = _Bg(lambda: s.acquire("sesswait/k"))  # waits by default
            self.queued(1)
            c.release("sesswait/k", "alice", g.token)
            l = bg.result()
            self.assertGreater(l.token, g.token)
            self.assertEqual(c.get("sesswait/k").holder, "bob")
            with self.assertRaises(HeldError):
                c.acquire("sesswait/k", "carol", 30, wait=0.2)
        with self.assertRaises(NotFoundError):
            c.get("sesswait/k")

    # ---- semaphores and read/write locks ------------------------------

    def test_semaphore_permits_fifo_and_kind(self) -> None:
        c = self.c
        p1 = Lease(c, "sem/gpu", permits=2, ttl=30).acquire()
        p2 = Lease(c, "sem/gpu", permits=2, ttl=30).acquire()
        self.assertEqual(sorted([p1.slot, p2.slot]), [1, 2])
        self.assertEqual(p1.grant.kind if p1.grant else "", "semaphore")
        with self.assertRaises(HeldError):
            Lease(c, "sem/gpu", permits=2, wait=0).acquire()
        with self.assertRaises(KindMismatchError) as cm:
            Lease(c, "sem/gpu", permits=3, wait=0).acquire()
        self.assertEqual((cm.exception.kind, cm.exception.permits), ("semaphore", 2))
        with self.assertRaises(KindMismatchError):
            c.acquire("sem/gpu", "x", 30, wait=0)
        third = Lease(c, "sem/gpu", permits=2, ttl=30, wait=FOREVER)
        bg = _Bg(third.acquire)
        self.queued(1)
        slot = p1.slot
        p1.release()
        bg.result()
        self.assertEqual(third.slot, slot)  # the lowest free permit
        self.assertGreater(third.token, p2.token)
        self.assertEqual(len(c.get("sem/gpu").holders), 2)
        for p in (p2, third):
            p.release()
        with self.assertRaises(InvalidError) as ic:
            c.acquire("sem/big", "x", 30, permits=1001, wait=0)
        self.assertEqual(ic.exception.field, "permits")

    def test_rwlock_readers_share_writer_waits_no_starvation(self) -> None:
        c = self.c
        r1 = Lease(c, "rw/doc", mode="read", ttl=30).acquire()
        r2 = Lease(c, "rw/doc", mode="read", ttl=30).acquire()
        self.assertEqual(r2.grant.mode if r2.grant else "", "read")
        w = Lease(c, "rw/doc", mode="write", ttl=30, wait=FOREVER)
        wbg = _Bg(w.acquire)
        self.queued(1)
        # A queued writer holds back a reader that comes after it.
        with self.assertRaises(HeldError):
            Lease(c, "rw/doc", mode="read", wait=0).acquire()
        r3 = Lease(c, "rw/doc", mode="read", ttl=30, wait=FOREVER)
        rbg = _Bg(r3.acquire)
        self.queued(2)
        r1.release()
        self.assertFalse(wbg.done())
        r2.release()
        wbg.result()
        self.assertGreater(w.token, r2.token)
        self.assertFalse(rbg.done())  # readers queued behind the writer wait for it
        w.release()
        rbg.result()
        self.assertGreater(r3.token, w.token)
        r3.release()
        r = Lease(c, "rw/doc2", mode="read", ttl=30).acquire()
        with self.assertRaises(KindMismatchError):
            c.acquire("rw/doc2", "x", 30, wait=0)  # a writer says mode="write"
        r.release()

    # ---- multi-key acquire and lock-delay -------------------------------

    def test_acquire_all_is_all_or_none(self) -> None:
        c = self.c
        g = c.acquire("multi/b", "alice", 30)
        with self.assertRaises(HeldError):
            c.acquire_all(["multi/a", "multi/b", "multi/c"], "bob", 30, wait=0)
        self.assertEqual([x.key for x in c.list("multi/")], ["multi/b"])  # no partial hold
        bg = _Bg(lambda: c.acquire_all(["multi/a", "multi/b", "multi/c"], "bob", 30, wait=BOUND))
        c.release("multi/b", "alice", g.token)
        got = bg.result()
        self.assertEqual([x.key for x in got], ["multi/a", "multi/b", "multi/c"])
        self.assertEqual([x.token for x in got], [got[0].token, got[0].token + 1, got[0].token + 2])
        with self.assertRaises(InvalidError) as cm:
            c.acquire_all(["multi/x", "multi/x"], "bob", 30)
        self.assertEqual(cm.exception.field, "keys")
        for x in got:
            c.release(x.key, "bob", x.token)

    def test_lock_delay_after_expiry_not_after_release(self) -> None:
        c = self.c
        g = c.acquire("delay/k", "alice", 0.2, lock_delay=1.5)
        until(lambda: not c.check("delay/k", g.token), "alice's lease expired")
        with self.assertRaises(LockDelayError) as cm:
            c.acquire("delay/k", "bob", 10, wait=0)
        self.assertIsNotNone(cm.exception.remaining)
        self.assertGreater(cm.exception.remaining or 0, 0)
        self.assertLessEqual(cm.exception.remaining or 0, 1.5)  # seconds
        self.assertIn("s more", str(cm.exception))
        self.assertNotIn(" ms", str(cm.exception))
        got: List[int] = []

        def bob_gets_it() -> bool:
            try:
                got.append(c.acquire("delay/k", "bob", 10, wait=0).token)
                return True
            except LockDelayError:
                return False

        until(bob_gets_it, "the lock-delay ended")
        self.assertGreater(got[0], g.token)
        c.release("delay/k", "bob")
        # A clean release starts no delay.
        g2 = c.acquire("delay/r", "alice", 10, lock_delay=30)
        c.release("delay/r", "alice", g2.token)
        c.acquire("delay/r", "bob", 10)
        c.release("delay/r", "bob")

    # ---- election -------------------------------------------------------

    def test_election_campaign_observe_resign_and_the_token(self) -> None:
        c = self.c
        e = Election(c, "elect/billing", ttl=3)
        seen: List[Any] = []
        obs = e.observe().start(seen.append)
        until(lambda: len(seen) >= 1, "the first report")
        self.assertEqual(seen[0].candidate, "")
        fence = Fence()
        w1 = e.campaign("worker-1")
        self.assertEqual((w1.candidate, e.leader().candidate), ("worker-1", "worker-1"))
        fence.admit("ledger", w1.token)
        bg = _Bg(lambda: e.campaign("worker-2"))
        self.queued(1)
        w1.resign()
        w2 = bg.result()
        self.assertGreater(w2.token, w1.token)
        fence.admit("ledger", w2.token)
        with self.assertRaises(StaleTokenError):
            fence.admit("ledger", w1.token)  # the deposed leader
        until(lambda: [x.candidate for x in seen][-1:] == ["worker-2"], "the observer saw worker-2")
        w2.resign()
        until(lambda: seen[-1].candidate == "", "the observer saw nobody lead")
        obs.close()
        names = [x.candidate for x in seen]
        self.assertEqual(names, ["", "worker-1", "", "worker-2", ""])
        self.assertEqual(seen[2].revision.index, seen[3].revision.index)  # a hand-off is one step
        self.assertEqual(seen[1].token, w1.token)

    def test_leader_lost_when_the_server_takes_it(self) -> None:
        c = self.c
        e = Election(c, "elect/lost", ttl=0.9)
        leader = e.campaign("w")
        c.release("elect/lost", "w")  # an admin's force-release, say
        self.assertTrue(leader.lost_event.wait(BOUND))
        with self.assertRaises(LeaseLostError):
            leader.ensure()
        leader.resign()

    # ---- watches ----------------------------------------------------------

    def test_watch_iterator_resume_and_callback(self) -> None:
        c = self.c
        _, start = c.watch_list("wat/")
        g = c.acquire("wat/k", "alice", 30)
        bg = _Bg(lambda: c.acquire("wat/k", "bob", 30, wait=BOUND))
        self.queued(1)
        c.release("wat/k", "alice", g.token)
        b = bg.result()
        w = c.watch("wat/", after=start, wait=5)
        evs = [next(w) for _ in range(4)]
        self.assertEqual([(x.type, x.holder) for x in evs],
                         [("granted", "alice"), ("wait-joined", "bob"), ("released", "alice"), ("granted", "bob")])
        self.assertEqual(evs[2].revision.index, evs[3].revision.index)  # release and hand-off: one entry
        self.assertEqual(evs[3].token, b.token)
        self.assertEqual(w.revision, evs[3].revision)
        w.close()
        self.assertRaises(StopIteration, next, w)
        # Resumed after the last revision seen: nothing twice, nothing missed.
        got: List[Any] = []
        w2 = c.watch("wat/", after=evs[1].revision, wait=5).start(got.append)
        until(lambda: len(got) >= 2, "the two events after the resume point")
        c.release("wat/k", "bob", b.token)
        until(lambda: len(got) >= 3, "the release, live")
        w2.close()
        self.assertTrue(w2.join(BOUND))
        self.assertEqual([(x.type, x.holder) for x in got], [("released", "alice"), ("granted", "bob"),
                                                            ("released", "bob")])
        self.assertGreater(w2.revision, evs[3].revision)
        # One key, not its prefix's neighbours.
        c.acquire("wat/kk", "carol", 30)
        c.acquire("wat/k", "dave", 30)
        w3 = c.watch(key="wat/k", after=w2.revision, wait=5)
        self.assertEqual(next(w3).holder, "dave")
        w3.close()

    def test_watch_close_from_another_thread_ends_a_long_poll(self) -> None:
        w = self.c.watch("quiet/", wait=60)
        bg = _Bg(lambda: list(w))
        until(lambda: gauge(self.srv.addr, "fencelock_watchers") >= 1, "the long-poll is in flight")
        t0 = time.monotonic()
        w.close()
        self.assertEqual(bg.result(), [])
        self.assertLess(time.monotonic() - t0, 30)  # not the 60 s the server would have waited
        self.assertEqual(w.revision, Revision(0, 0))


class CompactedTest(unittest.TestCase):
    def test_watch_compacted_then_resync(self) -> None:
        srv = Server(["--watch-history", "4"])
        self.addCleanup(srv.close)
        c = Client(srv.addr, auth_token="")
        for k in "abcdef":
            c.acquire("jobs/" + k, "alice", 60)
        with self.assertRaises(CompactedError) as cm:
            next(c.watch("jobs/", after="0", wait=0.1))
        self.assertTrue(cm.exception.compact_revision)
        self.assertIn("compacted", str(cm.exception))
        locks, rev = c.watch_list("jobs/")
        self.assertEqual(len(locks), 6)
        c.release("jobs/a", "alice")
        ev = next(c.watch("jobs/", after=rev, wait=5))
        self.assertEqual((ev.type, ev.key), ("released", "jobs/a"))


if __name__ == "__main__":
    unittest.main()
