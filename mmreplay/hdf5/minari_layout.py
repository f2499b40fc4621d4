"""The ``"minari"`` HDF5 layout: a Minari 0.5.4 dataset directory, written and read.

An export makes ``<dir>/data/main_data.hdf5`` and ``<dir>/data/metadata.json``, loadable with
``minari.MinariDataset(<dir>/data)``, or ``minari.load_dataset(dataset_id)`` when ``<dir>`` is
``<datasets root>/<dataset_id>``. Each episode is a group ``episode_{i}`` with ``observations`` of
length T + 1 (single frames, one per chunk, lossless), ``actions``, ``rewards``, ``terminations`` and
``truncations`` of length T, and mmreplay's additions: ``mmreplay_initial_stack`` (the episode's first
obs stack), ``mmreplay_steps`` (each transition's original step) and attributes ``mmreplay_env_index``,
``mmreplay_ended_by`` and ``mmreplay_complete``. An episode whose last transition terminated or
truncated with a next_obs that is not its obs shifted (stored as given: the reset observation that
CleanRL and SB3 pass) has ``mmreplay_final_stack``, that whole next_obs stack; its ``observations[T]``
is the stack's newest frame. A store's user fields go in the episode's ``infos`` group, as Minari keeps
per-step extras: ``infos/<name>`` has T + 1 entries aligned with ``observations`` (entry t is transition
t's field, which belongs to its obs; entry T, at the final observation, is zero), and the root attribute
``fields`` names them for the import.

An import also reads Minari datasets that mmreplay did not write, when their observations are numeric
or bool single frames: as one env, episode after episode, stacks starting by repeating the first frame.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import h5py  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt

from mmreplay.hdf5.checks import close_file
from mmreplay.hdf5.datasets import (
    FIELD_PREFIX,
    FORMAT_NAMES,
    Source,
    column_dataset,
    frame_dataset,
    root_attrs,
    write_frames,
)
from mmreplay.store import ReplayStore
from mmreplay.store.reading.episode_list import Episode

MINARI_VERSION = "0.5.4"
MINARI_FILE = "main_data.hdf5"
MINARI_METADATA = "metadata.json"
DATASET_ID = re.compile(r"^(?:[-_\w][-_\w/]*[-_\w]+/)?[-_\w]+?-v\d+$")  # Minari's rule: [namespace/]name-vN
# Our column names (datasets.COLUMNS) -> Minari's dataset names.
MINARI_COLUMNS = {"action": "actions", "reward": "rewards", "terminated": "terminations",
                  "truncated": "truncations", "step": "mmreplay_steps"}


class MinariWriter:
    """Exports to the ``"minari"`` layout (a ``LayoutWriter``): the episode groups, then ``metadata.json``."""

    def __init__(
        self,
        directory: Path,
        store: ReplayStore,
        episodes: list[Episode],
        final_stacks: npt.NDArray[np.bool_],
        dataset_id: str,
    ) -> None:
        directory.mkdir()
        self._directory = directory
        self._store = store
        self._dataset_id = dataset_id
        self._total_steps = sum(e.length for e in episodes)
        self._episodes = len(episodes)
        self._file = h5py.File(directory / MINARI_FILE, "w", track_order=True)
        self._file.attrs.update(root_attrs(store, "minari", len(episodes)))
        self._low: Any = None
        self._high: Any = None
        self._lengths = [episode.length for episode in episodes]
        self._final_stacks = np.asarray(final_stacks, bool)
        for number, episode in enumerate(episodes):
            group = self._file.create_group(f"episode_{number}")
            group.attrs.update({"id": number, "total_steps": episode.length,
                                "mmreplay_env_index": episode.env_index, "mmreplay_ended_by": episode.ended_by,
                                "mmreplay_complete": episode.complete})
            frame_dataset(group, "observations", episode.length + 1, store.frame_shape, store.frame_dtype)
            frame_dataset(group, "mmreplay_initial_stack", store.stack_size, store.frame_shape, store.frame_dtype)
            if final_stacks[number]:
                frame_dataset(group, "mmreplay_final_stack", store.stack_size, store.frame_shape, store.frame_dtype)
            column_dataset(group, "actions", episode.length, store.action_shape, store.action_dtype)
            column_dataset(group, "rewards", episode.length, (), np.float32)
            column_dataset(group, "terminations", episode.length, (), bool)
            column_dataset(group, "truncations", episode.length, (), bool)
            column_dataset(group, "mmreplay_steps", episode.length, (), np.int64)
            infos = group.create_group("infos")  # minari's EpisodeData expects a dict of infos, even empty
            for name, (shape, dtype) in store.fields.items():
                column_dataset(infos, name, episode.length + 1, shape, dtype)

    def frames(self, episode: int, local: int, frames: npt.NDArray[np.generic]) -> None:
        group = self._file[f"episode_{episode}"]
        stack = self._store.stack_size
        if self._final_stacks[episode]:
            first_final = stack + self._lengths[episode] - 1  # local number of the final stack's oldest frame
            if local + len(frames) > first_final:
                cut = max(0, first_final - local)
                write_frames(group["mmreplay_final_stack"], local + cut - first_final, frames[cut:])
                if local + len(frames) == first_final + stack:  # its newest frame: the final observation
                    write_frames(group["observations"], self._lengths[episode], frames[-1:])
                frames = frames[:cut]
        if local < stack:
            write_frames(group["mmreplay_initial_stack"], local, frames[: stack - local])
        if local + len(frames) > stack - 1:
            skip = max(0, stack - 1 - local)
            write_frames(group["observations"], local + skip - stack + 1, frames[skip:])

    def columns(self, episode: int, first: int, values: dict[str, np.ndarray]) -> None:
        group = self._file[f"episode_{episode}"]
        for name, column in values.items():
            key = "infos/" + name[len(FIELD_PREFIX) :] if name.startswith(FIELD_PREFIX) else MINARI_COLUMNS[name]
            group[key][first : first + len(column)] = column
        action = values["action"]
        low, high = action.min(axis=0), action.max(axis=0)
        self._low = low if self._low is None else np.minimum(self._low, low)
        self._high = high if self._high is None else np.maximum(self._high, high)

    def close(self) -> None:
        close_file(self._file, str(self._file.filename))
        metadata = {
            "dataset_id": self._dataset_id, "total_episodes": self._episodes,
            "total_steps": self._total_steps, "data_format": "hdf5", "jpeg_encoding": False,
            "minari_version": MINARI_VERSION, "observation_space": json.dumps(self._observation_space()),
            "action_space": json.dumps(self._action_space()),
        }
        (self._directory / MINARI_METADATA).write_text(json.dumps(metadata))

    def _observation_space(self) -> dict[str, Any]:
        """A Box of the frames' shape and dtype spanning the dtype's range (bool: 0 to 1)."""
        dtype, shape = self._store.frame_dtype, list(self._store.frame_shape)
        low: float
        high: float
        if dtype.kind in "iu":
            low, high = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
        elif dtype.kind == "b":
            low, high = 0, 1
        else:
            low, high = float("-inf"), float("inf")
        return {"type": "Box", "dtype": str(dtype), "shape": shape,
                "low": np.full(shape, low).tolist(), "high": np.full(shape, high).tolist()}

    def _action_space(self) -> dict[str, Any]:
        """Discrete(n, start) for scalar integer actions; otherwise a Box spanning the dtype's range."""
        dtype, shape = self._store.action_dtype, list(self._store.action_shape)
        if dtype.kind in "iu" and not shape:
            low = int(self._low) if self._low is not None else 0
            high = int(self._high) if self._high is not None else 0
            return {"type": "Discrete", "dtype": "int64", "start": low, "n": high - low + 1}
        limits = np.iinfo(dtype) if dtype.kind in "iu" else None
        box_low: float = float("-inf") if limits is None else int(limits.min)
        box_high: float = float("inf") if limits is None else int(limits.max)
        if dtype.kind == "b":
            dtype, box_low, box_high = np.dtype(np.int8), 0, 1
        return {"type": "Box", "dtype": str(dtype), "shape": shape,
                "low": np.full(shape, box_low).tolist(), "high": np.full(shape, box_high).tolist()}


class MinariSource(Source):
    """Imports a Minari dataset: one written by mmreplay (its layout from the root attributes), or a
    foreign one with single-frame observations of a numeric or bool dtype (one env, ``stack_size`` frames
    per obs)."""

    def __init__(self, file: h5py.File, name: str, stack_size: int | None) -> None:
        super().__init__(file, name)
        count = sum(1 for key in file if key.startswith("episode_"))
        if count == 0:
            raise self.fail("holds no episode_{i} groups: not a Minari dataset")
        self._groups = [file.get(f"episode_{i}") for i in range(count)]
        if any(group is None for group in self._groups):
            raise self.fail(f"episode groups are not numbered 0..{count - 1}")
        ours = file.attrs.get("format") == FORMAT_NAMES["minari"]
        first = self._groups[0]
        if ours:
            self.read_layout(file.attrs)
        else:
            observations, actions = first["observations"], first["actions"]
            if not isinstance(observations, h5py.Dataset) or observations.dtype.kind not in "biuf":
                raise self.fail("episode_0/observations must be a numeric or bool dataset (one frame per observation)")
            self.frame_shape = tuple(observations.shape[1:])
            self.frame_dtype = observations.dtype.newbyteorder("<") if observations.dtype.byteorder == ">" else observations.dtype
            self.action_shape = tuple(actions.shape[1:])
            self.action_dtype = np.dtype(actions.dtype)
            self.stack_size = stack_size or 4
        if stack_size is not None and stack_size != self.stack_size:
            raise ValueError(f"stack_size={stack_size} differs from the dataset's stack_size {self.stack_size}")
        self.lengths = np.array([len(g["rewards"]) for g in self._groups], np.int64)
        self.final_stacks = np.array([ours and "mmreplay_final_stack" in g for g in self._groups], np.bool_)
        self.complete = np.array([bool(g.attrs.get("mmreplay_complete", True)) for g in self._groups], np.bool_)
        self.envs = np.array([int(g.attrs.get("mmreplay_env_index", 0)) for g in self._groups], np.int64)
        self._sequential = not ours
        starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self._starts = starts
        self.first_steps = starts if not ours else np.array([g["mmreplay_steps"][0] for g in self._groups])
        self.capacity = max(self.capacity, int(self.lengths.sum()))
        for i, group in enumerate(self._groups):
            length = int(self.lengths[i])
            head = group.get("mmreplay_initial_stack") if ours else None
            if ours and (not isinstance(head, h5py.Dataset) or head.shape != (self.stack_size, *self.frame_shape)):
                raise self.fail(f"episode_{i}/mmreplay_initial_stack has shape {getattr(head, 'shape', None)}; "
                                f"expected {(self.stack_size, *self.frame_shape)} for stack_size {self.stack_size}")
            if group["observations"].shape != (length + 1, *self.frame_shape):
                raise self.fail(f"episode_{i}/observations has shape {group['observations'].shape}; expected "
                                f"{(length + 1, *self.frame_shape)} for {length} transitions")
            for key in ("actions", "terminations", "truncations"):
                if len(group[key]) != length:
                    raise self.fail(f"episode_{i}/{key} has {len(group[key])} entries; expected {length}")
            for name in self.fields:
                key = f"infos/{name}"
                if key not in group or len(group[key]) != length + 1:
                    raise self.fail(f"episode_{i}/{key} is missing or has other than {length + 1} entries")

    def frames(self, episode: int, start: int, stop: int) -> npt.NDArray[np.generic]:
        if self.final_stacks[episode]:
            first_final = self.stack_size + int(self.lengths[episode]) - 1
            if stop > first_final:
                dataset = self._groups[episode]["mmreplay_final_stack"]
                final = np.asarray(dataset[max(0, start - first_final) : stop - first_final])
                if start >= first_final:
                    return final
                return np.concatenate([self._frames_before_final(episode, start, first_final), final])
        return self._frames_before_final(episode, start, stop)

    def _frames_before_final(self, episode: int, start: int, stop: int) -> npt.NDArray[np.generic]:
        group, stack = self._groups[episode], self.stack_size
        head: npt.NDArray[np.generic] = np.zeros((0, *self.frame_shape), self.frame_dtype)
        if start < stack - 1:
            if "mmreplay_initial_stack" in group:
                head = np.asarray(group["mmreplay_initial_stack"][start : min(stop, stack - 1)])
            else:
                head = np.repeat(group["observations"][0:1], min(stop, stack - 1) - start, axis=0)
        tail = np.asarray(group["observations"][max(start, stack - 1) - stack + 1 : max(stop, stack - 1) - stack + 1])
        return np.concatenate([head, tail]) if len(head) else tail

    def columns(self, episode: int, start: int, stop: int) -> dict[str, np.ndarray]:
        group = self._groups[episode]
        values = {name: np.asarray(group[key][start:stop]) for name, key in MINARI_COLUMNS.items() if name != "step"}
        if self._sequential:
            values["step"] = self._starts[episode] + np.arange(start, stop, dtype=np.int64)
        else:
            values["step"] = np.asarray(group["mmreplay_steps"][start:stop])
        for name in self.fields:
            values[FIELD_PREFIX + name] = np.asarray(group["infos"][name][start:stop])
        values["terminated"] = values["terminated"].astype(bool)
        values["truncated"] = values["truncated"].astype(bool)
        return values
