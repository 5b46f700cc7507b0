"""A real ``fencelock server`` for the tests: built once, started per test class."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request
import atexit
import json
import threading
from typing import Callable, Dict, List, Optional, Sequence

_REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_bin_dir = ""
_bin = ""


def binary() -> str:
    """$FENCELOCK_BIN, or a binary built once from this repository."""
    global _bin, _bin_dir
    if _bin:
        return _bin
    env = os.environ.get("FENCELOCK_BIN", "")
    if env:
        _bin = env
        return _bin
    if shutil.which("go") is None:
        raise unittest.SkipTest("no go toolchain and no FENCELOCK_BIN")
    _bin_dir = tempfile.mkdtemp(prefix="fencelock-py-bin-")
    out = os.path.join(_bin_dir, "fencelock")
    subprocess.run(["go", "build", "-o", out, "./cmd/fencelock"], cwd=_REPO, check=True)
    _bin = out
    return _bin


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process on a free 127.0.0.1 port with its own temp data dir.

    ``args`` are added to ``fencelock server``; ``tls`` (a :class:`Certs`)
    makes it serve TLS with that node certificate and CA. ``wait`` False
    starts it without waiting for ``/readyz`` (a cluster node before its
    peers are up).
    """

    def __init__(self, args: Sequence[str] = (), *, addr: str = "", tls: Optional["Certs"] = None,
                 node: str = "n1", wait: bool = True, dir: str = "") -> None:
        self.dir = dir or tempfile.mkdtemp(prefix="fencelock-py-")
        self.addr = addr or "127.0.0.1:%d" % free_port()
        self.tls = tls
        self.token = ""  # sent by get() once ACLs are on
        self.node = node
        self.log = open(os.path.join(self.dir, "server-%s.log" % node), "ab")
        argv = [binary(), "server", "--listen", self.addr, "--data", os.path.join(self.dir, "data-" + node),
                "--log-level", "warn"]
        if tls is not None:
            argv += ["--cert", tls.path(node + ".pem"), "--key", tls.path(node + "-key.pem"), "--ca", tls.ca]
        self.argv = argv + list(args)
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()

    def restart(self) -> None:
        """Start the process again on its data dir (after kill9), without waiting for it."""
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        return ("https://" if self.tls else "http://") + self.addr

    def get(self, path: str, timeout: float = 2.0) -> Dict:
        """GET path as JSON (TLS with the CA and the client certificate, when it serves TLS)."""
        ctx = None
        if self.tls is not None:
            import ssl

            ctx = ssl.create_default_context(cafile=self.tls.ca)
            ctx.load_cert_chain(self.tls.path("alice.pem"), self.tls.path("alice-key.pem"))
        headers = {"Authorization": "Bearer " + self.token} if self.token else {}
        req = urllib.request.Request(self.url + path, headers=headers)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
        with opener.open(req, timeout=timeout) as r:
            return json.loads(r.read())

    def wait_ready(self, limit: float = 30.0) -> None:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("fencelock server exited: see " + self.log.name)
            try:
                self.get("/healthz", timeout=1)
                if self.proc.poll() is None and self._ready():
                    return
            except OSError:
                pass
            time.sleep(0.02)  # polling for readiness, not deciding a result
        raise RuntimeError("fencelock server not ready in %.0fs" % limit)

    def _ready(self) -> bool:
        try:
            self.get("/readyz", timeout=1)
            return True
        except OSError:
            return False

    def kill9(self) -> None:
        """SIGKILL, as a crash: no shutdown, no goodbye to peers or clients."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop_process(self) -> None:
        """SIGSTOP: the process freezes, its sockets stay open."""
        self.proc.send_signal(signal.SIGSTOP)

    def cont_process(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def close(self, keep_dir: bool = False) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


# What every node of a test cluster is started with besides its own
# addresses and the cluster's secret (each Cluster makes its own, with
# ``fencelock cluster secret``, in a file of mode 0600, as the README does).
CLUSTER_ARGS: List[str] = []


class Cluster:
    """Three raft nodes on free loopback ports (``--peers``), one temp dir,
    one cluster secret.

    With ``proxied``, each node's clients reach it through a
    :class:`LinkProxy` of the test's, which the node advertises as its
    address (``--advertise``), so that ``not_leader`` answers send clients
    through the proxies too; ``proxy_addrs`` are what a client is given.
    """

    def __init__(self, n: int = 3, *, tls: Optional["Certs"] = None, args: Sequence[str] = (),
                 proxied: bool = False) -> None:
        self.dir = tempfile.mkdtemp(prefix="fencelock-py-cluster-")
        self.tls = tls
        secret = os.path.join(self.dir, "cluster.secret")
        made = subprocess.run([binary(), "cluster", "secret"], check=True, stdout=subprocess.PIPE).stdout
        with os.fdopen(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(made)
        ids = ["n%d" % (i + 1) for i in range(n)]
        raft = {i: "127.0.0.1:%d" % free_port() for i in ids}
        peers = ",".join("%s=%s" % (i, raft[i]) for i in ids)
        self.nodes: List[Server] = []
        self.proxies: Dict[str, LinkProxy] = {}
        for i in ids:
            addr = "127.0.0.1:%d" % free_port()
            extra = list(CLUSTER_ARGS) + ["--cluster-secret-file", secret]
            if proxied:
                self.proxies[i] = LinkProxy(addr)
                extra += ["--advertise", self.proxies[i].addr]
            self.nodes.append(Server(["--id", i, "--raft", raft[i], "--peers", peers] + extra + list(args),
                                     addr=addr, tls=tls, node=i, wait=False, dir=self.dir))
        self.leader()

    @property
    def proxy_addrs(self) -> List[str]:
        return [self.proxies[n.node].addr for n in self.nodes]

    def proxy(self, node: Server) -> "LinkProxy":
        return self.proxies[node.node]

    def converge(self, limit: float = 30.0) -> Server:
        """Wait until every live node follows the leader and has applied what it had; the leader."""
        leader = self.leader(limit)
        want = leader.get("/v1/cluster/members").get("applied_index", 0)
        end = time.monotonic() + limit
        for n in self.nodes:
            while True:
                try:
                    m = n.get("/v1/cluster/members", timeout=1)
                    if m.get("applied_index", 0) >= want and m.get("leader") == leader.node:
                        break
                except OSError:
                    pass
                if time.monotonic() > end:
                    raise RuntimeError("%s did not catch up to index %d" % (n.node, want))
                time.sleep(0.02)  # polling for a follower, not deciding a result
        return leader

    @property
    def addrs(self) -> List[str]:
        return [n.addr for n in self.nodes]

    def leader(self, limit: float = 30.0, not_: Optional[Server] = None) -> Server:
        """The node that answers as the ready leader (polled, bounded)."""
        end = time.monotonic() + limit
        while time.monotonic() < end:
            for n in self.nodes:
                if n is not_ or n.proc.poll() is not None:
                    continue
                try:
                    m = n.get("/v1/cluster/members", timeout=1)
                except OSError:
                    continue
                if m.get("ready") and m.get("leader") == m.get("node"):
                    return n
            time.sleep(0.02)  # polling for an election, not deciding a result
        raise RuntimeError("no ready leader within %.0fs" % limit)

    def close(self) -> None:
        for n in self.nodes:
            n.close(keep_dir=True)
        for p in self.proxies.values():
            p.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class LinkProxy:
    """Forwards TCP connections from a free loopback port to ``target``.

    :meth:`arm` shows it each chunk a client sends until the hook says it
    acted: the chunk goes on to the node only after the hook returns, so a
    hook that kills the node makes that request the one in flight.
    """

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self._ln = socket.socket()
        self._ln.bind(("127.0.0.1", 0))
        self._ln.listen(64)
        self.addr = "127.0.0.1:%d" % self._ln.getsockname()[1]
        self._mu = threading.Lock()
        self._hook: Optional[Callable[[bytes], bool]] = None
        self._conns: List[socket.socket] = []
        threading.Thread(target=self._serve, name="proxy-" + self.addr, daemon=True).start()

    def arm(self, hook: Optional[Callable[[bytes], bool]]) -> None:
        with self._mu:
            self._hook = hook

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self._ln.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.target, timeout=2)
                up.settimeout(None)
            except OSError:
                c.close()
                continue
            with self._mu:
                self._conns += [c, up]
            threading.Thread(target=self._pipe, args=(c, up, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, c, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if from_client:
                    with self._mu:  # one hook at a time: it fires once
                        if self._hook is not None and self._hook(b):
                            self._hook = None
                dst.sendall(b)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._ln.close()
        with self._mu:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()


class Certs:
    """A CA, node certificates n1..n3 (IP:127.0.0.1, server and client auth)
    and client certificates, made with the openssl command as
    docs/SECURITY.md does; skips the test without openssl."""

    def __init__(self, clients: Sequence[str] = ("alice", "mallory")) -> None:
        if shutil.which("openssl") is None:
            if os.environ.get("CI"):
                raise RuntimeError("no openssl command: .ci/deps installs it for these tests")
            raise unittest.SkipTest("no openssl command to make certificates with")
        self.dir = tempfile.mkdtemp(prefix="fencelock-py-certs-")
        self.ca = self.path("ca.pem")
        self._run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
                  "-subj", "/CN=fencelock test CA", "-keyout", "ca-key.pem", "-out", "ca.pem",
                  "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        with open(self.path("node.ext"), "w") as f:
            f.write("subjectAltName = IP:127.0.0.1, DNS:localhost\n"
                    "extendedKeyUsage = serverAuth, clientAuth\nkeyUsage = critical, digitalSignature\n")
        with open(self.path("client.ext"), "w") as f:
            f.write("extendedKeyUsage = clientAuth\nkeyUsage = critical, digitalSignature\n")
        for n in ("n1", "n2", "n3"):
            self._sign(n, "node.ext")
        for c in clients:
            self._sign(c, "client.ext")

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def _sign(self, name: str, ext: str) -> None:
        self._run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=" + name,
                  "-keyout", name + "-key.pem", "-out", name + ".csr")
        self._run("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
                  "-days", "2", "-extfile", ext, "-out", name + ".pem")

    def _run(self, *args: str) -> None:
        subprocess.run(["openssl", *args], cwd=self.dir, check=True, capture_output=True)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _cleanup() -> None:
    if _bin_dir:
        shutil.rmtree(_bin_dir, ignore_errors=True)
atexit.register(_cleanup)
