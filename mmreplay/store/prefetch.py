"""Background preparation of batches: one thread keeps a few batches ready while the caller trains."""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

_STOP_POLL_SECONDS = 0.05


def recycling(produce: Callable[[T | None], T], *, buffers: int) -> Callable[[], T]:
    """Calls ``produce(out)``, where ``out`` is the result of ``buffers`` calls before (None for the
    first ``buffers`` calls): ``produce`` refills its results in place, ``buffers`` of them in turn."""
    results: dict[int, T] = {}
    calls = itertools.count()

    def produce_next() -> T:
        turn = next(calls) % buffers
        results[turn] = result = produce(results.get(turn))
        return result

    return produce_next


class Prefetcher(Generic[T]):
    """Calls ``produce`` repeatedly in a daemon thread and yields the results in order.

    At most ``depth`` results wait in the queue. An exception in the thread ends it and is raised by
    the next ``__next__``. ``close()`` stops the thread; so do ``with`` and garbage collection.
    """

    def __init__(self, produce: Callable[[], T], *, depth: int) -> None:
        self._queue: queue.Queue[tuple[bool, object]] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        # The thread refers to the queue and the event only, never to self, so garbage collection of
        # an abandoned iterator still runs __del__ and stops the thread.
        self._thread = threading.Thread(
            target=_run, args=(produce, self._queue, self._stop), name="mmreplay-prefetch", daemon=True
        )
        self._thread.start()
        self._finished = False
        self._stopped_by: BaseException | None = None  # what ``close(reason)`` left for the next ``next()``

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        if self._finished:
            if self._stopped_by is not None:
                raise self._stopped_by
            raise StopIteration
        ok, item = self._queue.get()
        if not ok:
            self.close()
            raise item  # type: ignore[misc]
        return item  # type: ignore[return-value]

    def close(self, reason: BaseException | None = None) -> None:
        """Stop the background thread and drop the batches it prepared; ``reason``: raised by every later
        ``next()`` (a ``clear()`` of the store), else those end the iteration."""
        if reason is not None:
            self._stopped_by = reason
        self._finished = True
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(_STOP_POLL_SECONDS)

    def __enter__(self) -> Prefetcher[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        self._stop.set()


def _run(produce: Callable[[], object], results: queue.Queue[tuple[bool, object]], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            item: tuple[bool, object] = (True, produce())
        except BaseException as error:  # handed to the consumer, which raises it
            item = (False, error)
        while not stop.is_set():
            try:
                results.put(item, timeout=_STOP_POLL_SECONDS)
                break
            except queue.Full:
                continue
        if not item[0]:
            return
