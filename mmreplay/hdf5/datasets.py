"""What both HDF5 layouts share: the format's names and version, how frames and columns become HDF5
datasets, and the contracts of a layout's writer (export) and source (import).

Frames are one HDF5 chunk each, compressed with HDF5's "gzip" filter (a zlib stream per chunk, deflate
level 1, present in every HDF5 build); columns are gzip-compressed in chunks of up to 16,384 rows.
"""

from __future__ import annotations

import json
import math
import zlib
from typing import Any, Protocol

import h5py  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt

from mmreplay.errors import CorruptStoreError, FormatVersionError
from mmreplay.hdf5.checks import ACTION_KINDS, MAX_ACTION_BYTES, MAX_FIELD_BYTES, MAX_FRAME_BYTES, MAX_SLOTS, close_file
from mmreplay.store import ReplayStore

LAYOUTS = ("mmreplay", "minari")
FORMAT_NAMES = {"mmreplay": "mmreplay-hdf5", "minari": "mmreplay-minari"}
# 2: an episode whose last transition's next_obs was stored as given (a detached transition, see
# stacking) keeps that whole stack: "final stack" (episodes/final_stack, episode_{i}/mmreplay_final_stack).
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)  # version 1 files have no final stacks
# The per-transition columns every layout carries; "step" is the transition's original step.
COLUMNS = ("action", "reward", "terminated", "truncated", "step")
DEFLATE_LEVEL = 1  # HDF5's "gzip" filter: zlib streams, one per chunk (one frame per chunk)
# A user field's column key (``LayoutWriter.columns``, ``Source.columns``): "fields/<name>".
FIELD_PREFIX = "fields/"


def root_attrs(store: ReplayStore, layout: str, episodes: int) -> dict[str, Any]:
    """The root attributes of an export: the store's layout, so an import can recreate it."""
    return {
        "format": FORMAT_NAMES[layout], "format_version": FORMAT_VERSION,
        "frame_shape": np.array(store.frame_shape, np.int64), "stack_size": store.stack_size,
        "num_envs": store.num_envs, "capacity": store.capacity,
        "action_shape": np.array(store.action_shape, np.int64), "action_dtype": store.action_dtype.str,
        "transitions": len(store), "episodes": episodes, "first_step": store.stored_steps.start,
        "frame_dtype": store.frame_dtype.str,  # absent from older files: uint8
        # User fields, only where the store has any (an export without them is unchanged): JSON
        # [[name, shape, dtype string], ...] in declaration order.
        **({"fields": json.dumps([[name, list(shape), dtype.str] for name, (shape, dtype) in store.fields.items()])}
           if store.fields else {}),
        # What an obs stack at an episode start holds before its first frame (the store's stack_padding):
        # the exported first obs stacks hold it already; an import recreates a store that pads alike.
        "stack_padding": store.stack_padding,
    }


def column_dataset(group: h5py.Group, name: str, length: int, shape: tuple[int, ...], dtype: Any) -> None:
    if length == 0:
        group.create_dataset(name, shape=(0, *shape), dtype=dtype)
    else:
        group.create_dataset(name, shape=(length, *shape), dtype=dtype, chunks=(min(length, 16384), *shape),
                             compression="gzip", compression_opts=DEFLATE_LEVEL)


def frame_dataset(
    group: h5py.Group, name: str, count: int, frame_shape: tuple[int, ...], frame_dtype: np.dtype
) -> h5py.Dataset:
    """Frames of the store's dtype: a little-endian HDF5 type (h5py's enum for bool), as on disk."""
    return group.create_dataset(name, shape=(count, *frame_shape), dtype=frame_dtype, chunks=(1, *frame_shape),
                                compression="gzip", compression_opts=DEFLATE_LEVEL)


def write_frames(dataset: h5py.Dataset, first: int, frames: npt.NDArray[np.generic]) -> None:
    """Compress each frame with zlib and write it as its chunk: the bytes HDF5's gzip filter would write
    (``frames`` has the dataset's little-endian dtype, so its bytes are the chunk's)."""
    zeros = (0,) * (frames.ndim - 1)
    for i, frame in enumerate(frames):
        dataset.id.write_direct_chunk((first + i, *zeros), zlib.compress(frame.tobytes(), DEFLATE_LEVEL))


class LayoutWriter(Protocol):
    """Where an export puts each episode's frames and column rows; ``close`` completes the output.

    An episode's frames are numbered locally: its first obs stack (``stack_size`` frames), then one
    frame per transition (that transition's newest next_obs frame), but for an episode with a *final
    stack* (its last transition is detached: its next_obs is not its obs shifted) the last transition
    brings its whole next_obs stack (``stack_size`` frames). Column rows are numbered by the
    transition's position in its episode.
    """

    def frames(self, episode: int, local: int, frames: npt.NDArray[np.generic]) -> None: ...

    def columns(self, episode: int, first: int, values: dict[str, np.ndarray]) -> None: ...

    def close(self) -> None: ...


class Source:
    """An open dataset, for import: the store layout it needs, and each episode's env, length, first
    step, whether it has a final stack, frames (numbered as in ``LayoutWriter``) and columns (``COLUMNS``).

    A layout subclasses it and fills in the layout fields and the per-episode arrays.
    """

    def __init__(self, file: h5py.File, name: str) -> None:
        self.file = file
        self.name = name
        self.frame_shape: tuple[int, ...] = ()
        self.frame_dtype = np.dtype(np.uint8)
        self.stack_size = 4
        self.stack_padding = "first"
        self.num_envs = 1
        self.capacity = 1
        self.action_shape: tuple[int, ...] = ()
        self.action_dtype = np.dtype(np.int64)
        self.envs = np.zeros(0, np.int64)
        self.lengths = np.zeros(0, np.int64)
        self.first_steps = np.zeros(0, np.int64)
        self.final_stacks = np.zeros(0, np.bool_)  # per episode: its last next_obs is a whole stack
        self.fields: dict[str, tuple[tuple[int, ...], np.dtype]] = {}  # user fields: name -> (shape, dtype)
        self.complete = np.zeros(0, np.bool_)  # per episode: False for a fragment (its start not stored)

    def frames(self, episode: int, start: int, stop: int) -> npt.NDArray[np.generic]:
        raise NotImplementedError

    def columns(self, episode: int, start: int, stop: int) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def close(self) -> None:
        close_file(self.file, self.name)

    def fail(self, problem: str) -> CorruptStoreError:
        return CorruptStoreError(f"{self.name}: {problem}")

    def read_layout(self, attrs: Any) -> None:
        """Take the store layout from root attributes written by ``root_attrs``, version checked first."""
        version = attrs["format_version"]
        version = int(version) if isinstance(version, (int, np.integer)) else repr(version)
        if version not in READABLE_VERSIONS:
            raise FormatVersionError(
                f"{self.name}: format version {version}; this mmreplay reads "
                f"{' and '.join(map(str, READABLE_VERSIONS))}"
            )
        # Absent from files of before frame_dtype: uint8.
        self.frame_dtype = self.dtype_attribute(attrs, "frame_dtype") if "frame_dtype" in attrs else np.dtype(np.uint8)
        self.frame_shape = self.shape_attribute(
            attrs, "frame_shape", low=1, most=MAX_FRAME_BYTES // self.frame_dtype.itemsize
        )
        self.stack_size = self.int_attribute(attrs, "stack_size", low=1)
        self.num_envs = self.int_attribute(attrs, "num_envs", low=1)
        self.capacity = self.int_attribute(attrs, "capacity", low=1)
        self.action_dtype = self.dtype_attribute(attrs, "action_dtype")
        self.action_shape = self.shape_attribute(
            attrs, "action_shape", low=0, most=MAX_ACTION_BYTES // self.action_dtype.itemsize
        )
        if not self.frame_shape:
            raise self.fail("attribute frame_shape is empty; expected at least one dimension")
        if "fields" in attrs:
            self.fields = self.fields_attribute(attrs)
        padding = attrs.get("stack_padding", "first")  # files written before stack_padding existed: "first"
        self.stack_padding = padding.decode() if isinstance(padding, bytes) else str(padding)
        if self.stack_padding not in ("first", "zeros"):
            raise self.fail(f"attribute stack_padding is {self.stack_padding!r}; expected 'first' or 'zeros'")

    def dtype_attribute(self, attrs: Any, name: str) -> np.dtype:
        return self.dtype_value(attrs[name], f"attribute {name}")

    def dtype_value(self, value: object, name: str) -> np.dtype:
        """A numeric or bool dtype from its string (``name`` says where it was found)."""
        value = value.decode(errors="replace") if isinstance(value, bytes) else value
        try:
            dtype = np.dtype(value) if isinstance(value, str) and len(value) <= 16 else None
        except (TypeError, ValueError, SyntaxError):
            dtype = None
        if dtype is None or dtype.kind not in ACTION_KINDS or dtype.fields is not None or dtype.subdtype is not None:
            raise self.fail(f"{name} is {value!r}; expected a numeric or bool dtype string")
        return dtype

    def fields_attribute(self, attrs: Any) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """The root attribute ``fields``: JSON ``[[name, shape, dtype], ...]``, each checked (distinct
        names, numeric or bool dtypes, shapes of at most MAX_FIELD_BYTES per transition)."""
        expected = "JSON [[name, shape, numeric or bool dtype], ...] with distinct names"
        try:
            entries = json.loads(attrs["fields"])
        except (TypeError, ValueError):
            raise self.fail(f"root attribute fields is not {expected}") from None
        fields: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        if not isinstance(entries, list):
            raise self.fail(f"root attribute fields is not {expected}")
        for entry in entries:
            if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str) and entry[0]
                    and entry[0] not in fields and isinstance(entry[1], list) and isinstance(entry[2], str)):
                raise self.fail(f"root attribute fields has entry {entry!r}; expected {expected}")
            name, shape, dtype = entry[0], entry[1], self.dtype_value(entry[2], f"fields[{entry[0]!r}] dtype")
            if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in shape) or (
                math.prod(shape) * dtype.itemsize > MAX_FIELD_BYTES
            ):
                raise self.fail(f"root attribute fields has shape {shape!r} for {name!r}; expected positive sizes "
                                f"of at most {MAX_FIELD_BYTES} bytes")
            fields[name] = (tuple(shape), dtype)
        return fields

    def int_attribute(self, attrs: Any, name: str, *, low: int) -> int:
        value = attrs[name]
        if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)) or not low <= value <= MAX_SLOTS:
            raise self.fail(f"attribute {name} is {value!r}; expected an integer in [{low}, {MAX_SLOTS}]")
        return int(value)

    def shape_attribute(self, attrs: Any, name: str, *, low: int, most: int) -> tuple[int, ...]:
        value = np.asarray(attrs[name])
        if value.ndim != 1 or value.dtype.kind not in "iu" or len(value) > 8 or (value < low).any() \
                or float(np.prod(value, dtype=np.float64)) > most:
            raise self.fail(f"attribute {name} is {value!r}; expected at most 8 integers >= {low}, "
                            f"of at most {most} elements")
        return tuple(int(n) for n in value)



def check_episode_table(source: Source, rows: npt.NDArray[Any], frame_starts: npt.NDArray[Any]) -> None:
    """The episodes table of an export is exactly what its lengths make: refuse any other."""
    for name, column in (("env_index", source.envs), ("length", source.lengths), ("first_step", source.first_steps),
                         ("transition_start", rows), ("frame_start", frame_starts)):
        if column.ndim != 1 or column.dtype.kind not in "iu" or len(column) != len(source.lengths):
            raise source.fail(f"episodes/{name} has shape {column.shape} and dtype {column.dtype}; expected "
                              f"{len(source.lengths)} integers")
    if len(source.lengths) and ((source.lengths < 0).any() or (source.first_steps < 0).any()
                                or (source.envs < 0).any() or (source.envs >= source.num_envs).any()):
        raise source.fail(f"episodes has a negative length or first_step, or an env_index outside [0, {source.num_envs})")
    counts = frame_counts(source.lengths, source.final_stacks, source.stack_size)
    if not (np.array_equal(rows, np.cumsum(source.lengths) - source.lengths)
            and np.array_equal(frame_starts, np.cumsum(counts) - counts)):
        raise source.fail("episodes/transition_start or frame_start do not follow from the episodes' lengths")


def frame_counts(
    lengths: npt.NDArray[np.int64], final_stacks: npt.NDArray[np.bool_], stack_size: int
) -> npt.NDArray[np.int64]:
    """The frames each episode owns (``LayoutWriter``'s numbering): stack_size + T, and stack_size - 1
    more for a final stack."""
    return (lengths + stack_size + (stack_size - 1) * final_stacks).astype(np.int64)
