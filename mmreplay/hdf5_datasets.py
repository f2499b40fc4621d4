"""What both HDF5 layouts share: the format's names and version, how frames and columns become HDF5
datasets, and the contracts of a layout's writer (export) and source (import).

Frames are one HDF5 chunk each, compressed with HDF5's "gzip" filter (a zlib stream per chunk, deflate
level 1, present in every HDF5 build); columns are gzip-compressed in chunks of up to 16,384 rows.
"""

from __future__ import annotations

import zlib
from typing import Any, Protocol

import h5py  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt

from mmreplay.errors import CorruptStoreError, FormatVersionError
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


def root_attrs(store: ReplayStore, layout: str, episodes: int) -> dict[str, Any]:
    """The root attributes of an export: the store's layout, so an import can recreate it."""
    return {
        "format": FORMAT_NAMES[layout], "format_version": FORMAT_VERSION,
        "frame_shape": np.array(store.frame_shape, np.int64), "stack_size": store.stack_size,
        "num_envs": store.num_envs, "capacity": store.capacity,
        "action_shape": np.array(store.action_shape, np.int64), "action_dtype": store.action_dtype.str,
        "transitions": len(store), "episodes": episodes, "first_step": store.stored_steps.start,
    }


def column_dataset(group: h5py.Group, name: str, length: int, shape: tuple[int, ...], dtype: Any) -> None:
    if length == 0:
        group.create_dataset(name, shape=(0, *shape), dtype=dtype)
    else:
        group.create_dataset(name, shape=(length, *shape), dtype=dtype, chunks=(min(length, 16384), *shape),
                             compression="gzip", compression_opts=DEFLATE_LEVEL)


def frame_dataset(group: h5py.Group, name: str, count: int, frame_shape: tuple[int, ...]) -> h5py.Dataset:
    return group.create_dataset(name, shape=(count, *frame_shape), dtype=np.uint8, chunks=(1, *frame_shape),
                                compression="gzip", compression_opts=DEFLATE_LEVEL)


def write_frames(dataset: h5py.Dataset, first: int, frames: npt.NDArray[np.uint8]) -> None:
    """Compress each frame with zlib and write it as its chunk: the bytes HDF5's gzip filter would write."""
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

    def frames(self, episode: int, local: int, frames: npt.NDArray[np.uint8]) -> None: ...

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
        self.stack_size = 4
        self.num_envs = 1
        self.capacity = 1
        self.action_shape: tuple[int, ...] = ()
        self.action_dtype = np.dtype(np.int64)
        self.envs = np.zeros(0, np.int64)
        self.lengths = np.zeros(0, np.int64)
        self.first_steps = np.zeros(0, np.int64)
        self.final_stacks = np.zeros(0, np.bool_)  # per episode: its last next_obs is a whole stack

    def frames(self, episode: int, start: int, stop: int) -> npt.NDArray[np.uint8]:
        raise NotImplementedError

    def columns(self, episode: int, start: int, stop: int) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def close(self) -> None:
        self.file.close()

    def fail(self, problem: str) -> CorruptStoreError:
        return CorruptStoreError(f"{self.name}: {problem}")

    def read_layout(self, attrs: Any) -> None:
        """Take the store layout from root attributes written by ``root_attrs``, version checked first."""
        version = int(attrs["format_version"])
        if version not in READABLE_VERSIONS:
            raise FormatVersionError(
                f"{self.name}: format version {version}; this mmreplay reads "
                f"{' and '.join(map(str, READABLE_VERSIONS))}"
            )
        self.frame_shape = tuple(int(n) for n in attrs["frame_shape"])
        self.stack_size = int(attrs["stack_size"])
        self.num_envs = int(attrs["num_envs"])
        self.capacity = int(attrs["capacity"])
        self.action_shape = tuple(int(n) for n in attrs["action_shape"])
        self.action_dtype = np.dtype(attrs["action_dtype"])



def frame_counts(
    lengths: npt.NDArray[np.int64], final_stacks: npt.NDArray[np.bool_], stack_size: int
) -> npt.NDArray[np.int64]:
    """The frames each episode owns (``LayoutWriter``'s numbering): stack_size + T, and stack_size - 1
    more for a final stack."""
    return (lengths + stack_size + (stack_size - 1) * final_stacks).astype(np.int64)
