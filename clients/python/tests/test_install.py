"""Installing the package with no package index: the in-tree build backend
(_backend/fencelock_backend.py, standard library only) builds the wheel and
the sdist, and ``pip install`` works with and without
``--no-build-isolation`` on every python3 at hand from 3.9 on: this one,
the ``python3`` on PATH, Debian's /usr/bin/python3 and the oldest pyenv
python3 from 3.9; with FENCELOCK_TEST_ALL_PYTHONS=1, every
/root/.pyenv/versions/*/bin/python3 from 3.9.

Each install goes into a throwaway --target directory from a copy of the
sources, so nothing lands in the checkout, and is then imported by the
python3 that installed it.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Tuple

import fencelock

_SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _version(py: str) -> Tuple[int, ...]:
    out = subprocess.run([py, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return ()
    return tuple(int(x) for x in out.stdout.split("."))


def _has_pip(py: str) -> bool:
    return subprocess.run([py, "-c", "import pip"], capture_output=True).returncode == 0


def pythons() -> List[str]:
    """The interpreters to install with: real paths, 3.9 or later, with pip."""
    pyenv = sorted(glob.glob("/root/.pyenv/versions/*/bin/python3"))
    cands = [sys.executable, shutil.which("python3") or "", "/usr/bin/python3"]
    fit = sorted((p for p in pyenv if _version(p) >= (3, 9)), key=_version)
    cands += fit if os.environ.get("FENCELOCK_TEST_ALL_PYTHONS") else fit[:1]
    out: List[str] = []
    seen = set()
    for p in cands:
        if not p or not os.path.exists(p):
            continue
        real = os.path.realpath(p)
        if p.endswith("/shims/python3"):
            # pyenv's shim: the interpreter it runs.
            r = subprocess.run([p, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True)
            real = os.path.realpath(r.stdout.strip()) if r.returncode == 0 else ""
        if real and real not in seen and _version(real) >= (3, 9) and _has_pip(real):
            seen.add(real)
            out.append(real)
    return out


class InstallTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="fencelock-py-install-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.src = os.path.join(self.tmp, "src")
        shutil.copytree(_SRC, self.src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))

    def backend(self, hook: str, out: str) -> str:
        code = "import sys; sys.path.insert(0, '_backend'); import fencelock_backend as b; print(b.%s(%r))" % (hook, out)
        r = subprocess.run([sys.executable, "-c", code], cwd=self.src, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return os.path.join(out, r.stdout.strip())

    def test_the_backend_builds_a_wheel_and_an_sdist(self) -> None:
        out = os.path.join(self.tmp, "dist")
        whl = self.backend("build_wheel", out)
        self.assertEqual(os.path.basename(whl), "fencelock-%s-py3-none-any.whl" % fencelock.__version__)
        z = zipfile.ZipFile(whl)
        names = z.namelist()
        for f in ("fencelock/__init__.py", "fencelock/aio.py", "fencelock/_keepalive.py", "fencelock/py.typed"):
            self.assertIn(f, names)
        self.assertFalse(any(n.startswith(("tests/", "_backend/")) for n in names), names)
        info = "fencelock-%s.dist-info/" % fencelock.__version__
        meta = z.read(info + "METADATA").decode()
        self.assertIn("Version: %s\n" % fencelock.__version__, meta)  # pyproject's, and the package's
        self.assertIn("Requires-Python: >=3.9\n", meta)
        record = z.read(info + "RECORD").decode().splitlines()
        self.assertEqual(sorted(r.split(",")[0] for r in record), sorted(names))
        again = self.backend("build_wheel", os.path.join(self.tmp, "again"))
        with open(whl, "rb") as a, open(again, "rb") as b:
            self.assertEqual(a.read(), b.read(), "the wheel is not reproducible")

        sdist = self.backend("build_sdist", out)
        top = "fencelock-%s/" % fencelock.__version__
        with tarfile.open(sdist) as t:
            members = t.getnames()
        for f in ("pyproject.toml", "PKG-INFO", "README.md", "_backend/fencelock_backend.py", "fencelock/lease.py"):
            self.assertIn(top + f, members)

    def test_pip_installs_it_without_an_index(self) -> None:
        pys = pythons()
        if not pys:
            self.skipTest("no python3 from 3.9 with pip here")
        jobs = [(py, iso) for py in pys for iso in (True, False)]

        def install(job: Tuple[str, bool]) -> Tuple[str, bool, int, str]:
            py, iso = job
            target = os.path.join(self.tmp, "t-%d-%s" % (jobs.index(job), "noiso" if iso else "iso"))
            argv = [py, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check", "-q",
                    "--target", target, self.src]
            if iso:
                argv.insert(4, "--no-build-isolation")
            env: Dict[str, str] = dict(os.environ, PIP_NO_INPUT="1")
            env.pop("PYTHONPATH", None)
            r = subprocess.run(argv, capture_output=True, text=True, env=env)
            if r.returncode != 0:
                return py, iso, r.returncode, r.stdout + r.stderr
            chk = subprocess.run([py, "-c", "import fencelock, fencelock.aio; print(fencelock.__version__)"],
                                 capture_output=True, text=True, env=dict(env, PYTHONPATH=target), cwd=self.tmp)
            return py, iso, chk.returncode, chk.stdout.strip() + chk.stderr

        with ThreadPoolExecutor(3) as ex:
            results = list(ex.map(install, jobs))
        for py, iso, rc, out in results:
            with self.subTest(python=py, no_build_isolation=iso):
                self.assertEqual(rc, 0, out)
                self.assertEqual(out, fencelock.__version__)


if __name__ == "__main__":
    unittest.main()
