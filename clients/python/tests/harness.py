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
    """One server process on a free 127.0.0.1 port with its own temp data dir."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="fencelock-py-")
        self.addr = "127.0.0.1:%d" % free_port()
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        self.proc = subprocess.Popen(
            [binary(), "server", "--listen", self.addr, "--data", os.path.join(self.dir, "data")],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    def _wait_ready(self, limit: float = 20.0) -> None:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("fencelock server exited: see " + self.log.name)
            try:
                with urllib.request.urlopen("http://%s/readyz" % self.addr, timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.02)  # polling for readiness, not deciding a result
        raise RuntimeError("fencelock server not ready in %.0fs" % limit)

    def stop_process(self) -> None:
        """SIGSTOP: the process freezes, its sockets stay open."""
        self.proc.send_signal(signal.SIGSTOP)

    def cont_process(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _cleanup() -> None:
    if _bin_dir:
        shutil.rmtree(_bin_dir, ignore_errors=True)
atexit.register(_cleanup)
