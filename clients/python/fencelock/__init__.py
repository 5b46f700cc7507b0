"""fencelock: a Python client of the fencelock lock service (standard library only).

- :class:`Client`: plain calls (acquire, acquire_all, renew, extend,
  release, check, get, list, sessions, watch, ACLs) with failover, TLS and
  mutual TLS, bearer tokens, and kept connections (``with Client() as c``).
- :class:`Lease`: a context manager that keeps a lock alive and says when
  it was lost, and why; also a semaphore's permit (``permits=``) or a
  read/write hold (``mode=``).

Times are seconds everywhere, in arguments, answers and errors. Acquiring
waits its turn by default (``wait=None``); ``wait=0`` tries once.
- :class:`Session`: many locks, one keep-alive, lost together.
- :class:`Election`: campaign, observe, resign; the leader's fencing token.
- :class:`Watch`: the changes on a key or prefix, resumable by revision.
- :class:`Fence`, :class:`RWFence`, :func:`permit_resource`: the resource
  side of fencing tokens (exclusive, read/write, a semaphore's permits).
- :class:`DistributedLock`: the course exercise's calls on a real server.
- :mod:`fencelock.aio`: the client, leases, sessions and watches on asyncio.
"""

from ._wire import (
    DEFAULT_ADDR,
    DEFAULT_TTL,
    END_OF_ENTRY,
    FOREVER,
    Event,
    Mode,
    ExtendResult,
    Grant,
    Leadership,
    Revision,
    SessionInfo,
    WhoAmI,
    default_holder,
)
from .client import Client
from .election import Election, Leader, Observer
from .errors import (
    CompactedError,
    FencelockError,
    HeldError,
    InternalError,
    InvalidError,
    KindMismatchError,
    LeaseLostError,
    LockDelayError,
    NoSessionError,
    NoSpaceError,
    NotFoundError,
    NotHeldError,
    PermissionDeniedError,
    SessionLostError,
    StaleTokenError,
    TLSMismatchError,
    TooManySessionsError,
    TooManyWaitersError,
    TooManyWatchersError,
    UnauthenticatedError,
    UnavailableError,
    UnreachableError,
)
from .fence import Fence, RWFence, permit_resource
from .lease import Lease
from .seed import DistributedLock
from .session import Session, SessionLock
from .watch import Watch

__version__ = "0.2.0"

__all__ = [
    "DEFAULT_ADDR",
    "DEFAULT_TTL",
    "END_OF_ENTRY",
    "FOREVER",
    "Client",
    "Mode",
    "CompactedError",
    "DistributedLock",
    "Election",
    "Event",
    "ExtendResult",
    "Fence",
    "FencelockError",
    "Grant",
    "HeldError",
    "InternalError",
    "InvalidError",
    "KindMismatchError",
    "Leader",
    "Leadership",
    "Lease",
    "LeaseLostError",
    "LockDelayError",
    "NoSessionError",
    "NoSpaceError",
    "NotFoundError",
    "NotHeldError",
    "Observer",
    "RWFence",
    "PermissionDeniedError",
    "Revision",
    "Session",
    "SessionInfo",
    "SessionLock",
    "SessionLostError",
    "StaleTokenError",
    "TLSMismatchError",
    "TooManySessionsError",
    "TooManyWaitersError",
    "TooManyWatchersError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnreachableError",
    "Watch",
    "WhoAmI",
    "default_holder",
    "permit_resource",
]
