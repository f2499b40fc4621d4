"""The transition table: a memory-mapped ring of fixed-size rows, one per stored transition.

A row holds what a transition owns besides pixels: the frame step of its next_obs frame (its obs frames
are reached through the frame table's episode links), the action, the reward and flag bits. The slot of
transition step ``t`` is ``t % row_slots``; the store keeps ``row_slots`` above ``capacity`` so that rows
a committed header still counts are never overwritten before the next commit.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import numpy.typing as npt

from mmreplay.errors import CorruptStoreError

TERMINATED = 1
TRUNCATED = 2
EPISODE_START = 4  # the first transition of its episode


def row_dtype(action_shape: tuple[int, ...], action_dtype: np.dtype) -> np.dtype:
    """The packed little-endian row layout for a given action field."""
    return np.dtype(
        [
            ("next_frame", "<u8"),
            ("reward", "<f4"),
            ("flags", "u1"),
            ("action", action_dtype.newbyteorder("<"), action_shape),
        ]
    )


class TransitionTable:
    """Rows addressed by transition step."""

    def __init__(self, path: Path, *, dtype: np.dtype, row_slots: int, writable: bool) -> None:
        expected = row_slots * dtype.itemsize
        if not path.is_file() or path.stat().st_size < expected:
            raise CorruptStoreError(f"{path}: transition table is missing or shorter than {expected} bytes")
        self.path = path
        self.row_slots = row_slots
        self._mapping = np.memmap(path, dtype=dtype, mode="r+" if writable else "r", shape=(row_slots,))
        self._rows = self._mapping.view(np.ndarray)  # plain indexing, without memmap's per-call overhead

    @classmethod
    def create(cls, path: Path, *, dtype: np.dtype, row_slots: int) -> TransitionTable:
        with open(path, "xb") as file:
            file.truncate(row_slots * dtype.itemsize)
            os.fsync(file.fileno())
        return cls(path, dtype=dtype, row_slots=row_slots, writable=True)

    def write(
        self,
        first_step: int,
        *,
        next_frames: npt.NDArray[np.int64],
        rewards: npt.NDArray[np.float32],
        flags: npt.NDArray[np.integer],
        actions: npt.NDArray[np.generic],
    ) -> None:
        """Write rows for transition steps ``first_step, first_step + 1, ...``."""
        for i in range(len(next_frames)):
            self._rows[(first_step + i) % self.row_slots] = (next_frames[i], rewards[i], flags[i], actions[i])

    def read(self, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.void]:
        """A copy of the rows of these transition steps."""
        return self._rows[steps % self.row_slots]

    def sync(self) -> None:
        self._mapping.flush()

    def close(self) -> None:
        if self._mapping.mode != "r":
            self._mapping.flush()
        del self._rows, self._mapping
