"""Leader election on one lock key (docs/PRIMITIVES.md, "Leader election").

Candidates queue on the key in the server's FIFO, so when the leader
resigns or is lost exactly the next candidate is elected (no herd), and
every leadership is a grant with a new fencing token, larger than any
before it. The leader sends that token with every write; a resource that
checks tokens refuses a deposed leader once its successor has written.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Callable, Iterator, Optional, Type

from ._wire import DEFAULT_TTL, Leadership, check_ttl
from .client import Client
from .errors import CompactedError, FencelockError, InvalidError
from .lease import Lease
from .watch import Watch

__all__ = ["Election", "Leader", "Observer", "Leadership"]


class Leader(Lease):
    """An elected candidate: a :class:`Lease` on the election's key.

    ``token`` is the fencing token of this leadership; ``lost_event`` is
    set when leadership ends, at the latest 0.89×TTL after the last
    confirmed extension was sent, which leaves TTL/10 to stop (``stop_by()``)
    before another candidate can be elected. :meth:`resign` hands over to
    the next candidate in the same committed step.
    """

    @property
    def name(self) -> str:
        """The election's key."""
        return self.key

    @property
    def candidate(self) -> str:
        """The leader's name."""
        return self.holder

    def resign(self) -> None:
        """Give leadership up (quietly, as ``with`` does on exit).

        >>> leader.resign()                                              # doctest: +SKIP
        """
        self.close()


class Election:
    """The election ``name`` (a lock key) on ``client``.

    >>> e = Election(client, "elections/billing", ttl=10)              # doctest: +SKIP
    >>> with e.campaign("worker-7") as leader:   # waits until elected
    ...     for job in jobs:
    ...         leader.ensure()                   # LeaseLostError: no longer the leader
    ...         db.write(job, leader.token)       # the fence refuses a deposed leader's token
    >>> e.leader()                                # who leads now
    Leadership(candidate='worker-8', token=12, revision=Revision('40.2'), at=0.0)
    >>> for ld in e.observe():                    # now, then every change
    ...     print(ld.candidate or "(nobody)", ld.token)
    """

    def __init__(self, client: Client, name: str, *, ttl: float = DEFAULT_TTL, allow_long: bool = False) -> None:
        self.client = client
        self.name = name
        self.ttl = check_ttl(ttl, allow_long=allow_long)
        self.allow_long = allow_long

    def campaign(
        self, candidate: str, *, wait: Optional[float] = None, on_lost: Optional[Callable[[str], None]] = None
    ) -> Leader:
        """Queue ``candidate`` and return once it is elected (``wait`` seconds at most,
        None: as long as it takes; :class:`HeldError` after). A candidate that gives
        up leaves the queue; one already leading is re-elected under a new token."""
        if not candidate:
            raise InvalidError("fencelock: a candidate needs a name", code="invalid_argument", field="holder")
        leader = Leader(self.client, self.name, candidate, self.ttl, wait=wait, allow_long=self.allow_long,
                        on_lost=on_lost)
        leader.acquire()
        return leader

    def leader(self) -> Leadership:
        """Who leads now (``candidate`` "" when nobody does), and the revision it was read at."""
        locks, rev = self.client.watch_list(key=self.name)
        if len(locks) == 1:
            return Leadership(locks[0].holder, locks[0].token, rev)
        return Leadership("", 0, rev)

    def observe(self) -> "Observer":
        """An iterator of :class:`Leadership`: now, then every change (see :class:`Observer`)."""
        return Observer(self)


class Observer:
    """Reports an election's leader as it changes; built on a :class:`Watch`.

    A hand-off shows as the old leader leaving (``candidate`` "") and the
    new one arriving at the same revision index. It rides out faults and
    failovers, and reads the present again when the history was
    compacted. Iterate it, or :meth:`start` it with a callback;
    :meth:`close` ends it.
    """

    def __init__(self, election: Election) -> None:
        self.election = election
        self.error: Optional[FencelockError] = None
        self._closed = threading.Event()
        self._watch: Optional[Watch] = None
        self._mu = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._gen: Optional[Iterator[Leadership]] = None

    def __iter__(self) -> Iterator[Leadership]:
        return self

    def __next__(self) -> Leadership:
        if self._gen is None:
            self._gen = self._run()
        return next(self._gen)

    def _run(self) -> Iterator[Leadership]:
        e = self.election
        while not self._closed.is_set():
            try:
                now = e.leader()
            except FencelockError as err:
                if self._closed.is_set():
                    return
                self.error = err
                raise
            yield now
            w = e.client.watch(key=e.name, after=now.revision)
            with self._mu:
                self._watch = w
            if self._closed.is_set():
                w.close()
                return
            try:
                for ev in w:
                    if ev.type == "granted":
                        yield Leadership(ev.holder, ev.token, ev.revision, ev.at)
                    elif ev.type in ("released", "expired"):
                        yield Leadership("", 0, ev.revision, ev.at)
            except CompactedError:
                continue  # read the present again
            except FencelockError as err:
                self.error = err
                raise
            finally:
                w.close()

    def close(self) -> None:
        """Stop observing (from any thread) and wait for a started observer's thread."""
        self._closed.set()
        with self._mu:
            w = self._watch
        if w is not None:
            w.close()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()

    def start(self, callback: Callable[[Leadership], None]) -> "Observer":
        """Call ``callback(leadership)`` for each change on a thread of its own; returns self."""

        def run() -> None:
            try:
                for ld in self:
                    callback(ld)
            except FencelockError:
                pass  # kept in self.error

        self._thread = threading.Thread(target=run, name="fencelock-observe", daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> "Observer":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

