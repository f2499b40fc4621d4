"""How a shard's two threads share its store: one lock, and a call from the actor's thread goes first.

A shard (``ReplayShard``) has two threads. The actor's own thread runs every Ray call in the order Ray
delivers them (the actor stays single-threaded to Ray, so a caller's calls keep their order); an ``add``
there only queues its send. The shard's write thread writes the queued sends into the store, one send at
a time. Both take the one lock of ``StoreTurns`` around every use of the store and of the shard's counts.

Python's lock is not fair: a thread that releases it and asks again at once usually gets it back. So the
write thread waits, before each write, until no call of the actor's thread is waiting for the lock: a draw
that arrives while a send is being written is served next, after that one write and before the next.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class StoreTurns:
    """The lock over one shard's store and counts, taken by a call first, by the write thread after.

    Only one thread may take ``call`` (the actor's), and only one ``write`` (the shard's write thread); a
    call may be taken again inside a call.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()  # reentrant: a call may call another (``sample`` asks ``info``)
        self._no_call_waiting = threading.Event()
        self._no_call_waiting.set()

    @contextmanager
    def call(self) -> Iterator[None]:
        """Hold the lock for a call of the actor's thread; the write thread's next write waits for it.

        Yields:
            Nothing: the lock is held inside the block.
        """
        self._no_call_waiting.clear()
        try:
            with self.lock:
                self._no_call_waiting.set()
                yield
        finally:
            self._no_call_waiting.set()

    @contextmanager
    def write(self) -> Iterator[None]:
        """Hold the lock for one write of the write thread, once no call waits for it.

        Yields:
            Nothing: the lock is held inside the block.
        """
        self._no_call_waiting.wait()
        with self.lock:
            yield
