"""A fence for resources written in Python: the resource side of fencing.

The lock service cannot stop a paused holder from acting; the resource
can, by refusing any token lower than one it has already admitted
(docs/FENCING.md). :class:`Fence` keeps the highest token per resource
in memory, for one process; a resource shared by several processes needs
the check where it stores its data (a durable fence).
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, Optional, TypeVar

from .errors import StaleTokenError

T = TypeVar("T")


class Fence:
    """Highest admitted token per resource; thread-safe.

    ``admit(resource, token, effect)`` runs ``effect()`` only if ``token``
    is at least the highest token admitted for ``resource`` so far, and
    records it. The check and the effect run under one lock, so a stale
    holder's effect can never run after a newer holder's was admitted.
    """

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._highest: Dict[str, int] = {}

    def admit(self, resource: str, token: int, effect: Optional[Callable[[], T]] = None) -> Optional[T]:
        """Run ``effect`` under ``token`` or raise :class:`StaleTokenError`.

        Equal tokens are admitted (the same grant, e.g. kept alive by
        extend). If ``effect`` raises, the token is still recorded: a newer
        holder was seen either way. Returns what ``effect`` returned.
        """
        if token <= 0:
            raise StaleTokenError("fencelock: token %d is not a fencing token" % token, code="stale_token")
        with self._mu:
            high = self._highest.get(resource, 0)
            if token < high:
                raise StaleTokenError(
                    "fencelock: token %d for %r is older than %d, already admitted" % (token, resource, high),
                    code="stale_token",
                )
            self._highest[resource] = token
            return effect() if effect is not None else None

    def highest(self, resource: str) -> int:
        """The highest token admitted for ``resource`` (0 if none)."""
        with self._mu:
            return self._highest.get(resource, 0)


def permit_resource(resource: str, slot: int) -> str:
    """The name under which to fence one permit (slot) of a semaphore.

    N holders of a semaphore are live at once, so one high-water mark for
    the resource would refuse all but the newest; within a slot, successive
    holders take increasing tokens, so a slot is exactly an exclusive lock:

    >>> fence.admit(permit_resource("pool/gpu", permit.slot), permit.token, run_job)  # doctest: +SKIP
    """
    return "%s#permit-%d" % (resource, slot)


class RWFence:
    """The fence of a resource guarded by a read/write lock; thread-safe.

    - a write is admitted iff its token is >= every token admitted on the
      resource, reads included; it becomes the last writer's token;
    - a read is admitted iff its token is >= the last writer's token; an
      admitted read raises the mark that writes are checked against.

    The check, the raised mark and the effect are atomic against every
    write of the resource: reads run together, a write runs alone, and a
    write waiting for reads holds back reads that arrive after it.

    >>> rw = RWFence()
    >>> rw.admit_write("docs/index", 6, lambda: "reindexed")
    'reindexed'
    >>> rw.admit_read("docs/index", 7, lambda: "read")
    'read'
    >>> rw.admit_write("docs/index", 6)
    Traceback (most recent call last):
    ...
    fencelock.errors.StaleTokenError: fencelock: write token 6 for 'docs/index' is older than 7, already admitted
    """

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._highest: Dict[str, int] = {}
        self._last_write: Dict[str, int] = {}
        self._readers: Dict[str, int] = {}
        self._writing: Dict[str, bool] = {}
        self._writers_waiting: Dict[str, int] = {}

    def admit_read(self, resource: str, token: int, effect: Optional[Callable[[], T]] = None) -> Optional[T]:
        """Run ``effect`` as a read under ``token`` or raise :class:`StaleTokenError`."""
        if token <= 0:
            raise StaleTokenError("fencelock: token %d is not a fencing token" % token, code="stale_token")
        with self._cv:
            while self._writing.get(resource) or self._writers_waiting.get(resource, 0):
                self._cv.wait()
            last = self._last_write.get(resource, 0)
            if token < last:
                raise StaleTokenError(
                    "fencelock: read token %d for %r is older than the last write's %d" % (token, resource, last),
                    code="stale_token")
            self._highest[resource] = max(self._highest.get(resource, 0), token)
            self._readers[resource] = self._readers.get(resource, 0) + 1
        try:
            return effect() if effect is not None else None
        finally:
            with self._cv:
                self._readers[resource] -= 1
                self._cv.notify_all()

    def admit_write(self, resource: str, token: int, effect: Optional[Callable[[], T]] = None) -> Optional[T]:
        """Run ``effect`` alone as a write under ``token`` or raise :class:`StaleTokenError`."""
        if token <= 0:
            raise StaleTokenError("fencelock: token %d is not a fencing token" % token, code="stale_token")
        with self._cv:
            self._writers_waiting[resource] = self._writers_waiting.get(resource, 0) + 1
            try:
                while self._writing.get(resource) or self._readers.get(resource, 0):
                    self._cv.wait()
            finally:
                self._writers_waiting[resource] -= 1
            high = self._highest.get(resource, 0)
            if token < high:
                self._cv.notify_all()
                raise StaleTokenError(
                    "fencelock: write token %d for %r is older than %d, already admitted" % (token, resource, high),
                    code="stale_token")
            self._highest[resource] = token
            self._last_write[resource] = token
            self._writing[resource] = True
        try:
            return effect() if effect is not None else None
        finally:
            with self._cv:
                self._writing[resource] = False
                self._cv.notify_all()

    def admit(self, resource: str, token: int, effect: Optional[Callable[[], T]] = None) -> Optional[T]:
        """:meth:`admit_write`: a caller that knows nothing of reads gets :class:`Fence`'s rule."""
        return self.admit_write(resource, token, effect)

    def marks(self, resource: str) -> "tuple[int, int]":
        """(highest token admitted, last write's token) for ``resource``."""
        with self._cv:
            return self._highest.get(resource, 0), self._last_write.get(resource, 0)
