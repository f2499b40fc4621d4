"""Background preparation of batches: one thread keeps a few batches ready while the caller trains."""

from __future__ import annotations

import itertools
import threading
from collections import deque
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


class Handoff(Generic[T]):
    """The results a thread has ready for its consumer, at most ``depth``. Once they fill it, the thread
    refills only when the consumer has taken them all: it wakes once per ``depth`` results rather than
    once per result, and every time a thread wakes and takes the GIL back, a consumer that runs Python
    meanwhile (an eager learner) waits for it (``benchmarks/bench_feed_gil.py``, 2 cores, batches of 32,
    depth 2: such a learner kept 0.835-0.844 of its rate with ``batches(reuse=True)`` before and
    0.867-0.870 since, Pong and MsPacman, two runs of 7 rounds each, alternating)."""

    def __init__(self, depth: int) -> None:
        self._depth = depth
        self._items: deque[T] = deque()
        self._refilling = True  # False from the put that fills the results to the get that empties them
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)  # the consumer waits for a result
        self._drained = threading.Condition(self._lock)  # the thread waits for the consumer to take them all

    def put(self, item: T) -> None:
        """Hand over a result (the thread's; never blocks: ``wait_for_room`` comes first)."""
        with self._lock:
            self._items.append(item)
            if len(self._items) >= self._depth:
                self._refilling = False
            self._ready.notify()

    def wait_for_room(self, timeout: float) -> bool:
        """The thread's turn to produce: at once while it fills the results, else once the consumer has
        taken them all; False when ``timeout`` seconds passed first."""
        with self._lock:
            return self._drained.wait_for(lambda: self._refilling, timeout)

    def get(self) -> T:
        """The next result, waiting for it."""
        with self._lock:
            while not self._items:
                self._ready.wait()
            item = self._items.popleft()
            if not self._items:
                self._refilling = True
                self._drained.notify()
            return item

    def clear(self) -> None:
        """Drop the results ready (the consumer stops), letting the thread go on to see its stop."""
        with self._lock:
            self._items.clear()
            self._refilling = True
            self._drained.notify()


class Prefetcher(Generic[T]):
    """Calls ``produce`` repeatedly in a daemon thread and yields the results in order.

    At most ``depth`` results wait (``Handoff``: refilled once all are taken). An exception in the
    thread ends it and is raised by the next ``__next__``. ``close()`` stops the thread; so do ``with``
    and garbage collection.
    """

    def __init__(self, produce: Callable[[], T], *, depth: int) -> None:
        self._results: Handoff[tuple[bool, object]] = Handoff(depth)
        self._stop = threading.Event()
        # The thread refers to the results and the event only, never to self, so garbage collection of
        # an abandoned iterator still runs __del__ and stops the thread.
        self._thread = threading.Thread(
            target=_run, args=(produce, self._results, self._stop), name="mmreplay-prefetch", daemon=True
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
        ok, item = self._results.get()
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
            self._results.clear()
            self._thread.join(_STOP_POLL_SECONDS)

    def __enter__(self) -> Prefetcher[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        self._stop.set()


def _run(produce: Callable[[], object], results: Handoff[tuple[bool, object]], stop: threading.Event) -> None:
    while not stop.is_set():
        if not results.wait_for_room(_STOP_POLL_SECONDS) or stop.is_set():
            continue  # no room yet, or stopped while waiting for it (close() empties the results)
        try:
            item: tuple[bool, object] = (True, produce())
        except BaseException as error:  # handed to the consumer, which raises it
            item = (False, error)
        results.put(item)
        if not item[0]:
            return
