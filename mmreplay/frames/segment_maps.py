"""A frame ring's read maps of its segment files: each segment mapped once, read-only, and the list of
views that one batch's decode takes kept while its segments stay mapped. The ring (``frames.ring``)
writes segments through descriptors of its own and asks this for views to decode from."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from mmreplay.disk.header import SEGMENTS_DIR, segment_name
from mmreplay.disk.store_directory import FileLocation, StoreDirectory, open_regular
from mmreplay.errors import CorruptStoreError
from mmreplay.frames.page_cache import RANDOM, READ_AROUND, ReadAdvice, read_advice
from mmreplay.process_memory import MemoryProbe, UsableMemory


class MissingSegmentError(CorruptStoreError):
    """A segment file that a frame needs does not exist (deleted by the writer, or lost)."""

    def __init__(self, message: str, *, frame_step: int | None = None) -> None:
        super().__init__(message)
        self.frame_step = frame_step


class SegmentMaps:
    """The mapped segments of one ring, by segment number, and the views of the last batch (``cached``)."""

    def __init__(
        self, directory: StoreDirectory | Path, segment_bytes: int, *, table_path: Callable[[], FileLocation]
    ) -> None:
        """``table_path``: the ring's frame table now (its generation changes), named where a segment a
        frame needs is missing or truncated."""
        self.directory = directory
        self.segment_bytes = segment_bytes
        self._table_path = table_path
        self._maps: dict[int, tuple[mmap.mmap, memoryview]] = {}
        self.cached: tuple[int, list[memoryview]] | None = None  # (first segment, views) of the last batch
        self.policy = READ_AROUND  # the advice the mapped segments have (the kernel's default until one says)
        self._memory: MemoryProbe | None = None  # made at the first advice: the process's cgroups, found once

    def path(self, segment: int) -> FileLocation:
        return self.directory / SEGMENTS_DIR / segment_name(segment)

    def view(self, segment: int, frame_step: int | None = None) -> memoryview:
        """The read-only view of a segment, mapped on first use (``MissingSegmentError`` naming the frame
        that needs it when the file is gone)."""
        mapped = self._maps.get(segment)
        if mapped is not None:
            return mapped[1]
        path = self.path(segment)
        needed_by = "" if frame_step is None else f" (frame {frame_step} is there, by {self._table_path()})"
        try:
            with os.fdopen(open_regular(path), "rb", buffering=0) as file:
                if os.fstat(file.fileno()).st_size < self.segment_bytes:
                    raise CorruptStoreError(f"{path}: segment file is truncated{needed_by}")
                mapping = mmap.mmap(file.fileno(), self.segment_bytes, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise MissingSegmentError(f"{path}: segment file is missing{needed_by}", frame_step=frame_step) from None
        view = memoryview(mapping)
        self._maps[segment] = (mapping, view)
        self._advise(self.advice(), segment)
        return view

    def covering(
        self, first: int, last: int, segments: npt.NDArray[np.int64], frame_steps: npt.NDArray[np.int64]
    ) -> tuple[int, list[memoryview]]:
        """``(base, views)`` where ``views[k - base]`` is the view of segment k, for each k in ``first..last``.

        The list is kept (and widened to cover the last one kept, when that leaves no hole) while its
        segments stay mapped. A segment in the range that no frame of the batch needs and that is not
        mapped (deleted, or not looked at yet) holds an empty view, and the list is then not kept.
        """
        if self.cached is not None:
            base, views = self.cached
            if base <= first and last < base + len(views):
                return self.cached
        needed = set(segments.tolist())
        if self.cached is not None:
            low, high = min(first, base), max(last, base + len(views) - 1)
            if all(k in self._maps or k in needed for k in range(low, high + 1)):
                first, last = low, high
        views = []
        holes = False
        for segment in range(first, last + 1):
            mapped = self._maps.get(segment)
            if mapped is not None:
                views.append(mapped[1])
            elif segment in needed:
                frame_step = int(frame_steps[np.argmax(segments == segment)])
                views.append(self.view(segment, frame_step))
            else:
                views.append(memoryview(b""))
                holes = True
        if not holes:
            self.cached = (first, views)
        return first, views

    def unmap(self, segment: int) -> None:
        """Close a segment's map. A map that something still exports (a memoryview kept alive elsewhere)
        cannot be closed now: it is dropped, and unmapped when its last user goes."""
        self.cached = None
        mapped = self._maps.pop(segment, None)
        if mapped is not None:
            try:
                mapped[1].release()
                mapped[0].close()
            except BufferError:
                pass

    def close(self) -> None:
        for segment in list(self._maps):
            self.unmap(segment)

    def advice(self) -> ReadAdvice:
        """The page-cache policy for the segment files as they are now (``page_cache.read_advice``),
        with the memory the process may use read again."""
        return read_advice(self._segment_files() * self.segment_bytes, self.usable_memory())

    def _segment_files(self) -> int:
        """How many segment files the store has now (the names listed, no file opened)."""
        if isinstance(self.directory, StoreDirectory):
            names = self.directory.names(SEGMENTS_DIR)
        else:
            names = os.listdir(self.directory / SEGMENTS_DIR)
        return sum(1 for name in names if name.endswith(".seg"))

    def usable_memory(self) -> UsableMemory:
        """The memory the process may use, read now (``process_memory.MemoryProbe``)."""
        if self._memory is None:
            self._memory = MemoryProbe()
        return self._memory.usable()

    def _advise(self, advice: ReadAdvice, segment: int) -> None:
        """Give a newly mapped segment the policy ``advice`` says; where the policy changed (the store
        grew, or the memory the process may use shrank or grew), every mapped segment gets it."""
        if advice.policy != self.policy:
            self.policy = advice.policy
            targets = list(self._maps.values())
        elif advice.random:
            targets = [self._maps[segment]]
        else:
            return
        flag = mmap.MADV_RANDOM if advice.policy == RANDOM else mmap.MADV_NORMAL
        for mapping, _ in targets:
            mapping.madvise(flag)
