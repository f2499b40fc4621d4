"""HDF5 datasets: export a store to HDF5 and import one back, losslessly (the only module importing h5py).

Two layouts, both described in the README ("HDF5 datasets"):

* ``"mmreplay"``: one file. Frames are one HDF5 chunk each (deflate level 1, in every HDF5 build);
  episodes are stored one after another: an episode of T transitions owns ``stack_size + T`` consecutive
  frames (its first obs stack, then each transition's newest next_obs frame) and T consecutive rows of
  the ``transitions`` columns.
* ``"minari"``: a Minari 0.5.4 dataset directory (``<dir>/data/main_data.hdf5`` and ``metadata.json``),
  one ``episode_{i}`` group per episode with observations of length T + 1 (single frames, lossless).

Both keep each transition's original *step*, so ``import_hdf5`` replays the transitions of every env
in their original order: the imported store reads back the same transitions (env_index included), its
steps renumbered from 0. Import adds each episode's first obs as its whole stack, and the rest of the
episode frame by frame, so stacks are rebuilt exactly as they were.

Memory stays flat: frames move in chunks of ``chunk_steps`` transitions; what grows with the store is
two small integers per transition (which episode, which position) during export.
"""

from __future__ import annotations

import heapq
import json
import os
import re
import shutil
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt
from tqdm import tqdm

from mmreplay.errors import CorruptStoreError, FormatVersionError
from mmreplay.store import ReplayStore

PathLike = str | os.PathLike[str]

LAYOUTS = ("mmreplay", "minari")
FORMAT_NAMES = {"mmreplay": "mmreplay-hdf5", "minari": "mmreplay-minari"}
FORMAT_VERSION = 1
ENDED_BY = ("terminated", "truncated", "cut", "in progress")
MINARI_VERSION = "0.5.4"
MINARI_FILE = "main_data.hdf5"
MINARI_METADATA = "metadata.json"
_DEFLATE_LEVEL = 1  # HDF5's "gzip" filter: zlib streams, one per chunk (one frame per chunk)
_DATASET_ID = re.compile(r"^(?:[-_\w][-_\w/]*[-_\w]+/)?[-_\w]+?-v\d+$")
_COLUMNS = ("action", "reward", "terminated", "truncated", "step")
_MINARI_COLUMNS = {"action": "actions", "reward": "rewards", "terminated": "terminations",
                   "truncated": "truncations", "step": "mmreplay_steps"}


# -- export ----------------------------------------------------------------------------------------


def export_hdf5(
    store: ReplayStore,
    path: PathLike,
    *,
    layout: str = "mmreplay",
    dataset_id: str | None = None,
    chunk_steps: int = 1024,
    progress: bool = False,
) -> int:
    """Write every stored transition of ``store`` to ``path`` in ``layout``; returns the transitions written.

    ``layout="mmreplay"`` writes one HDF5 file; ``layout="minari"`` makes the directory ``path`` holding
    ``data/main_data.hdf5`` and ``data/metadata.json``, loadable with ``minari.MinariDataset(path / "data")``
    or ``minari.load_dataset(dataset_id)`` when ``path`` is ``<datasets root>/<dataset_id>``.
    ``dataset_id`` (``[namespace/]name-vN``) defaults to the name of ``path``. The file appears at
    ``path`` only once complete.
    """
    if not isinstance(store, ReplayStore):
        raise TypeError(f"store must be a ReplayStore; got {type(store).__name__}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}; got {layout!r}")
    chunk_steps = _positive(chunk_steps, "chunk_steps")
    target = Path(path)
    if target.exists():
        raise FileExistsError(f"cannot export to {str(target)!r}: the path already exists")
    if layout == "minari":
        dataset_id = target.name if dataset_id is None else dataset_id
        if not isinstance(dataset_id, str) or not _DATASET_ID.match(dataset_id):
            raise ValueError(f"dataset_id must look like '[namespace/]name-v0' (Minari's rule); got {dataset_id!r}")
    episodes = store.episodes()
    stored = store.stored_steps
    episode_of = np.empty(len(stored), np.int64)
    position_of = np.empty(len(stored), np.int64)
    for number, episode in enumerate(episodes):
        episode_of[episode.steps - stored.start] = number
        position_of[episode.steps - stored.start] = np.arange(episode.length)
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{target.name}.exporting-", dir=target.parent))
    try:
        if layout == "mmreplay":
            writer: _Writer = _FileWriter(building / "export.h5", store, episodes)
        else:
            writer = _MinariWriter(building / "data", store, episodes, dataset_id or "")
        with writer, tqdm(total=len(stored), disable=not progress, file=sys.stderr, unit="transition",
                          desc=f"export {layout}") as bar:
            for start in range(stored.start, stored.stop, chunk_steps):
                steps = np.arange(start, min(start + chunk_steps, stored.stop), dtype=np.int64)
                _export_chunk(writer, store, steps, episode_of[steps - stored.start],
                              position_of[steps - stored.start])
                bar.update(len(steps))
        os.rename(building / "export.h5" if layout == "mmreplay" else building, target)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return len(stored)


def _export_chunk(writer: _Writer, store: ReplayStore, steps: npt.NDArray[np.int64],
                  episode_of: npt.NDArray[np.int64], position_of: npt.NDArray[np.int64]) -> None:
    batch = store.read(steps)
    for i in np.flatnonzero(position_of == 0).tolist():
        writer.frames(int(episode_of[i]), 0, batch.obs[i])
    for episode in dict.fromkeys(episode_of.tolist()):
        rows = np.flatnonzero(episode_of == episode)
        first = int(position_of[rows[0]])
        writer.frames(episode, store.stack_size + first, batch.next_obs[rows, -1])
        writer.columns(episode, first, {
            "action": batch.action[rows], "reward": batch.reward[rows], "terminated": batch.terminated[rows],
            "truncated": batch.truncated[rows], "step": batch.index[rows]})


def _root_attrs(store: ReplayStore, layout: str, episodes: int) -> dict[str, Any]:
    return {
        "format": FORMAT_NAMES[layout], "format_version": FORMAT_VERSION,
        "frame_shape": np.array(store.frame_shape, np.int64), "stack_size": store.stack_size,
        "num_envs": store.num_envs, "capacity": store.capacity,
        "action_shape": np.array(store.action_shape, np.int64), "action_dtype": store.action_dtype.str,
        "transitions": len(store), "episodes": episodes, "first_step": store.stored_steps.start,
    }


def _column_dataset(group: h5py.Group, name: str, length: int, shape: tuple[int, ...], dtype: Any) -> None:
    if length == 0:
        group.create_dataset(name, shape=(0, *shape), dtype=dtype)
    else:
        group.create_dataset(name, shape=(length, *shape), dtype=dtype, chunks=(min(length, 16384), *shape),
                             compression="gzip", compression_opts=_DEFLATE_LEVEL)


def _frame_dataset(group: h5py.Group, name: str, count: int, frame_shape: tuple[int, ...]) -> h5py.Dataset:
    return group.create_dataset(name, shape=(count, *frame_shape), dtype=np.uint8, chunks=(1, *frame_shape),
                                compression="gzip", compression_opts=_DEFLATE_LEVEL)


def _write_frames(dataset: h5py.Dataset, first: int, frames: npt.NDArray[np.uint8]) -> None:
    """Compress each frame with zlib and write it as its chunk: the bytes HDF5's gzip filter would write."""
    zeros = (0,) * (frames.ndim - 1)
    for i, frame in enumerate(frames):
        dataset.id.write_direct_chunk((first + i, *zeros), zlib.compress(frame.tobytes(), _DEFLATE_LEVEL))


class _Writer:
    """Where an export puts each episode's frames (local index: first obs stack, then one per transition)
    and its column rows (by position in the episode)."""

    def frames(self, episode: int, local: int, frames: npt.NDArray[np.uint8]) -> None:
        raise NotImplementedError

    def columns(self, episode: int, first: int, values: dict[str, np.ndarray]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> _Writer:  # noqa: PYI034 (private; Python 3.10 has no typing.Self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _FileWriter(_Writer):
    """The ``"mmreplay"`` layout: flat columns, episodes one after another."""

    def __init__(self, path: Path, store: ReplayStore, episodes: list[Any]) -> None:
        self._file = h5py.File(path, "w")
        lengths = np.array([e.length for e in episodes], np.int64)
        self._rows = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) else lengths
        self._frame_starts = self._rows + store.stack_size * np.arange(len(lengths), dtype=np.int64)
        self._file.attrs.update(_root_attrs(store, "mmreplay", len(episodes)))
        group = self._file.create_group("episodes")
        group.create_dataset("env_index", data=np.array([e.env_index for e in episodes], np.int64))
        group.create_dataset("length", data=lengths)
        group.create_dataset("transition_start", data=self._rows)
        group.create_dataset("frame_start", data=self._frame_starts)
        group.create_dataset("first_step", data=np.array([e.first_step for e in episodes], np.int64))
        group.create_dataset("ended_by", data=np.array([e.ended_by.encode() for e in episodes], "S11"))
        group.create_dataset("complete", data=np.array([e.complete for e in episodes], bool))
        total = int(lengths.sum())
        self._frames = _frame_dataset(self._file, "frames", total + store.stack_size * len(episodes),
                                      store.frame_shape)
        table = self._file.create_group("transitions")
        _column_dataset(table, "action", total, store.action_shape, store.action_dtype)
        _column_dataset(table, "reward", total, (), np.float32)
        _column_dataset(table, "terminated", total, (), bool)
        _column_dataset(table, "truncated", total, (), bool)
        _column_dataset(table, "step", total, (), np.int64)
        self._table = table

    def frames(self, episode: int, local: int, frames: npt.NDArray[np.uint8]) -> None:
        _write_frames(self._frames, int(self._frame_starts[episode]) + local, frames)

    def columns(self, episode: int, first: int, values: dict[str, np.ndarray]) -> None:
        row = int(self._rows[episode]) + first
        for name, column in values.items():
            self._table[name][row : row + len(column)] = column

    def close(self) -> None:
        self._file.close()


class _MinariWriter(_Writer):
    """The ``"minari"`` layout: one ``episode_{i}`` group per episode, then ``metadata.json``."""

    def __init__(self, directory: Path, store: ReplayStore, episodes: list[Any], dataset_id: str) -> None:
        directory.mkdir()
        self._directory = directory
        self._store = store
        self._dataset_id = dataset_id
        self._total_steps = sum(e.length for e in episodes)
        self._episodes = len(episodes)
        self._file = h5py.File(directory / MINARI_FILE, "w", track_order=True)
        self._file.attrs.update(_root_attrs(store, "minari", len(episodes)))
        self._low: Any = None
        self._high: Any = None
        for number, episode in enumerate(episodes):
            group = self._file.create_group(f"episode_{number}")
            group.attrs.update({"id": number, "total_steps": episode.length,
                                "mmreplay_env_index": episode.env_index, "mmreplay_ended_by": episode.ended_by,
                                "mmreplay_complete": episode.complete})
            _frame_dataset(group, "observations", episode.length + 1, store.frame_shape)
            _frame_dataset(group, "mmreplay_initial_stack", store.stack_size, store.frame_shape)
            _column_dataset(group, "actions", episode.length, store.action_shape, store.action_dtype)
            _column_dataset(group, "rewards", episode.length, (), np.float32)
            _column_dataset(group, "terminations", episode.length, (), bool)
            _column_dataset(group, "truncations", episode.length, (), bool)
            _column_dataset(group, "mmreplay_steps", episode.length, (), np.int64)
            group.create_group("infos")  # minari's EpisodeData expects a dict of infos, even empty

    def frames(self, episode: int, local: int, frames: npt.NDArray[np.uint8]) -> None:
        group = self._file[f"episode_{episode}"]
        stack = self._store.stack_size
        if local < stack:
            _write_frames(group["mmreplay_initial_stack"], local, frames[: stack - local])
        if local + len(frames) > stack - 1:
            skip = max(0, stack - 1 - local)
            _write_frames(group["observations"], local + skip - stack + 1, frames[skip:])

    def columns(self, episode: int, first: int, values: dict[str, np.ndarray]) -> None:
        group = self._file[f"episode_{episode}"]
        for name, column in values.items():
            group[_MINARI_COLUMNS[name]][first : first + len(column)] = column
        action = values["action"]
        low, high = action.min(axis=0), action.max(axis=0)
        self._low = low if self._low is None else np.minimum(self._low, low)
        self._high = high if self._high is None else np.maximum(self._high, high)

    def close(self) -> None:
        self._file.close()
        metadata = {
            "dataset_id": self._dataset_id, "total_episodes": self._episodes,
            "total_steps": self._total_steps, "data_format": "hdf5", "jpeg_encoding": False,
            "minari_version": MINARI_VERSION, "observation_space": json.dumps(self._observation_space()),
            "action_space": json.dumps(self._action_space()),
        }
        (self._directory / MINARI_METADATA).write_text(json.dumps(metadata))

    def _observation_space(self) -> dict[str, Any]:
        shape = list(self._store.frame_shape)
        size = int(np.prod(shape))
        return {"type": "Box", "dtype": "uint8", "shape": shape,
                "low": np.zeros(size, np.uint8).reshape(shape).tolist(),
                "high": np.full(size, 255, np.uint8).reshape(shape).tolist()}

    def _action_space(self) -> dict[str, Any]:
        """Discrete(n, start) for scalar integer actions; otherwise a Box spanning the dtype's range."""
        dtype, shape = self._store.action_dtype, list(self._store.action_shape)
        if dtype.kind in "iu" and not shape:
            low = int(self._low) if self._low is not None else 0
            high = int(self._high) if self._high is not None else 0
            return {"type": "Discrete", "dtype": "int64", "start": low, "n": high - low + 1}
        limits = np.iinfo(dtype) if dtype.kind in "iu" else None
        low = float("-inf") if limits is None else int(limits.min)
        high = float("inf") if limits is None else int(limits.max)
        if dtype.kind == "b":
            dtype, low, high = np.dtype(np.int8), 0, 1
        return {"type": "Box", "dtype": str(dtype), "shape": shape,
                "low": np.full(shape, low).tolist(), "high": np.full(shape, high).tolist()}


# -- import ----------------------------------------------------------------------------------------


def import_hdf5(
    path: PathLike,
    store_path: PathLike,
    *,
    capacity: int | None = None,
    stack_size: int | None = None,
    chunk_steps: int = 256,
    progress: bool = False,
) -> int:
    """Create a store at ``store_path`` from an HDF5 dataset; returns the transitions imported.

    ``path`` is a file in the ``"mmreplay"`` layout, or a Minari dataset: its directory, its ``data``
    directory or its ``main_data.hdf5``. Minari datasets not written by mmreplay need ``uint8``
    observations of length T + 1 (one frame each) and are read as one env, episode after episode;
    ``stack_size`` (default 4) applies to them only. ``capacity`` defaults to the exporting store's
    capacity (or the dataset's transitions), at least the transitions in the file. The store appears
    only when complete: a failed import removes what it created.
    """
    capacity = None if capacity is None else _positive(capacity, "capacity")
    stack_size = None if stack_size is None else _positive(stack_size, "stack_size")
    chunk_steps = _positive(chunk_steps, "chunk_steps")
    source = _open_source(Path(path), stack_size)
    target = Path(store_path)
    try:
        total = int(source.lengths.sum())
        store = ReplayStore.create(
            target, frame_shape=source.frame_shape, capacity=capacity or max(source.capacity, total, source.num_envs),
            stack_size=source.stack_size, num_envs=source.num_envs, action_shape=source.action_shape,
            action_dtype=source.action_dtype)
        try:
            with tqdm(total=total, disable=not progress, file=sys.stderr, unit="transition", desc="import") as bar:
                _Feeder(store).feed(_merged(source, chunk_steps), bar)
            store.close()
        except BaseException:
            store.close()
            shutil.rmtree(target, ignore_errors=True)
            raise
    finally:
        source.close()
    return total


class _Source:
    """An open dataset: its layout, and each episode's env, length, first step, frames and columns."""

    def __init__(self, file: h5py.File, name: str) -> None:
        self.file = file
        self.name = name
        self.frame_shape: tuple[int, ...] = ()
        self.stack_size = 4
        self.num_envs = 1
        self.capacity = 1
        self.action_shape: tuple[int, ...] = ()
        self.action_dtype = np.dtype(np.int64)
        self.envs = np.zeros(0, np.int64)
        self.lengths = np.zeros(0, np.int64)
        self.first_steps = np.zeros(0, np.int64)

    def frames(self, episode: int, start: int, stop: int) -> npt.NDArray[np.uint8]:
        raise NotImplementedError

    def columns(self, episode: int, start: int, stop: int) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def close(self) -> None:
        self.file.close()

    def fail(self, problem: str) -> CorruptStoreError:
        return CorruptStoreError(f"{self.name}: {problem}")

    def read_layout(self, attrs: Any) -> None:
        version = int(attrs["format_version"])
        if version != FORMAT_VERSION:
            raise FormatVersionError(f"{self.name}: format version {version}; this mmreplay reads {FORMAT_VERSION}")
        self.frame_shape = tuple(int(n) for n in attrs["frame_shape"])
        self.stack_size = int(attrs["stack_size"])
        self.num_envs = int(attrs["num_envs"])
        self.capacity = int(attrs["capacity"])
        self.action_shape = tuple(int(n) for n in attrs["action_shape"])
        self.action_dtype = np.dtype(attrs["action_dtype"])


class _FileSource(_Source):
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
        total = int(self.lengths.sum())
        if self._frames.shape != (total + self.stack_size * len(self.lengths), *self.frame_shape):
            raise self.fail(f"frames has shape {self._frames.shape}; the episodes table needs "
                            f"{(total + self.stack_size * len(self.lengths), *self.frame_shape)}")
        for column in _COLUMNS:
            if self._table[column].shape[0] != total:
                raise self.fail(f"transitions/{column} has {self._table[column].shape[0]} rows; expected {total}")

    def frames(self, episode: int, start: int, stop: int) -> npt.NDArray[np.uint8]:
        first = int(self._frame_starts[episode])
        return np.asarray(self._frames[first + start : first + stop])

    def columns(self, episode: int, start: int, stop: int) -> dict[str, np.ndarray]:
        row = int(self._rows[episode])
        return {name: np.asarray(self._table[name][row + start : row + stop]) for name in _COLUMNS}


class _MinariSource(_Source):
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
            if not isinstance(observations, h5py.Dataset) or observations.dtype != np.uint8:
                raise self.fail("episode_0/observations must be a uint8 dataset (one frame per observation)")
            self.frame_shape = tuple(observations.shape[1:])
            self.action_shape = tuple(actions.shape[1:])
            self.action_dtype = np.dtype(actions.dtype)
            self.stack_size = stack_size or 4
        if stack_size is not None and stack_size != self.stack_size:
            raise ValueError(f"stack_size={stack_size} differs from the dataset's stack_size {self.stack_size}")
        self.lengths = np.array([len(g["rewards"]) for g in self._groups], np.int64)
        self.envs = np.array([int(g.attrs.get("mmreplay_env_index", 0)) for g in self._groups], np.int64)
        self._sequential = not ours
        starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self._starts = starts
        self.first_steps = starts if not ours else np.array([g["mmreplay_steps"][0] for g in self._groups])
        self.capacity = max(self.capacity, int(self.lengths.sum()))
        for i, group in enumerate(self._groups):
            length = int(self.lengths[i])
            if group["observations"].shape != (length + 1, *self.frame_shape):
                raise self.fail(f"episode_{i}/observations has shape {group['observations'].shape}; expected "
                                f"{(length + 1, *self.frame_shape)} for {length} transitions")
            for key in ("actions", "terminations", "truncations"):
                if len(group[key]) != length:
                    raise self.fail(f"episode_{i}/{key} has {len(group[key])} entries; expected {length}")

    def frames(self, episode: int, start: int, stop: int) -> npt.NDArray[np.uint8]:
        group, stack = self._groups[episode], self.stack_size
        head: npt.NDArray[np.uint8] = np.zeros((0, *self.frame_shape), np.uint8)
        if start < stack - 1:
            if "mmreplay_initial_stack" in group:
                head = np.asarray(group["mmreplay_initial_stack"][start : min(stop, stack - 1)])
            else:
                head = np.repeat(group["observations"][0:1], min(stop, stack - 1) - start, axis=0)
        tail = np.asarray(group["observations"][max(start, stack - 1) - stack + 1 : max(stop, stack - 1) - stack + 1])
        return np.concatenate([head, tail]) if len(head) else tail

    def columns(self, episode: int, start: int, stop: int) -> dict[str, np.ndarray]:
        group = self._groups[episode]
        values = {name: np.asarray(group[key][start:stop]) for name, key in _MINARI_COLUMNS.items() if name != "step"}
        if self._sequential:
            values["step"] = self._starts[episode] + np.arange(start, stop, dtype=np.int64)
        else:
            values["step"] = np.asarray(group["mmreplay_steps"][start:stop])
        values["terminated"] = values["terminated"].astype(bool)
        values["truncated"] = values["truncated"].astype(bool)
        return values


def _open_source(path: Path, stack_size: int | None) -> _Source:
    if not path.exists():
        raise FileNotFoundError(f"no HDF5 dataset at {str(path)!r}")
    if path.is_dir():
        candidates = [path / "data" / MINARI_FILE, path / MINARI_FILE]
        found = [c for c in candidates if c.is_file()]
        if not found:
            raise CorruptStoreError(f"{path}: a directory without {MINARI_FILE} (or data/{MINARI_FILE}): "
                                    "not a Minari dataset")
        path = found[0]
    name = str(path)
    try:
        file = h5py.File(path, "r")
    except OSError as error:
        raise CorruptStoreError(f"{name}: not an HDF5 file ({error})") from None
    try:
        if file.attrs.get("format") == FORMAT_NAMES["mmreplay"]:
            if stack_size is not None and stack_size != int(file.attrs["stack_size"]):
                raise ValueError(f"stack_size={stack_size} differs from the file's stack_size "
                                 f"{int(file.attrs['stack_size'])}")
            return _FileSource(file, name)
        if any(key.startswith("episode_") for key in file):
            return _MinariSource(file, name, stack_size)
        raise CorruptStoreError(f"{name}: neither an mmreplay HDF5 export (root attribute format="
                                f"{FORMAT_NAMES['mmreplay']!r}) nor a Minari dataset (episode_{{i}} groups)")
    except KeyError as error:
        file.close()
        raise CorruptStoreError(f"{name}: a required dataset or attribute is missing ({error})") from None
    except BaseException:
        file.close()
        raise


class _Cursor:
    """One episode being read in blocks: its transition at ``position`` as obs/next_obs stacks."""

    def __init__(self, source: _Source, episode: int, block: int) -> None:
        self.source, self.episode, self.block = source, episode, block
        self.length = int(source.lengths[episode])
        self.position = 0
        self._load()

    def _load(self) -> None:
        start, stop = self.position, min(self.length, self.position + self.block)
        self._start = start
        self._frames = self.source.frames(self.episode, start, stop + self.source.stack_size)
        self._columns = self.source.columns(self.episode, start, stop)

    @property
    def step(self) -> int:
        return int(self._columns["step"][self.position - self._start])

    def transition(self) -> tuple[Any, ...]:
        i, stack = self.position - self._start, self.source.stack_size
        c = self._columns
        return (int(self.source.envs[self.episode]), self._frames[i : i + stack], c["action"][i], c["reward"][i],
                self._frames[i + 1 : i + 1 + stack], bool(c["terminated"][i]), bool(c["truncated"][i]))

    def advance(self) -> bool:
        """Move to the next transition; False at the episode's end."""
        self.position += 1
        if self.position >= self.length:
            return False
        if self.position - self._start >= len(self._columns["step"]):
            self._load()
        return True


def _merged(source: _Source, block: int) -> Iterator[tuple[Any, ...]]:
    """Every transition of every episode, in the order of their original steps."""
    order = np.argsort(source.first_steps, kind="stable")
    heap: list[tuple[int, int, _Cursor]] = []
    admitted = 0
    while heap or admitted < len(order):
        if admitted < len(order) and (not heap or source.first_steps[order[admitted]] < heap[0][0]):
            episode = int(order[admitted])
            admitted += 1
            if source.lengths[episode] > 0:
                cursor = _Cursor(source, episode, block)
                heapq.heappush(heap, (cursor.step, episode, cursor))
            continue
        _, episode, cursor = heapq.heappop(heap)
        yield cursor.transition()
        if cursor.advance():
            heapq.heappush(heap, (cursor.step, episode, cursor))


class _Feeder:
    """Adds transitions in order; consecutive ones of increasing envs share one vector ``add``."""

    def __init__(self, store: ReplayStore) -> None:
        self.store = store
        self.pending: dict[int, tuple[Any, ...]] = {}

    def feed(self, transitions: Iterator[tuple[Any, ...]], bar: Any) -> None:
        for env, *fields in transitions:
            if self.store.num_envs == 1:
                self.store.add(*_reorder(fields))
                bar.update(1)
                continue
            if self.pending and env <= max(self.pending):
                bar.update(self._flush())
            self.pending[env] = tuple(fields)
        bar.update(self._flush())

    def _flush(self) -> int:
        if not self.pending:
            return 0
        store = self.store
        n, stack = store.num_envs, store.stack_size
        obs = np.zeros((n, stack, *store.frame_shape), np.uint8)
        next_obs = np.zeros_like(obs)
        action = np.zeros((n, *store.action_shape), store.action_dtype)
        reward = np.zeros(n, np.float32)
        terminated, truncated, mask = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, bool)
        for env, (o, a, r, o2, te, tr) in self.pending.items():
            obs[env], action[env], reward[env], next_obs[env] = o, a, r, o2
            terminated[env], truncated[env], mask[env] = te, tr, True
        store.add(obs, action, reward, next_obs, terminated, truncated, env_mask=mask)
        count = len(self.pending)
        self.pending = {}
        return count


def _reorder(fields: list[Any]) -> tuple[Any, ...]:
    obs, action, reward, next_obs, terminated, truncated = fields
    return obs, action, reward, next_obs, terminated, truncated


def _positive(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int; got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1; got {value}")
    return int(value)
