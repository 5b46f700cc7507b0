"""fencelock: a Python client of the fencelock lock service (standard library only).

- :class:`Client`: plain calls (acquire, renew, extend, release, check, get, list) with failover.
- :class:`Lease`: a context manager that keeps a lock alive and says when it was lost.
- :class:`Fence`: the resource side of fencing tokens.
- :class:`DistributedLock`: the course exercise's calls on a real server.
"""

from .client import DEFAULT_ADDR, Client, Grant
from .errors import (
    FencelockError,
    HeldError,
    InternalError,
    InvalidError,
    LeaseLostError,
    NotFoundError,
    NotHeldError,
    PermissionDeniedError,
    StaleTokenError,
    TooManyWaitersError,
    UnauthenticatedError,
    UnavailableError,
    UnreachableError,
)
from .fence import Fence
from .lease import Lease
from .seed import DistributedLock

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_ADDR",
    "Client",
    "DistributedLock",
    "Fence",
    "FencelockError",
    "Grant",
    "HeldError",
    "InternalError",
    "InvalidError",
    "Lease",
    "LeaseLostError",
    "NotFoundError",
    "NotHeldError",
    "PermissionDeniedError",
    "StaleTokenError",
    "TooManyWaitersError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnreachableError",
]
