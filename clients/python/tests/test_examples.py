"""The README's examples (examples/*.py) run against a real server, so that
what the README shows keeps working."""

from __future__ import annotations

import os
import subprocess
import sys
import unittest

from .harness import Server

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

# example -> a line its output must have
EXPECT = {
    "sessions.py": "session 2 closed: 3 locks released",
    "multikey.py": "no key was granted",
    "lockdelay.py": "app/w2 refused: lock_delay",
    "semaphore.py": "stale permit refused",
    "rwlock.py": "a reader from before the write",
    "watch.py": "callback:",
    "election.py": "the deposed leader is refused",
    "asyncio_example.py": "granted jobs/d app/batch",
    "quickstart.py": "zombie write refused",
}


class ExamplesTest(unittest.TestCase):
    srv: Server

    @classmethod
    def setUpClass(cls) -> None:
        cls.srv = Server()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.srv.close()

    def test_examples_run(self) -> None:
        env = dict(os.environ, FENCELOCK_ADDR=self.srv.addr, FENCELOCK_AUTH_TOKEN="", FENCELOCK_CLIENT_CA="",
                   FENCELOCK_CLIENT_CERT="", FENCELOCK_CLIENT_KEY="", PYTHONPATH=_ROOT)
        for name, want in EXPECT.items():
            with self.subTest(example=name):
                out = subprocess.run([sys.executable, os.path.join(_ROOT, "examples", name)], env=env,
                                     capture_output=True, text=True, timeout=60)
                self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
                self.assertIn(want, out.stdout)


if __name__ == "__main__":
    unittest.main()
