"""The build backend of the fencelock package (PEP 517, PEP 660), standard
library only, so that ``pip install clients/python`` needs no package index
and no setuptools, with or without ``--no-build-isolation``, on any
Python from 3.9.

pyproject.toml names it (``build-backend = "fencelock_backend"``,
``backend-path = ["_backend"]``, ``requires = []``). It reads the
``[project]`` table's plain ``key = "string"`` lines, which is all this
package's table has, and builds:

- a wheel (``py3-none-any``): the ``fencelock`` package and its
  ``.dist-info`` (METADATA, WHEEL, RECORD with sha256 hashes);
- an sdist (``.tar.gz``): pyproject.toml, README.md, PKG-INFO, this
  backend, the package and its examples;
- an editable wheel: a ``.pth`` file naming this directory.

Both archives are reproducible: fixed timestamps, owners and modes.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Any, Dict, List, Optional, Tuple

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGE = "fencelock"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip can hold
_SDIST_MTIME = 315532800  # the same instant, for tar


def _project() -> Dict[str, str]:
    """The plain string entries of pyproject.toml's [project] table."""
    with open(os.path.join(_ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    out: Dict[str, str] = {}
    table = ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            table = line.strip("[]").strip()
            continue
        m = re.match(r'^([A-Za-z0-9_-]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(#.*)?$', line)
        if table == "project" and m:
            out[m.group(1)] = m.group(2).encode().decode("unicode_escape")
    for need in ("name", "version", "description", "requires-python", "readme"):
        if need not in out:
            raise ValueError("pyproject.toml: [project] needs %s = \"...\"" % need)
    return out


def _dist(p: Dict[str, str]) -> str:
    return "%s-%s" % (re.sub(r"[-_.]+", "_", p["name"]).lower(), p["version"])


def _metadata(p: Dict[str, str]) -> str:
    with open(os.path.join(_ROOT, p["readme"]), encoding="utf-8") as f:
        readme = f.read()
    head = [
        "Metadata-Version: 2.1",
        "Name: " + p["name"],
        "Version: " + p["version"],
        "Summary: " + p["description"],
        "Requires-Python: " + p["requires-python"],
        "License: Apache-2.0",
        "Classifier: Programming Language :: Python :: 3",
        "Classifier: Typing :: Typed",
        "Description-Content-Type: text/markdown",
    ]
    return "\n".join(head) + "\n\n" + readme


def _package_files() -> List[str]:
    """The package's files, relative to the project, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(_ROOT, _PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith((".py", ".typed")):
                out.append(os.path.relpath(os.path.join(dirpath, f), _ROOT).replace(os.sep, "/"))
    return out


def _read(rel: str) -> bytes:
    with open(os.path.join(_ROOT, rel), "rb") as f:
        return f.read()


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def _write_wheel(wheel_directory: str, files: List[Tuple[str, bytes]]) -> str:
    p = _project()
    dist = _dist(p)
    info = dist + ".dist-info"
    wheel = "Wheel-Version: 1.0\nGenerator: fencelock_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files = files + [(info + "/METADATA", _metadata(p).encode()), (info + "/WHEEL", wheel.encode())]
    record = "".join(_record_line(n, d) + "\n" for n, d in files) + info + "/RECORD,,\n"
    files.append((info + "/RECORD", record.encode()))
    name = dist + "-py3-none-any.whl"
    os.makedirs(wheel_directory, exist_ok=True)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files:
            zi = zipfile.ZipInfo(n, _EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, d)
    return name


# ---- PEP 517 --------------------------------------------------------------


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    p = _project()
    info = _dist(p) + ".dist-info"
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    with open(os.path.join(metadata_directory, info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata(p))
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, [(rel, _read(rel)) for rel in _package_files()])


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    pth = (_ROOT + "\n").encode()
    return _write_wheel(wheel_directory, [("_%s_editable.pth" % _PACKAGE, pth)])


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    p = _project()
    dist = _dist(p)
    rels = ["pyproject.toml", p["readme"], "_backend/fencelock_backend.py"] + _package_files()
    examples = os.path.join(_ROOT, "examples")
    if os.path.isdir(examples):
        rels += ["examples/" + f for f in sorted(os.listdir(examples)) if f.endswith(".py")]
    members = [(rel, _read(rel)) for rel in rels]
    members.append(("PKG-INFO", _metadata(p).encode()))
    name = dist + ".tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, data in sorted(members):
            ti = tarfile.TarInfo(dist + "/" + rel)
            ti.size, ti.mtime, ti.mode = len(data), _SDIST_MTIME, 0o644
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            tar.addfile(ti, io.BytesIO(data))
    with open(os.path.join(sdist_directory, name), "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
            gz.write(raw.getvalue())
    return name
