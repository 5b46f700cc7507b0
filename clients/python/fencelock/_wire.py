"""What the sync and the asyncio clients share: the wire's shapes, each
call's request, the answer's decoding, TLS settings and the failover rules.

Nothing here does I/O, so :mod:`fencelock.client` (threads, http.client)
and :mod:`fencelock.aio` (asyncio streams) send the same requests and
read the same answers.
"""

from __future__ import annotations

import json
import math
import os
import random
import secrets
import socket
import ssl
import threading
import urllib.parse
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generic, List, Optional, Sequence, Tuple, TypeVar, Union

try:
    from typing import Literal
except ImportError:  # pragma: no cover - Python 3.7, which the package does not support
    Literal = None  # type: ignore[assignment]

from .errors import (
    FencelockError,
    HeldError,
    InternalError,
    InvalidError,
    LockDelayError,
    TLSMismatchError,
    UnavailableError,
    error_for,
)

DEFAULT_PORT = 7470
DEFAULT_ADDR = "127.0.0.1:7470"
DEFAULT_TTL = 10.0  # seconds, as the Go client's DefaultTTL
FOREVER = math.inf  # a wait with no bound: wait=FOREVER, the same as wait=None
MAX_WAIT_ROUND = 3600.0  # the server's limit on one wait; longer waits are several rounds
MIN_TTL = 0.1  # seconds: the server's limits
MAX_TTL = 86400.0
LONG_TTL = 3600.0  # a TTL above this is refused without allow_long=True: milliseconds by mistake?
MAX_LOCK_DELAY = 60.0
END_OF_ENTRY = 2**64 - 1

Mode = Literal["read", "write"]
"""A read/write lock's hold: ``"read"`` (shared) or ``"write"`` (alone)."""

# Codes after which another node may do better: the call is sent elsewhere.
RETRY_ELSEWHERE = {"not_leader", "unavailable", "too_many_open_files", "too_many_connections", "removed"}

T = TypeVar("T")


def ms(seconds: float) -> int:
    """Seconds as the whole milliseconds of an ``_ms`` field."""
    return int(round(seconds * 1000))


# ---- shapes ---------------------------------------------------------


@dataclass(frozen=True, order=True)
class Revision:
    """An event's place in the cluster's history: ``INDEX.SEQ``.

    The raft log index of the entry that caused it and its place among
    that entry's events. It names the same event on every node, so a watch
    resumes after it anywhere. ``Revision.parse("12")`` (``seq`` =
    ``END_OF_ENTRY``) means after every event of entry 12.

    >>> Revision.parse("8.2") > Revision.parse("8.1")
    True
    >>> str(Revision(8, END_OF_ENTRY))
    '8'
    """

    index: int
    seq: int

    @classmethod
    def parse(cls, text: Union[str, "Revision"]) -> "Revision":
        """Read ``"INDEX"`` or ``"INDEX.SEQ"`` (raises :class:`ValueError`)."""
        if isinstance(text, Revision):
            return text
        i, dot, q = str(text).partition(".")
        if not i.isdigit() or (dot and not q.isdigit()):
            raise ValueError('revision must be "INDEX" or "INDEX.SEQ" (unsigned integers), not %r' % text)
        return cls(int(i), int(q) if dot else END_OF_ENTRY)

    def __str__(self) -> str:
        if self.seq == END_OF_ENTRY:
            return str(self.index)
        return "%d.%d" % (self.index, self.seq)

    def __repr__(self) -> str:
        return "Revision(%r)" % str(self)


def _seconds(d: Dict[str, Any], name: str) -> float:
    """The wire's ``NAME_ms`` field of d, in seconds."""
    return int(d.get(name + "_ms", 0) or 0) / 1000


@dataclass(frozen=True)
class Grant:
    """One lease as the server answers it (``api.Lease``); times in seconds.

    ``ttl`` is the lease's TTL and ``remaining`` what was left of it, on
    cluster time, when the answer was made. ``session`` is the session it
    is held under (0: its own TTL); ``kind``, ``permits``, ``mode`` and
    ``slot`` describe a semaphore permit (``kind="semaphore"``, ``slot``
    1..permits) or a read/write hold (``kind="rwlock"``, ``mode``
    ``"read"`` or ``"write"``); ``holders`` lists every live holder of
    such a key in a :meth:`Client.get` answer. ``raw`` is the answer as
    the server sent it (milliseconds and all).
    """

    key: str
    holder: str
    token: int
    ttl: float
    remaining: float
    session: int = 0
    kind: str = ""
    permits: int = 0
    mode: str = ""
    slot: int = 0
    holders: Tuple["Grant", ...] = ()
    raw: Dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Grant":
        return cls(
            key=str(d.get("key", "")),
            holder=str(d.get("holder", "")),
            token=int(d.get("token", 0)),
            ttl=_seconds(d, "ttl"),
            remaining=_seconds(d, "remaining"),
            session=int(d.get("session", 0)),
            kind=str(d.get("kind", "")),
            permits=int(d.get("permits", 0)),
            mode=str(d.get("mode", "")),
            slot=int(d.get("slot", 0)),
            holders=tuple(cls.from_json(h) for h in d.get("holders") or ()),
            raw=d,
        )


@dataclass(frozen=True)
class SessionInfo:
    """The server's account of a session (``api.Session``); times in seconds.

    ``locks`` counts the locks held under it (after a close: those it
    released), ``waiting`` its queue places; ``raw`` is the answer as sent.
    """

    id: int
    holder: str
    ttl: float
    remaining: float
    locks: int
    waiting: int
    raw: Dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "SessionInfo":
        return cls(
            id=int(d.get("id", 0)),
            holder=str(d.get("holder", "")),
            ttl=_seconds(d, "ttl"),
            remaining=_seconds(d, "remaining"),
            locks=int(d.get("locks", 0)),
            waiting=int(d.get("waiting", 0)),
            raw=d,
        )


@dataclass(frozen=True)
class Event:
    """One change on a watched key (``api.WatchEvent``); times in seconds.

    ``type`` is ``"granted"``, ``"released"``, ``"expired"``,
    ``"wait-joined"`` or ``"wait-left"`` (``reason`` ``"cancelled"`` or
    ``"deadline"``). ``ttl`` is a grant's TTL. ``at`` and ``since`` are
    cluster time: only their differences mean anything (``at - since`` is
    how long a lease was held or a holder waited). ``raw`` is the event as sent.
    """

    revision: Revision
    type: str
    key: str
    holder: str
    token: int = 0
    ttl: float = 0.0
    reason: str = ""
    at: float = 0.0
    since: float = 0.0
    raw: Dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Event":
        return cls(
            revision=Revision.parse(str(d["revision"])),
            type=str(d.get("type", "")),
            key=str(d.get("key", "")),
            holder=str(d.get("holder", "")),
            token=int(d.get("token", 0)),
            ttl=_seconds(d, "ttl"),
            reason=str(d.get("reason", "")),
            at=_seconds(d, "at"),
            since=_seconds(d, "since"),
            raw=d,
        )


@dataclass(frozen=True)
class ExtendResult:
    """One lease's outcome in :meth:`Client.extend_batch`, in request order."""

    key: str
    token: int
    ok: bool
    grant: Optional[Grant] = None
    code: str = ""
    error: str = ""


@dataclass(frozen=True)
class WhoAmI:
    """Who the client's credential is: ``auth`` False when the cluster has no ACLs."""

    auth: bool
    principal: str


@dataclass(frozen=True)
class Leadership:
    """Who leads an election: ``candidate`` ``""`` when nobody does.

    ``revision`` is that of the change that made it so; ``at`` its
    cluster time in seconds (0 for the first report, read from the present).
    """

    candidate: str
    token: int
    revision: Revision
    at: float = 0.0


# ---- requests ---------------------------------------------------------


@dataclass
class Req(Generic[T]):
    """One logical call before it is sent: built here, sent by either client."""

    method: str
    path: str
    parse: Callable[[Dict[str, Any]], T]
    body: Optional[Dict[str, Any]] = None
    query: Optional[Dict[str, str]] = None
    write: bool = False  # carries a request_id, the same on every retry
    wait: float = 0.0  # a wait the server may take on top of the exchange's timeout
    at: str = ""  # one attempt at exactly this base URL: no failover

    def subject(self) -> str:
        """The key the call is about ("" for none), for the errors that name it."""
        for d in (self.body, self.query):
            if d and isinstance(d.get("key"), str):
                return d["key"]
        return ""

    def target(self) -> str:
        if self.query:
            return self.path + "?" + urllib.parse.urlencode(self.query)
        return self.path

    def payload(self) -> Optional[bytes]:
        if self.body is None:
            return None
        body = self.body
        if self.write and "request_id" not in body:
            body = dict(body, request_id=uuid.uuid4().hex)
            self.body = body  # every retry sends the same id
        return json.dumps(body).encode()


def _invalid(arg: str, message: str) -> InvalidError:
    return InvalidError("fencelock: " + message, code="invalid_argument", field=arg)


def _span(seconds: float) -> str:
    """A long time said for people: "8.3 hours"."""
    if seconds >= 86400:
        return "%.3g days" % (seconds / 86400)
    if seconds >= 3600:
        return "%.3g hours" % (seconds / 3600)
    return "%.3g minutes" % (seconds / 60)


def check_ttl(ttl: Any, *, allow_long: bool = False, arg: str = "ttl") -> float:
    """``ttl`` in seconds, checked: the server's 0.1 s to a day, and over an hour
    only with ``allow_long`` (a TTL that long is more often milliseconds by mistake).

    >>> check_ttl(30000)
    Traceback (most recent call last):
    ...
    fencelock.errors.InvalidError: fencelock: ttl=30000 is 8.33 hours: TTLs are seconds (ttl=30 is 30 s); pass allow_long=True if you mean it
    """
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise _invalid(arg, "%s= must be a number of seconds, not %r" % (arg, ttl))
    if not ttl > 0:
        raise _invalid(arg, "%s= must be a positive number of seconds, not %r" % (arg, ttl))
    if ttl < MIN_TTL:
        raise _invalid(arg, "%s=%g is under the server's minimum of %g s" % (arg, ttl, MIN_TTL))
    if ttl > MAX_TTL:
        raise _invalid(arg, "%s=%g is %s: over the server's limit of a day (%g s)" % (arg, ttl, _span(ttl), MAX_TTL))
    if ttl > LONG_TTL and not allow_long:
        raise _invalid(arg, "%s=%g is %s: TTLs are seconds (%s=%g is %g s); pass allow_long=True if you mean it" % (
            arg, ttl, _span(ttl), arg, ttl / 1000, ttl / 1000))
    return float(ttl)


def check_wait(wait: Optional[float], arg: str = "wait") -> float:
    """``wait`` in seconds: None (the default) is as long as it takes (``FOREVER``), 0 tries once."""
    if wait is None:
        return FOREVER
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait >= 0:
        raise _invalid(arg, "%s= must be None (as long as it takes), 0 (try once) or seconds >= 0, not %r" % (
            arg, wait))
    return float(wait)


def check_lock_delay(lock_delay: float) -> float:
    if isinstance(lock_delay, bool) or not isinstance(lock_delay, (int, float)) or \
            not 0 <= lock_delay <= MAX_LOCK_DELAY:
        raise _invalid("lock_delay", "lock_delay= must be between 0 and %g seconds, not %r" % (
            MAX_LOCK_DELAY, lock_delay))
    return float(lock_delay)


def check_mode(mode: Optional[str]) -> Optional[Mode]:
    """``mode``: None for neither, "read" or "write"."""
    if mode is None or mode == "":
        return None
    if mode == "read":
        return "read"
    if mode == "write":
        return "write"
    raise _invalid("mode", 'mode= must be "read" or "write" (or None), not %r' % (mode,))


def acquire_req(
    key: str,
    holder: str,
    ttl: float,
    *,
    wait: float = 0.0,
    session: int = 0,
    lock_delay: float = 0.0,
    permits: int = 0,
    mode: Optional[str] = None,
    request_id: str = "",
    allow_long: bool = False,
) -> Req[Grant]:
    """One round of an acquire; ``wait`` is this round's, at most an hour."""
    body: Dict[str, Any] = {"key": key, "holder": holder}
    if session:
        body["session"] = session
    else:
        body["ttl_ms"] = ms(check_ttl(ttl, allow_long=allow_long))
    if wait > 0:
        body["wait_ms"] = ms(wait)
    if lock_delay:
        body["lock_delay_ms"] = ms(check_lock_delay(lock_delay))
    if permits:
        body["permits"] = permits
    m = check_mode(mode)
    if m:
        body["mode"] = m
    if request_id:
        body["request_id"] = request_id
    return Req("POST", "/v1/acquire", Grant.from_json, body=body, write=True, wait=wait)


def acquire_all_req(
    keys: Sequence[str], holder: str, ttl: float, *, session: int = 0, lock_delay: float = 0.0,
    allow_long: bool = False,
) -> Req[List[Grant]]:
    body: Dict[str, Any] = {"keys": list(keys), "holder": holder}
    if session:
        body["session"] = session
    else:
        body["ttl_ms"] = ms(check_ttl(ttl, allow_long=allow_long))
    if lock_delay:
        body["lock_delay_ms"] = ms(check_lock_delay(lock_delay))
    return Req("POST", "/v1/acquire-all", lambda d: [Grant.from_json(x) for x in d.get("locks") or ()], body=body, write=True)


def renew_req(key: str, holder: str, ttl: float, allow_long: bool = False) -> Req[Grant]:
    body = {"key": key, "holder": holder, "ttl_ms": ms(check_ttl(ttl, allow_long=allow_long))}
    return Req("POST", "/v1/renew", Grant.from_json, body=body, write=True)


def extend_req(key: str, holder: str, token: int, ttl: float, at: str = "", allow_long: bool = False) -> Req[Grant]:
    body = {"key": key, "holder": holder, "token": token, "ttl_ms": ms(check_ttl(ttl, allow_long=allow_long))}
    return Req("POST", "/v1/extend", Grant.from_json, body=body, write=True, at=at)


def _batch(d: Dict[str, Any]) -> List[ExtendResult]:
    out = []
    for r in d.get("results") or ():
        g = Grant.from_json(r["lease"]) if r.get("lease") else None
        out.append(ExtendResult(str(r.get("key", "")), int(r.get("token", 0)), bool(r.get("ok")), g,
                                str(r.get("code", "")), str(r.get("error", ""))))
    return out


def extend_batch_req(holder: str, ttl: float, leases: Sequence[Tuple[str, int]],
                     allow_long: bool = False) -> Req[List[ExtendResult]]:
    body = {"holder": holder, "ttl_ms": ms(check_ttl(ttl, allow_long=allow_long)),
            "leases": [{"key": k, "token": t} for k, t in leases]}
    return Req("POST", "/v1/extend-batch", _batch, body=body)


def release_req(key: str, holder: str, token: int = 0) -> Req[bool]:
    body: Dict[str, Any] = {"key": key, "holder": holder}
    if token:
        body["token"] = token
    return Req("POST", "/v1/release", lambda d: bool(d.get("released", False)), body=body, write=True)


def check_req(key: str, token: int) -> Req[bool]:
    return Req("GET", "/v1/check", lambda d: bool(d.get("valid", False)), query={"key": key, "token": str(token)})


def get_req(key: str) -> Req[Grant]:
    return Req("GET", "/v1/lock", Grant.from_json, query={"key": key})


def list_req(prefix: str, limit: int, after: str) -> Req[List[Grant]]:
    q = {"prefix": prefix}
    if limit:
        q["limit"] = str(limit)
    if after:
        q["after"] = after
    return Req("GET", "/v1/locks", lambda d: [Grant.from_json(x) for x in d.get("locks") or ()], query=q)


def session_open_req(holder: str, ttl: float, allow_long: bool = False) -> Req[SessionInfo]:
    body = {"holder": holder, "ttl_ms": ms(check_ttl(ttl, allow_long=allow_long))}
    return Req("POST", "/v1/session/open", SessionInfo.from_json, body=body, write=True)


def session_extend_req(sid: int, holder: str, at: str = "") -> Req[SessionInfo]:
    # Not remembered by request id on the server: a re-sent extend extends again.
    return Req("POST", "/v1/session/extend", SessionInfo.from_json, body={"id": sid, "holder": holder}, at=at)


def session_close_req(sid: int, holder: str) -> Req[SessionInfo]:
    return Req("POST", "/v1/session/close", SessionInfo.from_json, body={"id": sid, "holder": holder}, write=True)


def _watch_page(d: Dict[str, Any]) -> Tuple[List[Event], Revision, List[Grant]]:
    return (
        [Event.from_json(e) for e in d.get("events") or ()],
        Revision.parse(str(d.get("revision", "0.0"))),
        [Grant.from_json(x) for x in d.get("locks") or ()],
    )


def watch_req(
    prefix: str, key: Optional[str], after: Optional[Revision], wait: float, limit: int = 0
) -> Req[Tuple[List[Event], Revision, List[Grant]]]:
    q = {"key": key} if key is not None else {"prefix": prefix}
    q["wait_ms"] = str(ms(wait))
    if after is not None:
        q["after"] = str(after)
    if limit:
        q["limit"] = str(limit)
    return Req("GET", "/v1/watch", _watch_page, query=q, wait=wait)


def watch_list_req(prefix: str, key: Optional[str]) -> Req[Tuple[List[Event], Revision, List[Grant]]]:
    q = {"key": key} if key is not None else {"prefix": prefix}
    q["list"] = "true"
    return Req("GET", "/v1/watch", _watch_page, query=q)


def whoami_req() -> Req[WhoAmI]:
    return Req("GET", "/v1/acl/whoami", lambda d: WhoAmI(bool(d.get("auth")), str(d.get("principal", ""))))


def acl_bootstrap_req() -> Req[str]:
    return Req("POST", "/v1/acl/bootstrap", lambda d: str(d.get("secret", "")), body={})


def acl_token_create_req(name: str, policies: Sequence[str], no_secret: bool, replace: bool) -> Req[str]:
    body: Dict[str, Any] = {"name": name, "policies": list(policies)}
    if no_secret:
        body["no_secret"] = True
    if replace:
        body["replace"] = True
    return Req("POST", "/v1/acl/token/create", lambda d: str(d.get("secret", "")), body=body)


def acl_token_delete_req(name: str) -> Req[None]:
    return Req("POST", "/v1/acl/token/delete", lambda d: None, body={"name": name})


def _rule(r: Union[str, Dict[str, Any]]) -> Dict[str, Any]:
    if isinstance(r, dict):
        return r
    # PREFIX:VERBS[:deny], as the CLI's --rule; the prefix may hold colons.
    parts = r.split(":")
    deny = len(parts) >= 3 and parts[-1] == "deny"
    if deny:
        parts = parts[:-1]
    if len(parts) < 2:
        raise InvalidError("fencelock: rule %r is not PREFIX:VERBS[:deny]" % r, code="invalid_argument", field="rules")
    out: Dict[str, Any] = {"prefix": ":".join(parts[:-1]), "verbs": parts[-1].split(",")}
    if deny:
        out["deny"] = True
    return out


def acl_policy_set_req(name: str, rules: Sequence[Union[str, Dict[str, Any]]]) -> Req[None]:
    return Req("POST", "/v1/acl/policy/set", lambda d: None, body={"name": name, "rules": [_rule(r) for r in rules]})


def acl_policy_delete_req(name: str) -> Req[None]:
    return Req("POST", "/v1/acl/policy/delete", lambda d: None, body={"name": name})


def acl_tokens_req() -> Req[List[Dict[str, Any]]]:
    return Req("GET", "/v1/acl/tokens", lambda d: list(d.get("principals") or ()))


def acl_policies_req() -> Req[List[Dict[str, Any]]]:
    return Req("GET", "/v1/acl/policies", lambda d: list(d.get("policies") or ()))


def members_req() -> Req[Dict[str, Any]]:
    return Req("GET", "/v1/cluster/members", lambda d: d)


def health_req(at: str) -> Req[Dict[str, Any]]:
    return Req("GET", "/healthz", lambda d: d, at=at)


# ---- answers ------------------------------------------------------------


def headers_for(req: Req[Any], auth: str, host: str) -> Dict[str, str]:
    h = {"Host": host, "Accept": "application/json"}
    if req.body is not None:
        h["Content-Type"] = "application/json"
    if auth:
        h["Authorization"] = "Bearer " + auth
    return h


def decode(addr: str, status: int, raw: bytes, key: str = "") -> Dict[str, Any]:
    """The JSON object of a 2xx answer, or the error it maps to, raised
    (``key``: the key the call was about, named in a held error)."""
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        if 200 <= status < 300:
            raise InternalError("fencelock: %s answered %d with no JSON" % (addr, status), status=status)
        data = {"error": "HTTP %d: %s" % (status, raw[:200].decode("utf-8", "replace").strip())}
    if not isinstance(data, dict):
        raise InternalError("fencelock: %s answered %d with a non-object" % (addr, status), status=status)
    if 200 <= status < 300:
        return data
    err = error_for(status, data, key)
    if isinstance(err, UnavailableError) or err.code in RETRY_ELSEWHERE:
        err.message = "%s (%s)" % (err.message, addr)
    raise err


# ---- addresses and TLS --------------------------------------------------


def base_url(addr: str, scheme: str, arg: str = "addrs") -> str:
    """``addr`` as ``scheme://host:port``; an address with a scheme keeps it, and
    one without a port gets the server's, 7470.

    >>> base_url("127.0.0.1", "http")
    'http://127.0.0.1:7470'
    >>> base_url("https://locks.example:8443", "http")
    'https://locks.example:8443'
    """
    raw = addr.strip()
    full = raw if "://" in raw else scheme + "://" + raw
    bad = _invalid(arg, "%s: bad server address %r: want HOST, HOST:PORT or http(s)://HOST[:PORT]" % (arg, raw))
    u = urllib.parse.urlsplit(full)
    if u.scheme not in ("http", "https") or not u.hostname or u.netloc.endswith(":") or "@" in u.netloc:
        raise bad
    try:
        port = u.port
    except ValueError:
        raise bad from None
    netloc = u.netloc if port is not None else "%s:%d" % (u.netloc, DEFAULT_PORT)
    return "%s://%s" % (u.scheme, netloc)


def split_addrs(addrs: Union[str, Sequence[str], None], scheme: str) -> List[str]:
    arg = "addrs"
    if addrs is None:
        addrs = os.environ.get("FENCELOCK_ADDR", "") or DEFAULT_ADDR
        arg = "$FENCELOCK_ADDR"
    if isinstance(addrs, str):
        addrs = [addrs]
    out: List[str] = []
    for a in addrs:
        for one in a.split(","):
            if one.strip():
                out.append(base_url(one, scheme, arg))
    if not out:
        raise _invalid("addrs", "addrs: no server address")
    return out


def host_port(url: str) -> Tuple[str, int, bool]:
    """(host, port, tls) of a base URL."""
    u = urllib.parse.urlsplit(url)
    tls = u.scheme == "https"
    return u.hostname or "127.0.0.1", u.port or DEFAULT_PORT, tls


def _tls_file(value: Optional[str], var: str, arg: str) -> Tuple[str, str]:
    """The file an argument names, or its variable's when the argument is None,
    and how to name it in an error (``ca='x.pem'`` or ``$FENCELOCK_CLIENT_CA='x.pem'``)."""
    if value is None:
        v = os.environ.get(var, "")
        return v, "$%s=%r" % (var, v)
    return value, "%s=%r" % (arg, value)


def tls_context(
    ca: Optional[str], cert: Optional[str], key: Optional[str], context: Optional[ssl.SSLContext]
) -> Optional[ssl.SSLContext]:
    """The client's TLS settings, or None when it has none (plain HTTP).

    ``ca``, ``cert`` and ``key`` default to ``$FENCELOCK_CLIENT_CA``,
    ``$FENCELOCK_CLIENT_CERT`` and ``$FENCELOCK_CLIENT_KEY``, the CLI's
    variables; ``""`` means none (and ignores the variable). An error
    names the argument (or variable) and the file.
    """
    if context is not None:
        return context
    ca, ca_is = _tls_file(ca, "FENCELOCK_CLIENT_CA", "ca")
    cert, cert_is = _tls_file(cert, "FENCELOCK_CLIENT_CERT", "cert")
    key, key_is = _tls_file(key, "FENCELOCK_CLIENT_KEY", "key")
    if not (ca or cert or key):
        return None
    if bool(cert) != bool(key):
        given = cert_is if cert else key_is
        raise _invalid("cert" if cert else "key",
                       "%s: a client certificate needs both cert= and key= (or $FENCELOCK_CLIENT_CERT and "
                       "$FENCELOCK_CLIENT_KEY)" % given)
    for path, named, arg, what in ((ca, ca_is, "ca", "the CA certificate that signs the servers' certificates"),
                                   (cert, cert_is, "cert", "this client's certificate"),
                                   (key, key_is, "key", "this client's private key")):
        if not path:
            continue
        try:
            with open(path, "rb"):
                pass
        except FileNotFoundError:
            raise _invalid(arg, "%s: no such file (%s, PEM)" % (named, what)) from None
        except OSError as e:
            raise _invalid(arg, "%s: cannot read it (%s): %s" % (named, what, e.strerror or e)) from None
    ctx = ssl.create_default_context()
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca:
        try:
            ctx.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as e:
            raise _invalid("ca", "%s: not a PEM CA certificate: %s" % (ca_is, e)) from None
    if cert:
        try:
            ctx.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as e:
            raise _invalid("cert", "%s, %s: not a PEM certificate and its private key: %s" % (cert_is, key_is, e)) \
                from None
    return ctx


def tls_setting_error(url: str, e: BaseException) -> Optional[TLSMismatchError]:
    """The error for a TLS failure that a setting causes, naming what to pass; None for others.

    Raised at once: another address or a retry cannot cure a setting.
    """
    why = ("%s %s %s" % (getattr(e, "reason", ""), getattr(e, "verify_message", ""), e)).upper()
    hp = url.split("://", 1)[-1]
    if "CERTIFICATE_REQUIRED" in why:
        advice = ("this server asks for a client certificate: pass cert= and key= (or set "
                  "$FENCELOCK_CLIENT_CERT and $FENCELOCK_CLIENT_KEY)")
    elif "HOSTNAME MISMATCH" in why or "IP ADDRESS MISMATCH" in why:
        advice = ("this server's certificate does not name %s: give the address its certificate names "
                  "(its subjectAltName)" % hp.rsplit(":", 1)[0])
    elif "CERTIFICATE_VERIFY_FAILED" in why:
        advice = ("this server's certificate is not signed by a CA the client trusts: pass ca= the CA file that "
                  "signs it (or set $FENCELOCK_CLIENT_CA)")
    elif "UNKNOWN_CA" in why or "BAD_CERTIFICATE" in why or "CERTIFICATE_UNKNOWN" in why:
        advice = ("this server refused the client certificate: pass cert= and key= of a certificate signed by the "
                  "CA the server trusts (its --ca)")
    else:
        return None
    return TLSMismatchError("fencelock: %s: %s (TLS: %s)" % (url, advice, e), code="tls_mismatch")


def plain_meets_tls(host: str, port: int, timeout: float) -> bool:
    """Whether the server at host:port answers a TLS handshake.

    Asked after a plain-HTTP request was closed without an answer, which
    is what a TLS port does with one. The server's certificate is not
    checked: this only asks which protocol it speaks.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=min(timeout, 2.0)) as raw:
            with ctx.wrap_socket(raw, server_hostname=host):
                return True
    except ssl.SSLError as e:
        # A TLS alert (it wants a client certificate, say) is TLS too.
        return "ALERT" in str(e).upper() or "CERTIFICATE" in str(e).upper()
    except OSError:
        return False


def tls_meets_plain(e: BaseException) -> bool:
    """Whether a TLS handshake failed because the server answered in plain text."""
    if not isinstance(e, ssl.SSLError):
        return False
    why = ("%s %s" % (getattr(e, "reason", ""), e)).upper()
    return "WRONG_VERSION_NUMBER" in why or "RECORD_LAYER_FAILURE" in why or "HTTP_REQUEST" in why


def speaks_tls_error(url: str) -> TLSMismatchError:
    hp = url.split("://", 1)[-1]
    return TLSMismatchError(
        "fencelock: %s: this server speaks TLS and the client sent plain HTTP: pass ca= "
        "(the CA file that signs the server's certificate; or set $FENCELOCK_CLIENT_CA), "
        "or give the address as https://%s" % (url, hp),
        code="tls_mismatch",
    )


def speaks_plain_error(url: str) -> TLSMismatchError:
    hp = url.split("://", 1)[-1]
    return TLSMismatchError(
        "fencelock: %s: this server speaks plain HTTP, not TLS: give the address as http://%s "
        "and pass no ca=, cert= or key= (nor $FENCELOCK_CLIENT_CA, _CERT, _KEY)" % (url, hp),
        code="tls_mismatch",
    )


# ---- failover -------------------------------------------------------------


class Addrs:
    """The addresses a client knows, the preferred one first; thread-safe."""

    def __init__(self, urls: List[str]) -> None:
        self._mu = threading.Lock()
        self._urls = urls
        self._cur = 0

    def all(self) -> List[str]:
        with self._mu:
            n = len(self._urls)
            return [self._urls[(self._cur + i) % n] for i in range(n)]

    def pick(self, n: int = 0) -> str:
        with self._mu:
            return self._urls[(self._cur + n) % len(self._urls)]

    def size(self) -> int:
        with self._mu:
            return len(self._urls)

    def prefer(self, url: str) -> None:
        """Make url the first tried, adding it when it is a leader we had not been told of."""
        with self._mu:
            if url not in self._urls:
                self._urls.append(url)
            self._cur = self._urls.index(url)


def leader_url(addr: str, leader: str) -> str:
    """The base URL of a leader a node at addr named: a bare host:port keeps addr's scheme."""
    return base_url(leader, "https" if addr.startswith("https://") else "http")


def jitter(d: float) -> float:
    """A pause drawn from [d/2, d], so that clients do not retry in step."""
    return d / 2 + random.uniform(0, d / 2)


@dataclass
class Failover:
    """One call's walk over the addresses (the Go client's ``do``).

    A ``not_leader`` answer naming the leader is followed at once (up to
    3 times, costing no retry); a node that cannot be reached or is
    unavailable sends the call to the next address; after each full pass
    (or an unavailable answer) the call backs off, 50 ms doubling to 1 s,
    jittered, for ``rounds - 1`` back-offs: about 1.3 to 2.6 s with the
    default 7, long enough to ride out an election.
    """

    addrs: Addrs
    rounds: int
    next: int = 0
    redirects: int = 0
    backoffs: int = 0
    backoff: float = 0.05
    last: Optional[FencelockError] = None

    def addr(self) -> str:
        return self.addrs.pick(self.next)

    def failed(self, addr: str, err: FencelockError) -> Optional[float]:
        """Record a failure at addr: None to give up (raise ``self.last``), else the pause before the next try."""
        self.last = err
        if err.code == "not_leader" and err.leader and self.redirects < 3:
            try:
                url = leader_url(addr, err.leader)
            except FencelockError:
                url = ""
            if url and url != addr:
                self.redirects += 1
                self.addrs.prefer(url)
                self.next = 0
                return 0.0
        if not isinstance(err, UnavailableError) and err.code not in RETRY_ELSEWHERE:
            return None  # an answer: retrying would get the same one
        if isinstance(err, TLSMismatchError):
            return None
        self.next += 1
        if self.next % self.addrs.size() == 0 or err.status:
            if self.backoffs >= self.rounds - 1:
                return None
            self.backoffs += 1
            d = jitter(self.backoff)
            self.backoff = min(2 * self.backoff, 1.0)
            return d
        return 0.0


def retryable_for_all(err: FencelockError) -> bool:
    """What an acquire-all retry loop tries again on: held and lock_delay."""
    return isinstance(err, (HeldError, LockDelayError))


# ---- holders ------------------------------------------------------------


def default_holder() -> str:
    """hostname-pid-random: unique to this process and, by the random part,
    to each call, so that two leases never renew each other by accident."""
    host = socket.gethostname() or "localhost"
    return "%s-%d-%s" % (host, os.getpid(), secrets.token_hex(4))


class ClientSettings:
    """What both client flavours are made of: the addresses, TLS, the
    bearer token and the timing settings (see :class:`fencelock.Client`)."""

    def __init__(
        self,
        addrs: Union[str, Sequence[str], None] = None,
        *,
        auth_token: Optional[str] = None,
        ca: Optional[str] = None,
        cert: Optional[str] = None,
        key: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
        timeout: float = 10.0,
        rounds: int = 7,
        wait_check: float = 1.0,
        max_idle: int = 16,
    ) -> None:
        self._ssl = tls_context(ca, cert, key, ssl_context)
        self._addrs = Addrs(split_addrs(addrs, "https" if self._ssl else "http"))
        if auth_token is None:
            auth_token = os.environ.get("FENCELOCK_AUTH_TOKEN", "")
        self._auth = auth_token.strip()
        self.timeout = timeout
        self.rounds = max(1, rounds)
        self.wait_check = wait_check
        self._principal: Optional[str] = None
        self._mu = threading.Lock()  # the principal cache, for the threaded flavour
        self._default_ssl: Optional[ssl.SSLContext] = None
        self._pool = self._make_pool(max_idle)

    def _make_pool(self, max_idle: int) -> Any:
        """The flavour's pool of kept connections, at most ``max_idle`` idle per address."""
        raise NotImplementedError

    @property
    def addrs(self) -> List[str]:
        """The base URLs known, the preferred one first (leaders learnt from ``not_leader`` too)."""
        return self._addrs.all()
