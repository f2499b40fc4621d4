"""The transition table: a memory-mapped ring of fixed-size rows, one per stored transition.

A row holds what a transition owns besides pixels: the frame step of its next_obs frame (its obs frames
are reached through the frame table's episode links), how many frame steps back its oldest obs frame
is, the env that produced it, a forward link to the env's next transition of the same episode (written
when that transition arrives; trusted only after checking it, since a crash can leave a link to a step
that was never committed), the action, the reward and flag bits. The slot of
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

_CHUNK = 4096  # rows per cached minimum in ``oldest_frame``


def row_dtype(action_shape: tuple[int, ...], action_dtype: np.dtype) -> np.dtype:
    """The packed little-endian row layout for a given action field."""
    return np.dtype(
        [
            ("next_frame", "<u8"),
            ("oldest_delta", "<u4"),  # next_frame - the oldest frame step its obs stack uses
            ("env", "<u2"),
            ("next_delta", "<u4"),  # steps forward to the env's next transition in this episode; 0: none yet
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
        self._chunk_minimums: dict[int, int] = {}
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
        next_frames: list[int],
        oldest_frames: list[int],
        envs: list[int],
        rewards: npt.NDArray[np.float32],
        flags: list[int],
        actions: npt.NDArray[np.generic],
    ) -> None:
        """Write rows for transition steps ``first_step, first_step + 1, ...``."""
        for i, next_frame in enumerate(next_frames):
            self._rows[(first_step + i) % self.row_slots] = (
                next_frame,
                next_frame - oldest_frames[i],
                envs[i],
                0,
                rewards[i],
                flags[i],
                actions[i],
            )

    def link(self, step: int, next_step: int) -> None:
        """Record that ``next_step`` continues the episode of ``step`` (same env)."""
        self._rows["next_delta"][step % self.row_slots] = next_step - step

    def oldest_frame(self, start: int, stop: int) -> int:
        """The oldest frame step that any transition in steps ``[start, stop)`` uses.

        Minimums of whole chunks of rows are kept once computed (rows are never rewritten while their
        steps are stored), so a commit pays for at most two partial chunks and one small ``min``.
        """
        first_chunk, last_chunk = start // _CHUNK, (stop - 1) // _CHUNK
        for chunk in [c for c in self._chunk_minimums if c < first_chunk]:
            del self._chunk_minimums[chunk]
        minimum = self._oldest_in(start, min(stop, (first_chunk + 1) * _CHUNK))
        for chunk in range(first_chunk + 1, last_chunk):
            if chunk not in self._chunk_minimums:
                self._chunk_minimums[chunk] = self._oldest_in(chunk * _CHUNK, (chunk + 1) * _CHUNK)
            minimum = min(minimum, self._chunk_minimums[chunk])
        if last_chunk > first_chunk:
            minimum = min(minimum, self._oldest_in(last_chunk * _CHUNK, stop))
        return minimum

    def _oldest_in(self, start: int, stop: int) -> int:
        rows = self.read(np.arange(start, stop, dtype=np.int64))
        return int((rows["next_frame"].astype(np.int64) - rows["oldest_delta"]).min())

    def columns(self, start: int, stop: int, names: tuple[str, ...]) -> dict[str, npt.NDArray[np.generic]]:
        """Whole columns of the rows of steps ``[start, stop)``, read a chunk at a time."""
        parts: dict[str, list[npt.NDArray[np.generic]]] = {name: [] for name in names}
        for chunk_start in range(start, stop, _CHUNK):
            rows = self.read(np.arange(chunk_start, min(stop, chunk_start + _CHUNK), dtype=np.int64))
            for name in names:
                parts[name].append(rows[name])
        return {name: np.concatenate(arrays) if arrays else np.empty(0) for name, arrays in parts.items()}

    def newest_of_each_env(self, start: int, stop: int, num_envs: int) -> dict[int, int]:
        """For each env with a transition in steps ``[start, stop)``, the step of its newest one."""
        newest: dict[int, int] = {}
        chunk_stop = stop
        while chunk_stop > start and len(newest) < num_envs:
            chunk_start = max(start, chunk_stop - _CHUNK)
            envs = self.read(np.arange(chunk_start, chunk_stop, dtype=np.int64))["env"]
            for env in np.unique(envs).tolist():
                if env not in newest:
                    newest[env] = chunk_start + int(np.flatnonzero(envs == env)[-1])
            chunk_stop = chunk_start
        return newest

    def read(self, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.void]:
        """A copy of the rows of these transition steps."""
        return self._rows[steps % self.row_slots]

    def sync(self) -> None:
        self._mapping.flush()

    def close(self) -> None:
        if self._mapping.mode != "r":
            self._mapping.flush()
        del self._rows, self._mapping
