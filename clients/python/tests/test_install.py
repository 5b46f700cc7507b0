"""`pip install --no-build-isolation ./clients/python` with the setuptools at hand.

Built from a copy of the sources, so that no build/ or egg-info lands in
the checkout. Skipped where no interpreter has setuptools >= 61 and wheel
(Debian: python3-setuptools and python3-wheel, which python3-pip brings).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

_SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _builder() -> str:
    probe = "import setuptools, wheel, pip, sys; sys.exit(int(setuptools.__version__.split('.')[0]) < 61)"
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run([py, "-c", probe], capture_output=True).returncode == 0:
            return py
    return ""


class InstallTest(unittest.TestCase):
    def test_wheel_builds_offline_with_the_local_setuptools(self) -> None:
        py = _builder()
        if not py:
            self.skipTest("no python3 here has setuptools >= 61, wheel and pip")
        tmp = tempfile.mkdtemp(prefix="fencelock-py-wheel-")
        self.addCleanup(shutil.rmtree, tmp, True)
        src = os.path.join(tmp, "src")
        shutil.copytree(_SRC, src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
        out = subprocess.run(
            [py, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-w", tmp, src],
            capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        self.assertEqual(len(wheels), 1, wheels)
        names = zipfile.ZipFile(os.path.join(tmp, wheels[0])).namelist()
        for f in ("fencelock/__init__.py", "fencelock/aio.py", "fencelock/session.py", "fencelock/py.typed"):
            self.assertIn(f, names)
        self.assertFalse(any(n.startswith("tests/") for n in names))


if __name__ == "__main__":
    unittest.main()
