"""A 3-node cluster whose leader is killed with SIGKILL while a Lease, a
Session (and an asyncio lease) are held: the survivors elect a leader,
the holders' next extensions reach it, and everything goes on under the
same tokens.

The kill comes right after each keep-alive confirmed an extension, the
best phase of the cadence: each has 0.89 x TTL less the election to find
the new leader. test_failover.py kills and freezes the leader at the
worst phase, an extension in flight.
"""

from __future__ import annotations

import asyncio
import threading
import unittest
from typing import List

from fencelock import Client, Lease, Session
from fencelock.aio import AsyncClient, AsyncLease

from .harness import Cluster
from .test_client import BOUND, until

TTL = 3.0


class LeaderKillTest(unittest.TestCase):
    def setUp(self) -> None:
        self.cluster = Cluster(3)
        self.addCleanup(self.cluster.close)

    def test_lease_and_session_survive_kill9_of_the_leader(self) -> None:
        cl = self.cluster
        c = Client(cl.addrs, auth_token="")
        self.addCleanup(c.close)
        lease = Lease(c, "ha/lease", "holder-1", ttl=TTL).acquire()
        self.addCleanup(lease.close)
        s = Session(c, "holder-2", ttl=TTL).open()
        self.addCleanup(s.close)
        locks = [s.acquire("ha/s1"), s.acquire("ha/s2")]

        # An asyncio lease on a loop of its own, through the same kill.
        aio_state: List[object] = []
        go_on = threading.Event()

        async def aio_holder() -> None:
            async with AsyncClient(cl.addrs, auth_token="") as ac:
                async with AsyncLease(ac, "ha/aio", "holder-3", ttl=TTL) as al:
                    aio_state.append(al)
                    while not go_on.is_set():
                        await asyncio.sleep(0.02)  # keep the loop running; the test decides by state
                    al.ensure()
                    aio_state.append((al.token, al.extensions))

        t = threading.Thread(target=lambda: asyncio.run(aio_holder()), daemon=True)
        t.start()
        until(lambda: len(aio_state) >= 1, "the asyncio lease is held")
        al = aio_state[0]

        # Right after an extension of each: the most room to find the new leader.
        base = (lease.extensions, s.extensions, al.extensions)  # type: ignore[attr-defined]
        until(lambda: lease.extensions > base[0] and s.extensions > base[1]
              and al.extensions > base[2], "an extension of each", bound=TTL)  # type: ignore[attr-defined]
        old = cl.leader()
        old.kill9()
        new = cl.leader(not_=old)
        self.assertIsNot(new, old)

        # Each keep-alive confirms extensions at the new leader.
        after = (lease.extensions, s.extensions, al.extensions)  # type: ignore[attr-defined]
        until(lambda: lease.extensions >= after[0] + 2 and s.extensions >= after[1] + 2
              and al.extensions >= after[2] + 2, "two extensions of each after the kill",  # type: ignore[attr-defined]
              bound=BOUND + TTL)
        lease.ensure()
        s.ensure()
        self.assertFalse(lease.lost, lease.reason)
        self.assertFalse(s.lost, s.reason)
        for l in locks:
            l.ensure()
        self.assertTrue(c.check("ha/lease", lease.token))
        for l in locks:
            self.assertTrue(c.check(l.key, l.token))
        self.assertEqual(c.get("ha/lease").token, lease.token)  # extended, never re-granted
        go_on.set()
        t.join(BOUND)
        self.assertFalse(t.is_alive())
        self.assertEqual(len(aio_state), 2, "the asyncio lease was lost: %s" % getattr(al, "reason", ""))
        self.assertTrue(c.check("ha/s1", locks[0].token))

        # Plain calls go on too, and tokens keep rising.
        g = c.acquire("ha/after", "holder-4", 10, wait=0)
        self.assertGreater(g.token, max(lease.token, locks[1].token))

        s.close()
        self.assertFalse(c.check("ha/s1", locks[0].token))
        lease.release()
        self.assertFalse(c.check("ha/lease", lease.token))


if __name__ == "__main__":
    unittest.main()
