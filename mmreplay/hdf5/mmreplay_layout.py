"""The ``"mmreplay"`` HDF5 layout: one file, flat columns, episodes one after another.

Datasets (root attributes from ``datasets.root_attrs``):

* ``frames`` (F, *frame_shape) of the store's frame dtype (root attribute ``frame_dtype``), one frame
  per chunk: an episode of T transitions owns ``stack_size + T`` consecutive frames starting at
  ``episodes/frame_start``: its first obs stack, then each transition's newest next_obs frame; an
  episode with ``episodes/final_stack`` True (its last transition terminated or truncated with a
  next_obs that is not its obs shifted, stored as given) owns ``stack_size - 1`` more: its last
  transition brings its whole next_obs stack.
* ``transitions/{action, reward, terminated, truncated, step}``: one row per transition; an episode's
  T rows are consecutive from ``episodes/transition_start``. ``step`` is the transition's original step.
  A store with user fields adds ``transitions/fields/<name>`` (T, *shape) of the field's dtype, rows as
  the other columns, and the root attribute ``fields`` (``datasets.root_attrs``).
* ``episodes/{env_index, length, transition_start, frame_start, first_step, ended_by, complete,
  final_stack}``: one entry per episode, in the order of ``ReplayStore.episodes()`` (``final_stack``
  since format version 2; a version 1 file has none).
"""

from __future__ import annotations

from pathlib import Path

import h5py  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt

from mmreplay.hdf5.checks import close_file
from mmreplay.hdf5.datasets import (
    COLUMNS,
    FIELD_PREFIX,
    Source,
    check_episode_table,
    column_dataset,
    frame_counts,
    frame_dataset,
    root_attrs,
    write_frames,
)
from mmreplay.store import ReplayStore
from mmreplay.store.reading.episode_list import Episode


class MmreplayLayoutWriter:
    """Exports to the ``"mmreplay"`` layout (a ``LayoutWriter``)."""

    def __init__(
        self, path: Path, store: ReplayStore, episodes: list[Episode], final_stacks: npt.NDArray[np.bool_]
    ) -> None:
        self._file = h5py.File(path, "w")
        lengths = np.array([e.length for e in episodes], np.int64)
        self._rows = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) else lengths
        counts = frame_counts(lengths, final_stacks, store.stack_size)
        self._frame_starts = (np.cumsum(counts) - counts).astype(np.int64)
        self._file.attrs.update(root_attrs(store, "mmreplay", len(episodes)))
        group = self._file.create_group("episodes")
        group.create_dataset("env_index", data=np.array([e.env_index for e in episodes], np.int64))
        group.create_dataset("length", data=lengths)
        group.create_dataset("transition_start", data=self._rows)
        group.create_dataset("frame_start", data=self._frame_starts)
        group.create_dataset("first_step", data=np.array([e.first_step for e in episodes], np.int64))
        group.create_dataset("ended_by", data=np.array([e.ended_by.encode() for e in episodes], "S11"))
        group.create_dataset("complete", data=np.array([e.complete for e in episodes], bool))
        group.create_dataset("final_stack", data=np.asarray(final_stacks, bool))
        total = int(lengths.sum())
        self._frames = frame_dataset(self._file, "frames", int(counts.sum()), store.frame_shape, store.frame_dtype)
        table = self._file.create_group("transitions")
        column_dataset(table, "action", total, store.action_shape, store.action_dtype)
        column_dataset(table, "reward", total, (), np.float32)
        column_dataset(table, "terminated", total, (), bool)
        column_dataset(table, "truncated", total, (), bool)
        column_dataset(table, "step", total, (), np.int64)
        for name, (shape, dtype) in store.fields.items():
            column_dataset(table, FIELD_PREFIX + name, total, shape, dtype)
        self._table = table

    def frames(self, episode: int, local: int, frames: npt.NDArray[np.generic]) -> None:
        write_frames(self._frames, int(self._frame_starts[episode]) + local, frames)

    def columns(self, episode: int, first: int, values: dict[str, np.ndarray]) -> None:
        row = int(self._rows[episode]) + first
        for name, column in values.items():
            self._table[name][row : row + len(column)] = column

    def close(self) -> None:
        close_file(self._file, str(self._file.filename))


class MmreplayLayoutSource(Source):
    """Imports the ``"mmreplay"`` layout; checks that the datasets' lengths agree with the episodes table."""

    def __init__(self, file: h5py.File, name: str) -> None:
        super().__init__(file, name)
        self.read_layout(file.attrs)
        episodes = file["episodes"]
        self.envs = episodes["env_index"][()]
        self.lengths = episodes["length"][()]
        self.first_steps = episodes["first_step"][()]
        self._rows = episodes["transition_start"][()]
        self._frame_starts = episodes["frame_start"][()]
        self._frames = file["frames"]
        self._table = file["transitions"]
        if "final_stack" in episodes:
            self.final_stacks = episodes["final_stack"][()].astype(bool)
        else:
            self.final_stacks = np.zeros(len(self.lengths), np.bool_)
        self.complete = (episodes["complete"][()].astype(bool) if "complete" in episodes
                         else np.ones(len(self.lengths), np.bool_))
        check_episode_table(self, self._rows, self._frame_starts)
        total = int(self.lengths.sum())
        frames = int(frame_counts(self.lengths, self.final_stacks, self.stack_size).sum())
        if len(self.final_stacks) != len(self.lengths) or self._frames.shape != (frames, *self.frame_shape):
            raise self.fail(f"frames has shape {self._frames.shape}; the episodes table needs "
                            f"{(frames, *self.frame_shape)}")
        if self._frames.dtype.newbyteorder("<") != self.frame_dtype.newbyteorder("<"):
            raise self.fail(f"frames has dtype {self._frames.dtype}; the root attributes say {self.frame_dtype}")
        self._columns = COLUMNS + tuple(FIELD_PREFIX + name for name in self.fields)
        for column in self._columns:
            if column not in self._table or self._table[column].shape[0] != total:
                rows = self._table[column].shape[0] if column in self._table else "no"
                raise self.fail(f"transitions/{column} has {rows} rows; expected {total}")

    def frames(self, episode: int, start: int, stop: int) -> npt.NDArray[np.generic]:
        first = int(self._frame_starts[episode])
        return np.asarray(self._frames[first + start : first + stop])

    def columns(self, episode: int, start: int, stop: int) -> dict[str, np.ndarray]:
        row = int(self._rows[episode])
        return {name: np.asarray(self._table[name][row + start : row + stop]) for name in self._columns}
