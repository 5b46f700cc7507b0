"""Plain calls of the fencelock HTTP/JSON API (docs/API.md), with failover.

Standard library only. One :class:`Client` is safe to share between threads:
each call opens its own connection.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Union

from .errors import (
    FencelockError,
    InternalError,
    UnavailableError,
    UnreachableError,
    error_for,
)

DEFAULT_ADDR = "127.0.0.1:7470"

# Codes after which another node may do better: the call is sent elsewhere.
_RETRY_ELSEWHERE = {"not_leader", "unavailable", "too_many_open_files", "too_many_connections"}


@dataclass(frozen=True)
class Grant:
    """One lease as the server answers it (``api.Lease``).

    ``remaining_ms`` was measured on cluster time when the answer was made.
    """

    key: str
    holder: str
    token: int
    ttl_ms: int
    remaining_ms: int

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Grant":
        return cls(
            key=str(d["key"]),
            holder=str(d["holder"]),
            token=int(d["token"]),
            ttl_ms=int(d["ttl_ms"]),
            remaining_ms=int(d.get("remaining_ms", 0)),
        )


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def _split_addrs(addrs: Union[str, Sequence[str], None]) -> List[str]:
    if addrs is None:
        addrs = os.environ.get("FENCELOCK_ADDR", "") or DEFAULT_ADDR
    if isinstance(addrs, str):
        addrs = addrs.split(",")
    out = [a.strip() for a in addrs if a.strip()]
    if not out:
        raise ValueError("fencelock: no server address")
    return out


class Client:
    """A client of one fencelock server or cluster.

    ``addrs`` is ``"host:port"``, a comma-separated list, or a sequence of
    them (``http://`` or ``https://`` prefixes allowed); default
    ``$FENCELOCK_ADDR`` or ``127.0.0.1:7470``. A call goes to the last node
    that answered; a ``not_leader`` answer is followed to its ``leader``,
    and an unreachable or unavailable node makes the call try the next
    address, for up to ``rounds`` passes over the list. Writes carry a
    ``request_id`` so that a retry is answered with the original result.

    ``auth_token`` is sent as ``Authorization: Bearer``; default
    ``$FENCELOCK_AUTH_TOKEN`` (pass ``""`` to send none). ``timeout`` bounds
    each HTTP exchange in seconds (a waiting acquire gets its wait on top).
    """

    def __init__(
        self,
        addrs: Union[str, Sequence[str], None] = None,
        *,
        auth_token: Optional[str] = None,
        timeout: float = 10.0,
        rounds: int = 3,
    ) -> None:
        self._addrs = _split_addrs(addrs)
        self._cur = 0
        self._mu = threading.Lock()
        if auth_token is None:
            auth_token = os.environ.get("FENCELOCK_AUTH_TOKEN", "")
        self._auth = auth_token
        self.timeout = timeout
        self.rounds = max(1, rounds)

    @property
    def addrs(self) -> List[str]:
        """The addresses known, including leaders learnt from ``not_leader``."""
        with self._mu:
            return list(self._addrs)

    # ---- lock calls -------------------------------------------------

    def acquire(
        self, key: str, holder: str, ttl: float, *, wait: float = 0.0, deadline: Optional[float] = None
    ) -> Grant:
        """Take ``key`` for ``holder`` for ``ttl`` seconds; a NEW fencing token.

        ``wait`` > 0 queues in the key's FIFO for up to that many seconds.
        Raises :class:`HeldError` when another holder keeps it (or the wait
        elapsed). The same holder acquiring again renews with a new token.
        """
        body: Dict[str, Any] = {"key": key, "holder": holder, "ttl_ms": _ms(ttl)}
        if wait > 0:
            body["wait_ms"] = _ms(wait)
        return Grant.from_json(self._write("/v1/acquire", body, extra_timeout=wait, deadline=deadline))

    def renew(self, key: str, holder: str, ttl: float, *, deadline: Optional[float] = None) -> Grant:
        """Re-acquire by the live holder: a NEW token (raises :class:`NotHeldError`)."""
        return Grant.from_json(
            self._write("/v1/renew", {"key": key, "holder": holder, "ttl_ms": _ms(ttl)}, deadline=deadline)
        )

    def extend(
        self, key: str, holder: str, token: int, ttl: float, *, deadline: Optional[float] = None
    ) -> Grant:
        """Keep-alive under the SAME token for ``ttl`` seconds (raises :class:`NotHeldError`)."""
        body = {"key": key, "holder": holder, "token": token, "ttl_ms": _ms(ttl)}
        return Grant.from_json(self._write("/v1/extend", body, deadline=deadline))

    def release(self, key: str, holder: str, token: int = 0, *, deadline: Optional[float] = None) -> bool:
        """Release ``key`` if ``holder`` holds it (and under ``token``, if not 0).

        Returns False when there was nothing of the holder's to release.
        """
        body: Dict[str, Any] = {"key": key, "holder": holder}
        if token:
            body["token"] = token
        return bool(self._write("/v1/release", body, deadline=deadline).get("released", False))

    def check(self, key: str, token: int) -> bool:
        """Whether ``token`` is the key's current token and its lease is alive."""
        return bool(self._call("GET", "/v1/check", query={"key": key, "token": str(token)}).get("valid", False))

    def get(self, key: str) -> Grant:
        """The key's live lease (raises :class:`NotFoundError`)."""
        return Grant.from_json(self._call("GET", "/v1/lock", query={"key": key}))

    def list(self, prefix: str = "", *, limit: int = 0, after: str = "") -> List[Grant]:
        """One page of live leases whose keys start with ``prefix``, by key.

        ``limit`` 0 is the server's default (1000); ``after`` is the last key
        of the previous page. A page shorter than ``limit`` is the last.
        """
        q = {"prefix": prefix}
        if limit:
            q["limit"] = str(limit)
        if after:
            q["after"] = after
        return [Grant.from_json(d) for d in self._call("GET", "/v1/locks", query=q).get("locks", [])]

    def ready(self) -> bool:
        """Whether the current node answers ``/readyz`` with 200 (one try, no failover)."""
        try:
            self._once(self._addr(), "GET", "/readyz", None, self.timeout)
            return True
        except (FencelockError, OSError):
            return False

    # ---- transport --------------------------------------------------

    def _addr(self) -> str:
        with self._mu:
            return self._addrs[self._cur]

    def _write(
        self, path: str, body: Dict[str, Any], *, extra_timeout: float = 0.0, deadline: Optional[float] = None
    ) -> Dict[str, Any]:
        body = dict(body, request_id=uuid.uuid4().hex)
        return self._call("POST", path, body=body, extra_timeout=extra_timeout, deadline=deadline)

    def _call(
        self,
        method: str,
        path: str,
        *,
        body: Optional[Dict[str, Any]] = None,
        query: Optional[Dict[str, str]] = None,
        extra_timeout: float = 0.0,
        deadline: Optional[float] = None,
    ) -> Dict[str, Any]:
        if query:
            path = path + "?" + urllib.parse.urlencode(query)
        payload = json.dumps(body).encode() if body is not None else None
        last: Optional[FencelockError] = None
        with self._mu:
            n = len(self._addrs)
        budget = n * self.rounds  # failures allowed; a not_leader hop costs none, up to 8 hops
        hops = 0
        failures = 0
        while failures < budget and hops <= 8:
            timeout = self.timeout + extra_timeout
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                timeout = min(timeout, left)
            addr = self._addr()
            try:
                return self._once(addr, method, path, payload, timeout)
            except OSError as e:  # refused, reset, timed out
                last = UnreachableError("fencelock: %s: %s" % (addr, e))
                self._advance(addr)
            except FencelockError as e:
                if e.code not in _RETRY_ELSEWHERE:
                    raise
                last = e
                if e.code == "not_leader" and e.leader and e.leader != addr:
                    self._goto(e.leader)
                    hops += 1
                    continue
                self._advance(addr)
            failures += 1
            if failures % n == 0 and failures < budget:
                pause = min(0.05 * (failures // n), 0.5)  # back off between passes
                if deadline is not None:
                    pause = min(pause, max(0.0, deadline - time.monotonic()))
                time.sleep(pause)
        if last is None:
            last = UnreachableError("fencelock: deadline passed before a node answered")
        raise last

    def _advance(self, failed: str) -> None:
        with self._mu:
            if self._addrs[self._cur] == failed:
                self._cur = (self._cur + 1) % len(self._addrs)

    def _goto(self, leader: str) -> None:
        with self._mu:
            if leader not in self._addrs:
                self._addrs.append(leader)
            self._cur = self._addrs.index(leader)

    def _once(
        self, addr: str, method: str, path: str, payload: Optional[bytes], timeout: float
    ) -> Dict[str, Any]:
        if addr.startswith("https://"):
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(addr[8:].rstrip("/"), timeout=timeout)
        else:
            conn = http.client.HTTPConnection(addr.removeprefix("http://").rstrip("/"), timeout=timeout)
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if self._auth:
            headers["Authorization"] = "Bearer " + self._auth
        try:
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            status = resp.status
        finally:
            conn.close()
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            raise InternalError("fencelock: %s answered %d with no JSON" % (addr, status), status=status)
        if not isinstance(data, dict):
            raise InternalError("fencelock: %s answered %d with a non-object" % (addr, status), status=status)
        if 200 <= status < 300:
            return data
        err = error_for(status, data)
        if isinstance(err, UnavailableError) or err.code in _RETRY_ELSEWHERE:
            err.message = "%s (%s)" % (err.message, addr)
        raise err
