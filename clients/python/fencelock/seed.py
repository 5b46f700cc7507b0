"""The course's exercise (``DistributedLock``) on top of a real fencelock server.

The exercise's calls keep their names and meanings: ``acquire`` returns a
new, increasing fencing token or None, ``release`` only releases the
caller's live lock, ``is_valid_token`` says whether a token is the key's
current one. One difference: the exercise's ``now`` is caller-supplied,
while a server keeps its own (cluster) time, so ``now`` is not a
parameter here and ``ttl`` is in seconds of that time. Tokens come from
the server: they increase across every key it manages and the first one a
fresh server issues is 1, as the exercise asks.
"""

from __future__ import annotations

from typing import Optional

from .client import Client
from .errors import HeldError


class DistributedLock:
    """The seed's ``DistributedLock``, backed by ``client`` (default: a :class:`Client` of ``$FENCELOCK_ADDR``)."""

    def __init__(self, client: Optional[Client] = None) -> None:
        self.client = client if client is not None else Client()

    def acquire(self, key: str, holder_id: str, ttl: float) -> Optional[int]:
        """A NEW token if ``key`` is free, expired, or already ``holder_id``'s (a renewal); else None."""
        try:
            return self.client.acquire(key, holder_id, ttl, wait=0).token
        except HeldError:
            return None

    def release(self, key: str, holder_id: str) -> bool:
        """Release ``key`` only if ``holder_id`` holds it live; otherwise a no-op. True if released."""
        return self.client.release(key, holder_id)

    def is_valid_token(self, key: str, token: int) -> bool:
        """Whether ``token`` is ``key``'s current token right now."""
        return self.client.check(key, token)
