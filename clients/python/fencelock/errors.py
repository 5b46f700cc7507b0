"""Exceptions of the fencelock client, named after the Go client's sentinels.

Every answer that is not 2xx carries a ``code`` (docs/API.md); the client
raises the subclass of :class:`FencelockError` that the code maps to.
"""

from __future__ import annotations

from typing import Optional


class FencelockError(Exception):
    """Base of every error the client raises.

    Attributes carry the server's error body when there was one: ``code``
    (``"held"``, ``"not_held"``, ...), ``status`` (HTTP status), ``field``
    (for ``invalid_argument``), ``holder`` and ``remaining_ms`` (for
    ``held``) and ``leader`` (for ``not_leader``).
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
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.field = field
        self.holder = holder
        self.remaining_ms = remaining_ms
        self.leader = leader


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


class InternalError(FencelockError):
    """500/507 and other server-side failures; not retried."""


class UnauthenticatedError(FencelockError):
    """401 ``unauthenticated``: ACLs are on and the call has no known credential."""


class PermissionDeniedError(FencelockError):
    """403 ``permission_denied``: the caller's policies do not allow the call."""


class TooManyWaitersError(FencelockError):
    """429 ``too_many_waiters``: the key's wait queue is full; back off."""


class LeaseLostError(FencelockError):
    """A :class:`~fencelock.Lease` could not confirm it still holds its key."""


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
}


def error_for(status: int, body: dict) -> FencelockError:
    """The exception for an error answer: by its code, else by its HTTP status."""
    code = str(body.get("code", ""))
    cls = _BY_CODE.get(code)
    if cls is None:
        if status == 503:
            cls = UnavailableError
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
    )
