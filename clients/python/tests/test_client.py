"""The Python client against a real fencelock server (tests/harness.py starts it)."""

from __future__ import annotations

import http.server
import json
import os
import random
import shutil
import socket
import tempfile
import threading
import time
import unittest
import urllib.request
from typing import List, Optional
from unittest import mock

import fencelock
from fencelock import (
    Client,
    DistributedLock,
    Fence,
    HeldError,
    InvalidError,
    Lease,
    LeaseLostError,
    NotFoundError,
    NotHeldError,
    Session,
    SessionLock,
    StaleTokenError,
)

from .harness import Server, free_port

BOUND = 10.0  # seconds: an upper bound for something that must happen, never what decides a result


def until(cond, what: str, bound: float = BOUND) -> None:
    """Poll cond() until true; fail after bound seconds."""
    end = time.monotonic() + bound
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("not within %.0fs: %s" % (bound, what))
        time.sleep(0.01)


def waiters(addr: str) -> int:
    with urllib.request.urlopen("http://%s/metrics" % addr, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("fencelock_waiters "):
                return int(float(line.split()[1]))
    return 0


class CallsTest(unittest.TestCase):
    srv: Server
    c: Client

    @classmethod
    def setUpClass(cls) -> None:
        cls.srv = Server()
        cls.c = Client(cls.srv.addr, auth_token="")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.srv.close()

    def test_grant_held_extend_release_check_list(self) -> None:
        c = self.c
        g = c.acquire("calls/a", "alice", 30)
        self.assertEqual((g.key, g.holder, g.ttl), ("calls/a", "alice", 30.0))  # seconds
        self.assertTrue(29 < g.remaining <= 30, g.remaining)
        self.assertEqual(g.raw["ttl_ms"], 30000)  # the wire's, kept
        self.assertFalse(hasattr(g, "ttl_ms") or hasattr(g, "remaining_ms"))
        self.assertGreater(g.token, 0)
        with self.assertRaises(HeldError) as cm:
            c.acquire("calls/a", "bob", 30, wait=0)
        self.assertEqual(cm.exception.holder, "alice")
        self.assertEqual(cm.exception.code, "held")
        self.assertTrue(0 < (cm.exception.remaining or 0) <= 30)
        self.assertIn("'calls/a' is held by alice for", str(cm.exception))

        e = c.extend("calls/a", "alice", g.token, 60)
        self.assertEqual((e.token, e.ttl), (g.token, 60.0))
        with self.assertRaises(NotHeldError):
            c.extend("calls/a", "alice", g.token + 1000, 60)
        with self.assertRaises(NotHeldError):
            c.extend("calls/a", "bob", g.token, 60)

        self.assertTrue(c.check("calls/a", g.token))
        self.assertFalse(c.check("calls/a", g.token + 1000))
        self.assertEqual(c.get("calls/a").token, g.token)

        c.acquire("calls/b", "alice", 30)
        c.acquire("calls/c", "alice", 30)
        self.assertEqual([l.key for l in c.list("calls/")], ["calls/a", "calls/b", "calls/c"])
        self.assertEqual([l.key for l in c.list("calls/", limit=2)], ["calls/a", "calls/b"])
        self.assertEqual([l.key for l in c.list("calls/", after="calls/b")], ["calls/c"])

        r = c.renew("calls/a", "alice", 30)
        self.assertGreater(r.token, g.token)
        self.assertFalse(c.check("calls/a", g.token))
        with self.assertRaises(NotHeldError):
            c.renew("calls/a", "bob", 30)

        self.assertFalse(c.release("calls/a", "bob"))
        self.assertFalse(c.release("calls/a", "alice", g.token))  # the old grant
        self.assertTrue(c.release("calls/a", "alice", r.token))
        self.assertFalse(c.check("calls/a", r.token))
        with self.assertRaises(NotFoundError):
            c.get("calls/a")
        for k in ("calls/b", "calls/c"):
            self.assertTrue(c.release(k, "alice"))
        self.assertEqual(c.list("calls/"), [])

    def test_invalid_names_the_argument(self) -> None:
        with self.assertRaises(InvalidError) as cm:
            self.c.acquire("calls/bad", "alice", 0.05)  # refused before it is sent
        self.assertEqual(cm.exception.field, "ttl")
        self.assertIn("ttl=0.05", str(cm.exception))
        with self.assertRaises(InvalidError) as cm:
            self.c.acquire("calls/bad", "alice", 30, mode="Read")  # type: ignore[arg-type]
        self.assertEqual(cm.exception.field, "mode")
        with self.assertRaises(InvalidError) as cm:
            self.c.extend_batch("alice", 30, [("calls/bad", 1)] * 1001)  # the server's refusal
        self.assertEqual((cm.exception.field, cm.exception.status), ("leases", 400))

    def test_ttl_is_seconds_and_a_long_one_must_be_meant(self) -> None:
        c = self.c
        for ttl in (30000, 3600.5):
            with self.assertRaises(InvalidError) as cm:
                c.acquire("calls/long", "alice", ttl, wait=0)
            self.assertEqual(cm.exception.field, "ttl")
            self.assertIn("allow_long=True", str(cm.exception))
            for make in (lambda: Lease(c, "calls/long", ttl=ttl), lambda: Session(c, ttl=ttl),
                         lambda: c.open_session("alice", ttl), lambda: c.extend("calls/long", "alice", 1, ttl)):
                with self.assertRaises(InvalidError):
                    make()
        with self.assertRaises(InvalidError) as cm:
            c.acquire("calls/long", "alice", 30000)
        self.assertIn("ttl=30000 is 8.33 hours: TTLs are seconds", str(cm.exception))
        g = c.acquire("calls/long", "alice", 30000, wait=0, allow_long=True)
        self.assertEqual(g.ttl, 30000.0)
        with self.assertRaises(InvalidError) as cm:
            c.acquire("calls/long", "alice", 86401, allow_long=True)  # the server's limit
        self.assertIn("a day", str(cm.exception))
        self.assertTrue(c.release("calls/long", "alice", g.token))
        with self.assertRaises(InvalidError) as cm:
            c.acquire("calls/long", "alice", 30, wait=-1)
        self.assertEqual(cm.exception.field, "wait")

    def test_mode_is_a_literal(self) -> None:
        import typing

        hints = typing.get_type_hints(Client.acquire)
        self.assertEqual(hints["mode"], typing.Optional[typing.Literal["read", "write"]])
        self.assertEqual(typing.get_type_hints(Lease.__init__)["mode"], hints["mode"])

    def test_wait_hand_off(self) -> None:
        c = self.c
        a = c.acquire("wait/k", "alice", 30)
        got: List[fencelock.Grant] = []
        errs: List[BaseException] = []

        def bob() -> None:
            try:
                got.append(c.acquire("wait/k", "bob", 30, wait=BOUND))
            except BaseException as e:  # noqa: BLE001 - reported below
                errs.append(e)

        t = threading.Thread(target=bob)
        t.start()
        until(lambda: waiters(self.srv.addr) >= 1, "bob queued")
        self.assertEqual(got, [])
        self.assertTrue(c.release("wait/k", "alice", a.token))
        t.join(BOUND)
        self.assertFalse(t.is_alive())
        self.assertEqual(errs, [])
        self.assertEqual(got[0].holder, "bob")
        self.assertGreater(got[0].token, a.token)
        self.assertTrue(c.release("wait/k", "bob"))

    def test_wait_elapses(self) -> None:
        self.c.acquire("wait/e", "alice", 30)
        with self.assertRaises(HeldError) as cm:
            self.c.acquire("wait/e", "bob", 30, wait=0.2)
        self.assertEqual(cm.exception.holder, "alice")
        self.assertIn("held by alice", str(cm.exception))
        self.c.release("wait/e", "alice")

    def test_acquire_lease_and_session_wait_by_default(self) -> None:
        c = self.c
        for name, take in [
            ("acquire", lambda: c.acquire("wait/d", "bob", 30)),
            ("Lease", lambda: Lease(c, "wait/d", "bob", ttl=30).acquire()),
            ("Session.acquire", lambda: Session(c, "bob", ttl=30).open().acquire("wait/d")),
        ]:
            with self.subTest(name):
                a = c.acquire("wait/d", "alice", 30)
                got: List[object] = []
                t = threading.Thread(target=lambda: got.append(take()))
                t.start()
                until(lambda: waiters(self.srv.addr) >= 1, "bob queued")
                self.assertEqual(got, [])
                self.assertTrue(c.release("wait/d", "alice", a.token))
                t.join(BOUND)
                self.assertFalse(t.is_alive())
                h = got[0]
                if isinstance(h, Lease):
                    h.release()
                elif isinstance(h, SessionLock):
                    h.session.close()
                else:
                    c.release("wait/d", "bob")
        c.acquire("wait/d", "alice", 30)
        with self.assertRaises(HeldError):
            c.acquire("wait/d", "bob", 30, wait=0)  # wait=0 tries once
        c.release("wait/d", "alice")

    def test_lease_extends_and_releases(self) -> None:
        with Lease(self.c, "lease/ok", "alice", ttl=0.3) as lease:
            tok = lease.token
            self.assertGreater(tok, 0)
            until(lambda: lease.extensions >= 3, "three extensions")
            self.assertFalse(lease.lost)
            lease.ensure()
            self.assertEqual(self.c.get("lease/ok").token, tok)  # extend keeps the token
        self.assertTrue(lease.lost)  # no longer safe to act on once released
        self.assertEqual((lease.cause, lease.reason), ("released", "released"))
        with self.assertRaises(NotFoundError):
            self.c.get("lease/ok")

    def test_lease_lost_when_released_elsewhere(self) -> None:
        with Lease(self.c, "lease/gone", "alice", ttl=0.6) as lease:
            self.assertTrue(self.c.release("lease/gone", "alice", lease.token))
            self.assertTrue(lease.lost_event.wait(BOUND))
            self.assertIn("no longer has this grant", lease.reason)
            self.assertEqual(lease.cause, "not_held")
            with self.assertRaises(LeaseLostError) as cm:
                lease.ensure()
            self.assertEqual(cm.exception.cause, "not_held")

    def test_lease_waits_for_key(self) -> None:
        first = Lease(self.c, "lease/q", "alice", ttl=30).acquire()
        second = Lease(self.c, "lease/q", "bob", ttl=30, wait=BOUND)
        t = threading.Thread(target=second.acquire)
        t.start()
        until(lambda: waiters(self.srv.addr) >= 1, "bob queued")
        first.close()
        t.join(BOUND)
        self.assertGreater(second.token, first.token)
        self.assertFalse(second.lost)
        second.close()

    def test_seed_exercise(self) -> None:
        lock = DistributedLock(self.c)
        t1 = lock.acquire("seed/resource", "client-a", ttl=0.3)
        self.assertIsNotNone(t1)
        self.assertIsNone(lock.acquire("seed/resource", "client-b", ttl=10))
        t2: Optional[int] = None

        def b_gets_it() -> bool:
            nonlocal t2
            t2 = lock.acquire("seed/resource", "client-b", ttl=10)
            return t2 is not None

        until(b_gets_it, "client-a's lock expired and client-b took it")
        assert t1 is not None and t2 is not None
        self.assertGreater(t2, t1)
        self.assertFalse(lock.is_valid_token("seed/resource", t1))
        self.assertTrue(lock.is_valid_token("seed/resource", t2))
        # a renewal by the same holder issues a new token and invalidates the old
        t3 = lock.acquire("seed/resource", "client-b", ttl=10)
        assert t3 is not None
        self.assertGreater(t3, t2)
        self.assertFalse(lock.is_valid_token("seed/resource", t2))
        self.assertFalse(lock.release("seed/resource", "client-a"))  # not a's: no-op
        self.assertTrue(lock.is_valid_token("seed/resource", t3))
        self.assertTrue(lock.release("seed/resource", "client-b"))
        self.assertFalse(lock.is_valid_token("seed/resource", t3))


class ClientTest(unittest.TestCase):
    """The client itself: addresses, TLS files, kept connections."""

    def test_an_address_without_a_port_uses_7470(self) -> None:
        self.assertEqual(Client("127.0.0.1", auth_token="").addrs, ["http://127.0.0.1:7470"])
        self.assertEqual(Client("locks.example, 10.0.0.2:7471", auth_token="").addrs,
                         ["http://locks.example:7470", "http://10.0.0.2:7471"])
        self.assertEqual(Client("https://locks.example", auth_token="").addrs, ["https://locks.example:7470"])
        self.assertEqual(Client("[::1]", auth_token="").addrs, ["http://[::1]:7470"])
        for bad in ("ftp://x", "127.0.0.1:", "127.0.0.1:port", "http://"):
            with self.assertRaises(InvalidError) as cm:
                Client(bad, auth_token="")
            self.assertEqual(cm.exception.field, "addrs")
            self.assertIn(repr(bad), str(cm.exception))

    def test_a_missing_tls_file_is_named(self) -> None:
        tmp = tempfile.mkdtemp(prefix="fencelock-py-tls-")
        self.addCleanup(shutil.rmtree, tmp, True)
        ca = os.path.join(tmp, "ca.pem")
        with self.assertRaises(InvalidError) as cm:
            Client("127.0.0.1", ca=ca, auth_token="")
        self.assertEqual(cm.exception.field, "ca")
        self.assertIn("ca=%r: no such file" % ca, str(cm.exception))
        with mock.patch.dict(os.environ, {"FENCELOCK_CLIENT_CA": ca}):
            with self.assertRaises(InvalidError) as cm:
                Client("127.0.0.1", auth_token="")
        self.assertIn("$FENCELOCK_CLIENT_CA=%r: no such file" % ca, str(cm.exception))
        with open(ca, "w") as f:
            f.write("not a certificate\n")
        with self.assertRaises(InvalidError) as cm:
            Client("127.0.0.1", ca=ca, auth_token="")
        self.assertIn("ca=%r: not a PEM CA certificate" % ca, str(cm.exception))
        key = os.path.join(tmp, "alice-key.pem")
        with self.assertRaises(InvalidError) as cm:
            Client("127.0.0.1", ca="", cert=ca, key=key, auth_token="")
        self.assertEqual(cm.exception.field, "key")
        self.assertIn("key=%r: no such file" % key, str(cm.exception))

    def test_connections_are_kept_and_closed(self) -> None:
        srv = Server()
        self.addCleanup(srv.close)
        with Client(srv.addr, auth_token="") as c:
            g = c.acquire("kept/k", "alice", 30)
            for _ in range(20):
                self.assertTrue(c.check("kept/k", g.token))
            self.assertEqual(c._pool.dialed, 1)
            # A kept connection the server closed meanwhile: the call goes on a new one.
            conn, _ = c._pool.get(c.addrs[0])
            assert conn is not None and conn.sock is not None
            conn.sock.shutdown(socket.SHUT_RDWR)
            c._pool.put(c.addrs[0], conn)
            self.assertTrue(c.check("kept/k", g.token))
            self.assertEqual(c._pool.dialed, 2)
        self.assertEqual(c._pool._idle, {})  # closed on exit
        self.assertTrue(c.release("kept/k", "alice", g.token))  # and usable again
        c.close()


class LostTest(unittest.TestCase):
    """A frozen server: the lease must say it is lost 0.89 x TTL after its last confirmed send."""

    def setUp(self) -> None:
        self.srv = Server()
        self.addCleanup(self.srv.close)

    def test_lost_when_server_stopped(self) -> None:
        c = Client(self.srv.addr, auth_token="", timeout=5)
        lease = Lease(c, "lost/k", "alice", ttl=1.0).acquire()
        try:
            until(lambda: lease.extensions >= 1, "one confirmed extension")
            self.srv.stop_process()
            self.assertTrue(lease.lost_event.wait(BOUND), "lease never marked lost")
            self.assertTrue(lease.lost)
            self.assertEqual(lease.cause, "unreachable")  # its extensions got no answer
            self.assertIn("0.89 x TTL", lease.reason)
            with self.assertRaises(LeaseLostError) as cm:
                lease.ensure()
            self.assertEqual(cm.exception.cause, "unreachable")
        finally:
            self.srv.cont_process()
            lease.close()  # lost: no release sent, the thread has ended
        keeper = lease._keeper
        assert keeper is not None and keeper._thread is not None
        self.assertFalse(keeper._thread.is_alive())


    def test_waiting_acquire_leaves_a_frozen_node(self) -> None:
        c = Client(self.srv.addr, auth_token="", wait_check=0.2, rounds=1)
        g = c.acquire("frozen/k", "alice", 30)
        errs: List[BaseException] = []

        def bob() -> None:
            try:
                c.acquire("frozen/k", "bob", 30, wait=60)
            except BaseException as e:  # noqa: BLE001 - checked below
                errs.append(e)

        t = threading.Thread(target=bob)
        t.start()
        until(lambda: waiters(self.srv.addr) >= 1, "bob queued")
        self.srv.stop_process()
        try:
            t.join(BOUND)  # not the 60 s of the wait: the node stopped answering its checks
            self.assertFalse(t.is_alive())
        finally:
            self.srv.cont_process()
        self.assertEqual(len(errs), 1)
        self.assertIsInstance(errs[0], fencelock.UnreachableError)
        self.assertIn("stopped answering while we waited", str(errs[0]))
        c.release("frozen/k", "alice", g.token)


class _Fake(http.server.BaseHTTPRequestHandler):
    """Answers every call 503 not_leader naming the real server; records headers."""

    leader = ""
    seen: List[dict] = []

    def _answer(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        type(self).seen.append(dict(self.headers))
        body = json.dumps({"error": "not the leader", "code": "not_leader", "leader": self.leader}).encode()
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:  # quiet
        pass


class FailoverTest(unittest.TestCase):
    srv: Server

    @classmethod
    def setUpClass(cls) -> None:
        cls.srv = Server()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.srv.close()

    def test_first_address_dead(self) -> None:
        dead = "127.0.0.1:%d" % free_port()  # nothing listens there
        c = Client([dead, self.srv.addr], auth_token="")
        g = c.acquire("fo/dead", "alice", 30)
        self.assertTrue(c.check("fo/dead", g.token))
        self.assertTrue(c.release("fo/dead", "alice"))

    def test_all_dead_is_unreachable(self) -> None:
        c = Client(["127.0.0.1:%d" % free_port()], auth_token="", rounds=1)
        with self.assertRaises(fencelock.UnreachableError):
            c.get("fo/none")

    def test_follows_not_leader_and_sends_bearer(self) -> None:
        _Fake.leader = self.srv.addr
        _Fake.seen = []
        fake = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
        threading.Thread(target=fake.serve_forever, daemon=True).start()
        self.addCleanup(fake.server_close)
        self.addCleanup(fake.shutdown)
        old = os.environ.get("FENCELOCK_AUTH_TOKEN")
        os.environ["FENCELOCK_AUTH_TOKEN"] = "s3cret"
        try:
            c = Client("127.0.0.1:%d" % fake.server_address[1])
        finally:
            if old is None:
                del os.environ["FENCELOCK_AUTH_TOKEN"]
            else:
                os.environ["FENCELOCK_AUTH_TOKEN"] = old
        g = c.acquire("fo/leader", "alice", 30)  # the real server has no ACLs: the header is ignored there
        self.assertEqual(len(_Fake.seen), 1)
        self.assertEqual(_Fake.seen[0].get("Authorization"), "Bearer s3cret")
        self.assertEqual(c.addrs[0], "http://" + self.srv.addr)  # the leader, preferred now
        self.assertTrue(c.release("fo/leader", "alice", g.token))
        self.assertEqual(len(_Fake.seen), 1)  # later calls go to the leader directly


class AuthTest(unittest.TestCase):
    """A server with ACLs bootstrapped: the bearer token is what lets calls in."""

    def setUp(self) -> None:
        self.srv = Server()
        self.addCleanup(self.srv.close)

    def test_bearer_token(self) -> None:
        req = urllib.request.Request(
            "http://%s/v1/acl/bootstrap" % self.srv.addr, data=b"{}", method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            secret = json.loads(r.read())["secret"]
        with self.assertRaises(fencelock.UnauthenticatedError):
            Client(self.srv.addr, auth_token="").acquire("auth/k", "admin", 30)
        c = Client(self.srv.addr, auth_token=secret)
        g = c.acquire("auth/k", "admin", 30)
        self.assertTrue(c.check("auth/k", g.token))
        self.assertTrue(c.release("auth/k", "admin", g.token))


class FenceTest(unittest.TestCase):
    def test_admit_and_stale(self) -> None:
        f = Fence()
        out: List[str] = []
        self.assertEqual(f.admit("file", 3, lambda: out.append("a3") or "ok"), "ok")
        f.admit("file", 3, lambda: out.append("a3 again"))
        f.admit("file", 5, lambda: out.append("b5"))
        with self.assertRaises(StaleTokenError):
            f.admit("file", 3, lambda: out.append("zombie"))
        f.admit("other", 1, lambda: out.append("o1"))  # per resource
        self.assertEqual(out, ["a3", "a3 again", "b5", "o1"])
        self.assertEqual(f.highest("file"), 5)
        with self.assertRaises(StaleTokenError):
            f.admit("file", 0)

    def test_concurrent_admits_apply_in_token_order(self) -> None:
        f = Fence()
        applied: List[int] = []
        tokens = list(range(1, 401))
        random.Random(7).shuffle(tokens)
        chunks = [tokens[i::8] for i in range(8)]

        def run(ts: List[int]) -> None:
            for t in ts:
                try:
                    f.admit("r", t, lambda t=t: applied.append(t))
                except StaleTokenError:
                    pass

        threads = [threading.Thread(target=run, args=(ch,)) for ch in chunks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(applied, sorted(applied))  # never an older effect after a newer one
        self.assertEqual(applied[-1], 400)
        self.assertEqual(f.highest("r"), 400)


if __name__ == "__main__":
    unittest.main()


class RWFenceTest(unittest.TestCase):
    def test_read_and_write_rules(self) -> None:
        from fencelock import RWFence, permit_resource

        f = RWFence()
        f.admit_read("idx", 3)
        f.admit_read("idx", 2)  # readers do not order each other
        f.admit_write("idx", 5)  # >= every token admitted, reads included
        with self.assertRaises(StaleTokenError):
            f.admit_write("idx", 4)
        with self.assertRaises(StaleTokenError):
            f.admit_read("idx", 4)  # older than the last write
        f.admit_read("idx", 7)  # raises the mark writes are checked against
        with self.assertRaises(StaleTokenError):
            f.admit_write("idx", 6)
        self.assertEqual(f.marks("idx"), (7, 5))
        with self.assertRaises(StaleTokenError):
            f.admit_read("idx", 0)
        self.assertEqual(permit_resource("pool/gpu", 2), "pool/gpu#permit-2")

    def test_a_write_runs_alone(self) -> None:
        from fencelock import RWFence

        f = RWFence()
        inside = threading.Event()
        leave = threading.Event()
        order: List[str] = []

        def reader() -> None:
            def effect() -> None:
                inside.set()
                leave.wait(BOUND)
                order.append("read done")

            f.admit_read("r", 1, effect)

        t = threading.Thread(target=reader)
        t.start()
        self.assertTrue(inside.wait(BOUND))
        w = threading.Thread(target=lambda: f.admit_write("r", 2, lambda: order.append("write")))
        w.start()
        self.assertEqual(order, [])  # the write waits for the read in progress
        leave.set()
        t.join(BOUND)
        w.join(BOUND)
        self.assertEqual(order, ["read done", "write"])
