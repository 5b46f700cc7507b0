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
