"""Watches (docs/PRIMITIVES.md, "Watches"): the changes on one key or a
prefix, as an iterator or through a callback, resumable by revision.

A :class:`Watch` long-polls ``GET /v1/watch`` and yields each event once,
in revision order. After a failed call, or at another node, it goes on
after the last revision it has passed, so nothing is missed and nothing
repeated (revisions are the same on every node). It ends with
:class:`CompactedError` when the server's history no longer reaches back
to where it is; resync with :meth:`Client.watch_list`.
"""

from __future__ import annotations

import collections
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Callable, Deque, Iterator, Optional, Type, Union

from ._wire import Event, Revision, jitter, watch_req
from .client import _Hold
from .errors import CompactedError, FencelockError, UnavailableError

if TYPE_CHECKING:
    from .client import Client


class Watch:
    """A running watch; iterate it, or :meth:`start` it with a callback.

    >>> with client.watch("jobs/", after="0") as w:                   # doctest: +SKIP
    ...     for ev in w:
    ...         print(ev.revision, ev.type, ev.key, ev.holder, ev.token)
    ...         if ev.type == "released":
    ...             break
    >>> resume_at = w.revision                                        # doctest: +SKIP
    >>> w = client.watch("jobs/", after=resume_at).start(print)      # doctest: +SKIP
    >>> w.close()                                                     # doctest: +SKIP

    Iteration ends (StopIteration) after :meth:`close`; a refusal that
    retrying cannot cure (``CompactedError``, ``PermissionDeniedError``,
    ...) is raised from the iteration and kept in ``error``.
    """

    def __init__(
        self,
        client: "Client",
        prefix: str = "",
        *,
        key: Optional[str] = None,
        after: Union[Revision, str, None] = None,
        wait: float = 30.0,
        limit: int = 0,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.key = key
        self.wait = min(wait, 300.0) if wait > 0 else 30.0
        self.limit = limit
        self.error: Optional[FencelockError] = None
        self._started = after is not None
        self._after = Revision.parse(after) if after is not None else Revision(0, 0)
        self._rev = self._after  # what has been handed out (or passed over)
        self._tail: Optional[Revision] = None  # the page's revision, reached once the buffer drains
        self._buf: Deque[Event] = collections.deque()
        self._hold = _Hold()
        self._closed = threading.Event()
        self._mu = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    @property
    def revision(self) -> Revision:
        """The revision reached: the last event handed out, or past it when the
        server reported changes on other keys. Watching after it misses nothing."""
        with self._mu:
            return self._rev

    def close(self) -> None:
        """End the watch (from any thread, or a callback) and wait for its thread, if started."""
        self._closed.set()
        self._hold.abort("watch closed", close=True)
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        backoff = 0.05
        while True:
            with self._mu:
                if self._buf:
                    ev = self._buf.popleft()
                    self._rev = ev.revision
                    if not self._buf and self._tail is not None:
                        self._rev = max(self._rev, self._tail)
                        self._tail = None
                    return ev
            if self._closed.is_set():
                raise StopIteration
            req = watch_req(self.prefix, self.key, self._after if self._started else None, self.wait, self.limit)
            try:
                events, rev, _ = self.client._run(req, hold=self._hold)
            except FencelockError as e:
                if self._closed.is_set():
                    raise StopIteration
                if isinstance(e, UnavailableError) and not isinstance(e, CompactedError):
                    # Every address failed for a whole retry budget: a watch has
                    # no deadline of its own, so it waits and goes on after the
                    # same revision.
                    if self._closed.wait(jitter(backoff)):
                        raise StopIteration
                    backoff = min(2 * backoff, 1.0)
                    continue
                if isinstance(e, CompactedError):
                    e.message = "fencelock: watch after %s: compacted: the oldest revision kept is %s" % (
                        self._after, e.compact_revision or "?")
                self.error = e
                self._closed.set()
                raise e
            backoff = 0.05
            with self._mu:
                for ev in events:
                    if self._started and ev.revision <= self._after:
                        continue  # never twice, whatever a server answers
                    self._buf.append(ev)
                    self._after = ev.revision
                if not self._started or rev > self._after:
                    self._after = rev
                    if self._buf:
                        self._tail = rev
                    else:
                        self._rev = rev
                self._started = True

    def start(
        self,
        callback: Callable[[Event], None],
        *,
        on_error: Optional[Callable[[FencelockError], None]] = None,
    ) -> "Watch":
        """Call ``callback(event)`` for each event on a thread of its own; returns self.

        >>> w = client.watch("jobs/").start(lambda ev: print(ev.type, ev.key))  # doctest: +SKIP

        ``on_error(err)`` is called if the watch ends with an error (also in
        ``error``); :meth:`close` stops it and waits for the thread.
        """

        def run() -> None:
            try:
                for ev in self:
                    callback(ev)
            except FencelockError as e:
                if on_error is not None:
                    on_error(e)

        self._thread = threading.Thread(target=run, name="fencelock-watch", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: Optional[float] = None) -> bool:
        """Wait for a started watch's thread to end; True if it has."""
        t = self._thread
        if t is None:
            return True
        t.join(timeout)
        return not t.is_alive()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()
