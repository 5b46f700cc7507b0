"""Exceptions of the fencelock client, named after the Go client's sentinels.

Every answer that is not 2xx carries a ``code`` (docs/API.md); the client
raises the subclass of :class:`FencelockError` that the code maps to.
"""

from __future__ import annotations

from typing import Any, Dict, Optional


class FencelockError(Exception):
    """Base of every error the client raises.

    Attributes carry the server's error body when there was one: ``code``
    (``"held"``, ``"not_held"``, ...), ``status`` (HTTP status), ``field``
    (for ``invalid_argument``), ``holder`` and ``remaining_ms`` (for
    ``held`` and ``lock_delay``), ``leader`` (for ``not_leader``), ``kind``
    and ``permits`` (for ``kind_mismatch``) and ``compact_revision`` (for
    ``compacted``, as text: ``"INDEX.SEQ"``).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "",
        status: int = 0,
        field: str = "",
        holder: str = "",
        remaining_ms: Optional[int] = None,
        leader: str = "",
        kind: str = "",
        permits: int = 0,
        compact_revision: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.field = field
        self.holder = holder
        self.remaining_ms = remaining_ms
        self.leader = leader
        self.kind = kind
        self.permits = permits
        self.compact_revision = compact_revision

    def __str__(self) -> str:
        return self.message


class InvalidError(FencelockError):
    """400 ``invalid_argument``: a field is missing or out of range (``field`` names it)."""


class HeldError(FencelockError):
    """409 ``held``: another holder has a live lease, or a wait elapsed."""


class NotHeldError(FencelockError):
    """409 ``not_held``: (holder, token) is not the key's live grant."""


class NotFoundError(FencelockError):
    """404 ``not_found``: no live lease on the key (or no such route)."""


class UnavailableError(FencelockError):
    """503: shutting down, no quorum, not ready, or no node answered as leader."""


class UnreachableError(UnavailableError):
    """No address answered at all (connection refused, timed out)."""


class TLSMismatchError(UnreachableError):
    """The server speaks TLS and the client did not (or the reverse).

    The message names the address and what to pass: ``ca=`` (or
    ``$FENCELOCK_CLIENT_CA``, or an ``https://`` address) for a server
    that speaks TLS; an ``http://`` address for one that does not. It is
    raised at once, without trying the other addresses: retrying cannot
    cure a setting.
    """


class InternalError(FencelockError):
    """500/507 and other server-side failures; not retried."""


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
    ``remaining_ms`` says for how long."""


class CompactedError(FencelockError):
    """410 ``compacted``: a watch asked for a revision older than the server's
    history; ``compact_revision`` is the oldest it accepts. Resync with
    :meth:`~fencelock.Client.watch_list` and watch after its revision."""


class TooManyWatchersError(FencelockError):
    """429 ``too_many_watchers``: the node, or this caller, has as many watches
    open as it allows."""


class LeaseLostError(FencelockError):
    """A :class:`~fencelock.Lease` could not confirm it still holds its key.

    ``reason`` says why (the same text as the lease's ``reason``).
    """

    def __init__(self, message: str, *, reason: str = "", code: str = "") -> None:
        super().__init__(message, code=code)
        self.reason = reason


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
    "internal": InternalError,
    "no_space": InternalError,
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


def error_for(status: int, body: Dict[str, Any]) -> FencelockError:
    """The exception for an error answer: by its code, else by its HTTP status."""
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
    return cls(
        str(body.get("error", "HTTP %d" % status)),
        code=code,
        status=status,
        field=str(body.get("field", "")),
        holder=str(body.get("holder", "")),
        remaining_ms=int(rem) if rem is not None else None,
        leader=str(body.get("leader", "")),
        kind=str(body.get("kind", "")),
        permits=int(body.get("permits", 0) or 0),
        compact_revision=str(body.get("compact_revision", "")),
    )
