"""Exceptions of the fencelock client, named after the Go client's sentinels.

Every answer that is not 2xx carries a ``code`` (docs/API.md); the client
raises the subclass of :class:`FencelockError` that the code maps to.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional


class FencelockError(Exception):
    """Base of every error the client raises.

    Attributes carry the server's error body when there was one, with
    times in seconds: ``code`` (``"held"``, ``"not_held"``, ...),
    ``status`` (HTTP status), ``field`` (for ``invalid_argument``: the
    argument of the Python call at fault, ``"ttl"`` for the wire's
    ``ttl_ms``), ``key`` (the key the call was about), ``holder`` and
    ``remaining`` (seconds; for ``held`` and ``lock_delay``), ``leader``
    (for ``not_leader``), ``kind`` and ``permits`` (for
    ``kind_mismatch``), ``compact_revision`` (for ``compacted``, as text:
    ``"INDEX.SEQ"``) and ``quota``. ``raw`` is the error body as the
    server sent it (``{}`` for an error of the client's own).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "",
        status: int = 0,
        field: str = "",
        holder: str = "",
        remaining: Optional[float] = None,
        leader: str = "",
        kind: str = "",
        permits: int = 0,
        compact_revision: str = "",
        key: str = "",
        quota: str = "",
        raw: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.field = field
        self.holder = holder
        self.remaining = remaining
        self.leader = leader
        self.kind = kind
        self.permits = permits
        self.compact_revision = compact_revision
        self.key = key
        self.quota = quota
        self.raw: Dict[str, Any] = dict(raw or {})

    def __str__(self) -> str:
        return self.message


class InvalidError(FencelockError):
    """400 ``invalid_argument``, or refused by the client before sending: an
    argument is missing or out of range (``field`` names it, as the
    Python call spells it: ``"ttl"``, ``"wait"``, ``"mode"``, ``"ca"``...)."""


class HeldError(FencelockError):
    """409 ``held``: another holder has a live lease, or a wait elapsed.

    ``holder`` names who holds the key and ``remaining`` how many seconds
    its lease has left (when the server said); the message says both.
    """


class NotHeldError(FencelockError):
    """409 ``not_held``: (holder, token) is not the key's live grant."""


class NotFoundError(FencelockError):
    """404 ``not_found``: no live lease on the key (or no such route)."""


class UnavailableError(FencelockError):
    """503: shutting down, no quorum, not ready, or no node answered as leader."""


class UnreachableError(UnavailableError):
    """No address answered at all (connection refused, timed out)."""


class TLSMismatchError(UnreachableError):
    """The server speaks TLS and the client did not (or the reverse), or the
    client's TLS settings do not fit the server's.

    The message names the address and what to pass: ``ca=`` (or
    ``$FENCELOCK_CLIENT_CA``, or an ``https://`` address) for a server
    that speaks TLS; an ``http://`` address for one that does not;
    ``cert=`` and ``key=`` for a server that asks for a client
    certificate; ``ca=`` for a server whose certificate the client's CA
    did not sign. It is raised at once, without trying the other
    addresses: retrying cannot cure a setting.
    """


class InternalError(FencelockError):
    """500 and other server-side failures; not retried."""


class NoSpaceError(FencelockError):
    """507 ``no_space``: the server could not write its log for lack of disk space.

    Not a bug of the server, and nothing was written: the same call may
    succeed once a leader with room is elected, or once the operator frees
    space. A keep-alive goes on trying other nodes, as for
    :class:`UnavailableError`.
    """


class UnauthenticatedError(FencelockError):
    """401 ``unauthenticated``: ACLs are on and the call has no known credential."""


class PermissionDeniedError(FencelockError):
    """403 ``permission_denied``: the caller's policies do not allow the call."""


class TooManyWaitersError(FencelockError):
    """429 ``too_many_waiters``: the key's wait queue is full; back off."""


class KindMismatchError(FencelockError):
    """409 ``kind_mismatch``: the key exists as another kind (``kind``), or as a
    semaphore of another number of ``permits``; nothing changed."""


class NoSessionError(FencelockError):
    """404 ``no_session``: the session is not alive for this holder (expired,
    closed, or another holder's)."""


class TooManySessionsError(FencelockError):
    """429 ``too_many_sessions``: a session limit was reached; nothing changed."""


class LockDelayError(FencelockError):
    """409 ``lock_delay``: the key is in its lock-delay after a lease expired;
    ``remaining`` says for how many seconds more."""


class CompactedError(FencelockError):
    """410 ``compacted``: a watch asked for a revision older than the server's
    history; ``compact_revision`` is the oldest it accepts. Resync with
    :meth:`~fencelock.Client.watch_list` and watch after its revision."""


class TooManyWatchersError(FencelockError):
    """429 ``too_many_watchers``: the node, or this caller, has as many watches
    open as it allows."""


class LeaseLostError(FencelockError):
    """A :class:`~fencelock.Lease` could not confirm it still holds its key.

    ``cause`` says why in one word, as the lease's ``cause`` does:
    ``"expired"`` (no extension confirmed in time, nothing failing: the
    process was paused, say), ``"unreachable"`` or ``"unavailable"`` (the
    extensions that were tried failed so), ``"not_held"`` (the server had
    ended the lease), another code the server refused with, or
    ``"released"`` for a lease its holder released. ``reason`` says it in
    a sentence.
    """

    def __init__(self, message: str, *, reason: str = "", cause: str = "", code: str = "",
                 key: str = "") -> None:
        super().__init__(message, code=code, key=key)
        self.reason = reason
        self.cause = cause


class SessionLostError(LeaseLostError):
    """A :class:`~fencelock.Session` could not confirm it is alive, or was closed.

    It is a :class:`LeaseLostError` too: every lock under the session is
    lost with it.
    """


class StaleTokenError(FencelockError):
    """:meth:`~fencelock.Fence.admit` refused a token older than one already admitted."""


_BY_CODE = {
    "invalid_argument": InvalidError,
    "held": HeldError,
    "not_held": NotHeldError,
    "not_found": NotFoundError,
    "unavailable": UnavailableError,
    "not_leader": UnavailableError,
    "too_many_open_files": UnavailableError,
    "too_many_connections": UnavailableError,
    "removed": UnavailableError,
    "internal": InternalError,
    "no_space": NoSpaceError,
    "unauthenticated": UnauthenticatedError,
    "permission_denied": PermissionDeniedError,
    "too_many_waiters": TooManyWaitersError,
    "kind_mismatch": KindMismatchError,
    "no_session": NoSessionError,
    "too_many_sessions": TooManySessionsError,
    "lock_delay": LockDelayError,
    "compacted": CompactedError,
    "too_many_watchers": TooManyWatchersError,
}


def error_for(status: int, body: Dict[str, Any], key: str = "") -> FencelockError:
    """The exception for an error answer: by its code, else by its HTTP status.

    Times become seconds and wire fields the Python arguments they come
    from, in the attributes and in the message; ``raw`` keeps the body.
    """
    code = str(body.get("code", ""))
    cls = _BY_CODE.get(code)
    if cls is None:
        if status in (502, 503, 504):
            cls = UnavailableError
        elif status == 400:
            cls = InvalidError
        elif status == 404:
            cls = NotFoundError
        elif status >= 500:
            cls = InternalError
        else:
            cls = FencelockError
    rem = body.get("remaining_ms")
    remaining = int(rem) / 1000 if rem is not None else None
    holder = str(body.get("holder", ""))
    wire_field = str(body.get("field", ""))
    field = ARGUMENT.get(wire_field, wire_field)
    message = in_seconds(str(body.get("error", "HTTP %d" % status)))
    if field:
        message = "%s (argument %s=)" % (message, field)
    if code == "held" and holder:
        by = "held by %s%s" % (holder, " for %.3gs more" % remaining if remaining is not None else "")
        if "held by another holder" in message:
            message = message.replace("held by another holder", by, 1)
        else:
            message = "%s (%s)" % (message, by)
        if key and message.startswith("held by"):
            message = "%r is %s" % (key, message)
    if not message.startswith("fencelock: "):
        message = "fencelock: " + message
    return cls(
        message,
        code=code,
        status=status,
        field=field,
        holder=holder,
        remaining=remaining,
        leader=str(body.get("leader", "")),
        kind=str(body.get("kind", "")),
        permits=int(body.get("permits", 0) or 0),
        compact_revision=str(body.get("compact_revision", "")),
        key=key,
        quota=str(body.get("quota", "")),
        raw=body,
    )


# The Python argument each wire field of a request comes from.
ARGUMENT = {
    "ttl_ms": "ttl",
    "wait_ms": "wait",
    "lock_delay_ms": "lock_delay",
    "id": "session",
    "leases": "leases",
}

_MS_RANGE = re.compile(r"\b(\w+)_ms must be between (\d+) and (\d+)")
_MS = re.compile(r"\b(\d+) ?ms\b")


def in_seconds(message: str) -> str:
    """A server message with its milliseconds said in seconds, and its
    ``*_ms`` fields named as the Python arguments.

    >>> in_seconds("ttl_ms must be between 100 and 86400000")
    'ttl must be between 0.1s and 86400s'
    >>> in_seconds("granted to nobody for 1994 ms more")
    'granted to nobody for 1.994s more'
    """
    message = _MS_RANGE.sub(lambda m: "%s must be between %gs and %gs" % (
        ARGUMENT.get(m.group(1) + "_ms", m.group(1)), int(m.group(2)) / 1000, int(m.group(3)) / 1000), message)
    return _MS.sub(lambda m: "%gs" % (int(m.group(1)) / 1000), message)
