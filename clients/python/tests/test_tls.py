"""The TLS + ACL deployment of docs/SECURITY.md: a 3-node cluster serving
mutual TLS (--require-client-cert) with ACLs bootstrapped, certificates
made in the test with openssl; every primitive through it, the
FENCELOCK_CLIENT_* variables, principals by token and by certificate, the
refusals, and a TLS/plain mismatch told as such."""

from __future__ import annotations

import asyncio
import os
import time
import unittest
from typing import Any, List
from unittest import mock

from fencelock import (
    Client,
    Election,
    HeldError,
    InvalidError,
    Lease,
    PermissionDeniedError,
    Session,
    TLSMismatchError,
    UnauthenticatedError,
)
from fencelock.aio import AsyncClient, AsyncLease, AsyncSession

from .harness import Certs, Cluster, Server
from .test_client import BOUND


class SecureClusterTest(unittest.TestCase):
    certs: Certs
    cluster: Cluster
    admin: str
    ci: str

    @classmethod
    def setUpClass(cls) -> None:
        cls.certs = Certs(clients=("alice", "mallory"))
        cls.cluster = Cluster(3, tls=cls.certs, args=["--require-client-cert"])
        c = cls.client(token="", who="alice")
        cls.admin = c.acl_bootstrap()
        for n in cls.cluster.nodes:
            n.token = cls.admin  # the harness's own calls, from now on
        a = cls.client(token=cls.admin)
        a.acl_set_policy("jobs", ["jobs/:lock,read", "jobs/secret/:lock,read:deny"])
        cls.ci = a.acl_create_token("ci", ["jobs"])
        a.acl_create_token("alice", ["jobs"], no_secret=True)  # named by her certificate

    @classmethod
    def tearDownClass(cls) -> None:
        cls.cluster.close()
        cls.certs.close()

    @classmethod
    def client(cls, *, token: str, who: str = "mallory", **kw: object) -> Client:
        p = cls.certs.path
        return Client(cls.cluster.addrs, ca=cls.certs.ca, cert=p(who + ".pem"), key=p(who + "-key.pem"),
                      auth_token=token, **kw)  # type: ignore[arg-type]

    def env(self) -> Any:
        p = self.certs.path
        return mock.patch.dict(os.environ, {
            "FENCELOCK_ADDR": ",".join(self.cluster.addrs),
            "FENCELOCK_CLIENT_CA": self.certs.ca,
            "FENCELOCK_CLIENT_CERT": p("mallory.pem"),
            "FENCELOCK_CLIENT_KEY": p("mallory-key.pem"),
            "FENCELOCK_AUTH_TOKEN": self.ci,
        })

    def test_every_primitive_from_the_environment(self) -> None:
        with self.env():
            c = Client()  # addresses, TLS files and token from the CLI's variables
        self.assertTrue(all(a.startswith("https://") for a in c.addrs))
        self.assertEqual(c.whoami().principal, "ci")
        with Lease(c, "jobs/nightly", ttl=5) as lease:
            self.assertTrue(lease.holder.startswith("ci/"), lease.holder)  # generated, under the principal
            self.assertTrue(c.check("jobs/nightly", lease.token))
            with self.assertRaises(HeldError):
                c.acquire("jobs/nightly", "ci/other", 5, wait=0)
        with Session(c, ttl=5) as s:
            self.assertTrue(s.holder.startswith("ci/"))
            a = s.acquire("jobs/s/a")
            b, d = s.acquire_all(["jobs/s/b", "jobs/s/d"])
            self.assertEqual([g.key for g in c.list("jobs/s/")], ["jobs/s/a", "jobs/s/b", "jobs/s/d"])
            self.assertTrue(all(c.check(l.key, l.token) for l in (a, b, d)))
        self.assertEqual(c.list("jobs/s/"), [])
        p1 = Lease(c, "jobs/pool", permits=2).acquire()
        p2 = Lease(c, "jobs/pool", permits=2).acquire()
        self.assertEqual(sorted([p1.slot, p2.slot]), [1, 2])
        p1.release()
        p2.release()
        r = Lease(c, "jobs/index", mode="read").acquire()
        w = Lease(c, "jobs/index", mode="write", wait=0.2)
        with self.assertRaises(HeldError):
            w.acquire()
        r.release()
        _, rev = c.watch_list("jobs/e")
        e = Election(c, "jobs/election", ttl=5)
        leader = e.campaign("ci/w1")
        self.assertEqual(e.leader().token, leader.token)
        leader.resign()
        ev = next(c.watch("jobs/election", after=rev, wait=5))
        self.assertEqual((ev.type, ev.holder, ev.token), ("granted", "ci/w1", leader.token))
        g = c.acquire("jobs/delay", "ci", 0.2, lock_delay=0.2)
        self.assertGreater(g.token, leader.token)

        for key in ("other/k", "jobs/secret/k"):
            with self.assertRaises(PermissionDeniedError):
                c.acquire(key, "ci", 5)
        with self.assertRaises(PermissionDeniedError):
            c.acquire("jobs/k", "alice", 5)  # a holder that is not the principal's

    def test_client_certificate_names_the_principal(self) -> None:
        alice = self.client(token="", who="alice")
        self.assertEqual(alice.whoami().principal, "alice")
        g = alice.acquire("jobs/cert", "alice/w1", 10)
        ci = self.client(token=self.ci)
        with self.assertRaises(PermissionDeniedError):
            ci.release("jobs/cert", "alice/w1", g.token)  # nobody else releases it
        with self.assertRaises(PermissionDeniedError):
            ci.extend("jobs/cert", "alice/w1", g.token, 10)
        self.assertTrue(alice.release("jobs/cert", "alice/w1", g.token))
        mallory = self.client(token="")  # a certificate the CA signed, but no principal
        with self.assertRaises(UnauthenticatedError):
            mallory.get("jobs/cert")

    def test_refusals_at_the_handshake_name_what_to_pass(self) -> None:
        p = self.certs.path
        no_cert = Client(self.cluster.addrs, ca=self.certs.ca, cert="", key="", auth_token=self.ci)
        with self.assertRaises(TLSMismatchError) as cm:
            no_cert.get("jobs/x")  # at once: no retry cures a setting
        self.assertIn("asks for a client certificate: pass cert= and key=", str(cm.exception))
        other_ca = Client(self.cluster.addrs[0], ca="", cert=p("alice.pem"), key=p("alice-key.pem"), auth_token="")
        with self.assertRaises(TLSMismatchError) as cm2:
            other_ca.get("jobs/x")
        self.assertIn("CERTIFICATE_VERIFY_FAILED", str(cm2.exception))
        self.assertIn("pass ca=", str(cm2.exception))
        with self.assertRaises(InvalidError) as cm3:
            Client(self.cluster.addrs, ca=self.certs.ca, cert=p("alice.pem"), key="")
        self.assertEqual(cm3.exception.field, "cert")
        self.assertIn(p("alice.pem"), str(cm3.exception))

        async def aio() -> str:
            try:
                await AsyncClient(self.cluster.addrs, ca=self.certs.ca, cert="", key="", auth_token=self.ci).get("k")
            except TLSMismatchError as e:
                return str(e)
            return ""

        self.assertIn("pass cert= and key=", asyncio.run(aio()))

    def test_connections_are_kept_and_tls_sessions_resumed(self) -> None:
        with self.client(token=self.ci) as c:
            for _ in range(20):
                c.check("jobs/kept", 1)
            self.assertLessEqual(c._pool.dialed, len(self.cluster.addrs))  # not one per call
        with self.client(token=self.ci, max_idle=0) as c:  # a connection per call: each resumes a session
            for _ in range(5):
                c.check("jobs/kept", 1)
            self.assertGreaterEqual(c._pool.dialed, 5)
            self.assertGreaterEqual(c._pool.resumed, 4)

    def test_plain_http_client_is_told_the_server_speaks_tls(self) -> None:
        addr = self.cluster.addrs[1]
        with mock.patch.dict(os.environ, {"FENCELOCK_CLIENT_CA": "", "FENCELOCK_CLIENT_CERT": "",
                                          "FENCELOCK_CLIENT_KEY": ""}):
            plain = Client(addr, auth_token=self.ci)
        t0 = time.monotonic()
        with self.assertRaises(TLSMismatchError) as cm:
            plain.get("jobs/x")
        msg = str(cm.exception)
        self.assertIn("this server speaks TLS", msg)
        self.assertIn("http://" + addr, msg)
        self.assertIn("ca=", msg)
        self.assertLess(time.monotonic() - t0, 5)  # told at once, not after the retries

        async def aio() -> str:
            try:
                await AsyncClient(addr, ca="", cert="", key="", auth_token=self.ci).get("jobs/x")
            except TLSMismatchError as e:
                return str(e)
            return ""

        self.assertIn("this server speaks TLS", asyncio.run(aio()))

    def test_tls_client_is_told_the_server_speaks_plain_http(self) -> None:
        srv = Server()
        self.addCleanup(srv.close)
        c = Client(srv.addr, ca=self.certs.ca, auth_token="")
        with self.assertRaises(TLSMismatchError) as cm:
            c.get("k")
        self.assertIn("speaks plain HTTP", str(cm.exception))
        self.assertIn("http://" + srv.addr, str(cm.exception))

        async def aio() -> str:
            try:
                await AsyncClient(srv.addr, ca=self.certs.ca, auth_token="").get("k")
            except TLSMismatchError as e:
                return str(e)
            return ""

        self.assertIn("speaks plain HTTP", asyncio.run(aio()))

    def test_asyncio_over_mutual_tls(self) -> None:
        p = self.certs.path
        seen: List[str] = []

        async def main() -> None:
            async with AsyncClient(self.cluster.addrs, ca=self.certs.ca, cert=p("mallory.pem"),
                                   key=p("mallory-key.pem"), auth_token=self.ci) as c:
                _, rev = await c.watch_list("jobs/aio/")
                async with AsyncLease(c, "jobs/aio/lease", ttl=0.9) as lease:
                    self.assertTrue(lease.holder.startswith("ci/"))
                    await asyncio.sleep(0)
                    until_ext = time.monotonic() + BOUND
                    while lease.extensions < 2 and time.monotonic() < until_ext:
                        await asyncio.sleep(0.02)
                    lease.ensure()
                    self.assertGreaterEqual(lease.extensions, 2)
                async with AsyncSession(c, ttl=5) as s:
                    a = await s.acquire("jobs/aio/a")
                    w = asyncio.ensure_future(c.acquire("jobs/aio/a", "ci/waiter", 5))  # waits its turn
                    await asyncio.sleep(0.3)
                    self.assertFalse(w.done())
                got = await w  # the session's close handed the key on
                self.assertGreater(got.token, a.token)
                async for ev in c.watch("jobs/aio/", after=rev, wait=5):
                    seen.append("%s %s" % (ev.type, ev.key))
                    if ev.type == "granted" and ev.holder == "ci/waiter":
                        break

        asyncio.run(main())
        self.assertEqual(seen[0], "granted jobs/aio/lease")
        self.assertEqual(seen[-1], "granted jobs/aio/a")


if __name__ == "__main__":
    unittest.main()
