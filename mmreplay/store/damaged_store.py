"""A damaged store opened for what is intact in it: its files scanned (``reading.damage_scan``) and its
intact transitions read, whatever else is damaged; what ``mmreplay verify`` and ``salvage`` read through.

``ReplayStore.open`` refuses a store whose damage it meets (``DamagedStoreError``, naming the damage and
the way out); this object never reads a damaged row or frame: it reads only the transitions the scan found
intact, and so opens any store whose header it can read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import numpy as np
import numpy.typing as npt

from mmreplay.batch import Batch
from mmreplay.disk import header
from mmreplay.disk.files import file_signature
from mmreplay.errors import CorruptStoreError, DamagedStoreError
from mmreplay.rows.transitions import EPISODE_START, FRAGMENT_START
from mmreplay.store.reading.damage_scan import scan_damage
from mmreplay.store.reading.mapped_files import map_committed
from mmreplay.store.store_layout import StoreLayout

PathLike = str | os.PathLike[str]
_SCAN_ATTEMPTS = 3  # a live writer's commit during a scan makes it scan again


class DamagedStore(StoreLayout):
    """A store's files mapped read-only at its last commit, with what a scan of them found (``scan``).

    ``read`` returns intact transitions only; ``fragment_starts`` says which of them a copy must start as a
    fragment (the transition before them in their episode is not intact, or was evicted)."""

    def __init__(self, path: PathLike, *, progress: Callable[[int], None] | None = None) -> None:
        """Open the store at ``path`` and scan it (``progress`` as ``scan_damage``'s); a store that a writer
        commits to meanwhile is scanned again at its new commit."""
        real = Path(os.path.realpath(path))
        for attempt in range(_SCAN_ATTEMPTS):
            signature = file_signature(real / header.HEADER_NAME)
            files, commit = map_committed(header.open_store_directory(real), None, writable=False, decode_threads=None)
            try:
                scan = scan_damage(files, commit, progress=progress)
            except BaseException:
                files.close()
                raise
            if scan.clean or file_signature(real / header.HEADER_NAME) == signature or attempt == _SCAN_ATTEMPTS - 1:
                break
            files.close()
        self._files, self._layout, self.commit, self.scan = files, files.layout, commit, scan

    @property
    def transitions_added(self) -> int:
        return self.commit.transitions_added

    def read(self, steps: npt.ArrayLike) -> Batch:
        """The transitions of these steps, which must be intact (``scan.intact``)."""
        steps = np.asarray(steps, np.int64).reshape(-1)
        where = steps - self.scan.stored.start
        if len(steps) and ((where < 0).any() or (where >= len(self.scan.stored)).any() or not self.scan.intact[where].all()):
            raise ValueError(f"steps must be intact stored steps of {self.scan.stored}; got {steps.tolist()[:8]}")
        ones = np.ones(len(steps), np.float32)
        return self._files.reader.transitions(steps, weight=ones, discount=ones.copy())

    def fragment_starts(self, steps: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Which of these intact steps start a fragment in a copy of the intact transitions: those the
        source marks so, and each that continues an episode whose transition before it is not copied
        (damaged, or evicted): its newest obs frame is no copied transition's next_obs frame."""
        scan = self.scan
        where = np.asarray(steps, np.int64).reshape(-1) - scan.stored.start
        flags = scan.flags[where]
        continues = (flags & (EPISODE_START | FRAGMENT_START)) == 0
        copied = np.isin(scan.obs_frames[where], scan.next_frames[scan.intact])
        starts: npt.NDArray[np.bool_] = ((flags & FRAGMENT_START) != 0) | (continues & ~copied)
        return starts

    def missing_files(self, limit: int = 100) -> list[str]:
        """The files the stored transitions need that are missing (``ReplayStore.missing_files``)."""
        return self._files.missing(self.commit, limit=limit)

    def close(self) -> None:
        self._files.close()

    def __enter__(self) -> DamagedStore:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


def damaged_store_error(path: PathLike, error: CorruptStoreError) -> DamagedStoreError:
    """``error`` (a damaged row or frame met while opening the store at ``path``) as the message a user
    reads: the store named as given, once, the damage in the store's own file names, and the way out."""
    directory = os.path.realpath(path)
    text = str(error).replace(directory + os.sep, "").replace(directory, str(path))
    for clause in (" (corrupt, or overwritten since it was located)", ", or the frame was overwritten since it was located",
                   " is corrupt, or the frame was overwritten since it was located", ", or the frame was overwritten"):
        text = text.replace(clause, " is damaged" if clause.startswith(" is corrupt") else "")
    return DamagedStoreError(
        f"{path}: damaged: {text}; 'mmreplay verify {path}' lists every damaged row and frame, and 'mmreplay "
        f"salvage {path} NEW' (mmreplay.salvage) copies every intact transition into a new store"
    )
