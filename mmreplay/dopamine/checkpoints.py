"""Reading and checking Dopamine replay checkpoints (the DQN Replay Dataset's files) before any import.

Dopamine's ``OutOfGraphReplayBuffer.save`` writes each array with ``np.save`` into a gzip file named
``<name>_ckpt.<N>.gz`` (``importing``'s docstring lists them). Every read here is bounded: a ``.npy``
header is parsed before any data and its declared size capped, and every gzip member's CRC and length
is checked, so a damaged or hostile file is an error naming it before anything is written.
``importing`` turns the checked files into a store.
"""

from __future__ import annotations

import gzip
import io
import math
import pickle
import re
import warnings
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import numpy as np

from mmreplay.errors import CorruptStoreError

ARRAYS = ("$store$_observation", "$store$_action", "$store$_reward", "$store$_terminal")
COUNTERS = ("add_count", "invalid_range")
EPISODE_ENDS = "episode_end_indices"
_CHECKPOINT_FILE = re.compile(r"^(.+)_ckpt\.(\d+)\.gz$")


def checkpoint_file(directory: Path, name: str, checkpoint: int) -> Path:
    return directory / f"{name}_ckpt.{checkpoint}.gz"


_MAX_ROW_BYTES = 1 << 30  # one row (a frame) of a .npy array
_MAX_ELEMENTS = 1 << 40  # declared elements: far beyond any file, far below int64's limit
_READ_BLOCK_BYTES = 1 << 26  # rows are read at most this many bytes at a time
_SMALL_BYTES = 1 << 20  # add_count, invalid_range
COLUMN_BYTES = 1 << 28  # action, reward, terminal: one number per slot (64 million int32 slots)


@dataclass(frozen=True)
class NpyHeader:
    """The header of a ``.npy`` stream: its shape and dtype, and where its data starts."""

    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int


def read_npy_header(stream: IO[bytes], name: str) -> NpyHeader:
    """Parse a ``.npy`` header from ``stream`` (left at the data's first byte); nothing else is read."""
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    except (ValueError, OSError, EOFError, zlib.error) as error:
        raise CorruptStoreError(f"{name}: not a gzip'd .npy array ({error})") from None
    if fortran:
        raise CorruptStoreError(f"{name}: a Fortran-ordered .npy array; Dopamine writes C order")
    dtype = np.dtype(dtype)
    # Sizes are checked before any read: a negative size would read the whole stream, a huge one allocate it.
    if (len(shape) > 8 or any(not isinstance(n, int) or n < 0 for n in shape) or dtype.kind not in "biuf"
            or dtype.fields is not None or dtype.subdtype is not None
            or dtype.itemsize * math.prod(shape[1:]) > _MAX_ROW_BYTES or math.prod(shape) > _MAX_ELEMENTS):
        raise CorruptStoreError(f"{name}: a .npy header declaring shape {shape} of {dtype}; expected sizes >= 0, "
                                f"rows of at most {_MAX_ROW_BYTES} bytes, numbers")
    return NpyHeader(tuple(shape), dtype, stream.tell())


def _read_to_end(stream: IO[bytes], path: Path, size: int) -> bytes:
    """Read ``size`` bytes and then the stream's end: gzip checks each member's CRC and length there."""
    try:
        data = stream.read(size)
        rest = stream.read(1)
    except (OSError, EOFError, zlib.error) as error:
        raise CorruptStoreError(f"{path}: the gzip stream is corrupt ({error})") from None
    if len(data) != size:
        raise CorruptStoreError(f"{path}: ends after {len(data)} of {size} bytes: the file is truncated")
    if rest:
        raise CorruptStoreError(f"{path}: holds more bytes than its .npy header says")
    return data


def read_array(path: Path, most_bytes: int = _SMALL_BYTES) -> np.ndarray:
    """A gzip'd ``.npy`` array, read whole: the counters (at most ``_SMALL_BYTES``), or action, reward and
    terminal (one number per slot, at most ``COLUMN_BYTES``); a header declaring more is refused."""
    with gzip.open(path, "rb") as stream:
        header = read_npy_header(stream, str(path))  # type: ignore[arg-type]
        size = header.dtype.itemsize * math.prod(header.shape)
        if size > most_bytes:
            raise CorruptStoreError(f"{path}: declares {size} bytes (shape {header.shape}); expected at most "
                                    f"{most_bytes}")
        data = _read_to_end(stream, path, size)  # type: ignore[arg-type]
    return np.frombuffer(data, header.dtype).reshape(header.shape)


def spill_frames(path: Path, spill: Path, block: int = 4096) -> np.ndarray:
    """Decompress a gzip'd ``.npy`` frame array once, in blocks, into an uncompressed memory map at
    ``spill`` (so a wrapped ring can be read in written order without decompressing it twice), ``block``
    rows at a time (at most ``_READ_BLOCK_BYTES``)."""
    with gzip.open(path, "rb") as stream:
        header = read_npy_header(stream, str(path))  # type: ignore[arg-type]
        out = np.lib.format.open_memmap(spill, mode="w+", dtype=header.dtype, shape=header.shape)
        rows = header.shape[0]
        row_bytes = header.dtype.itemsize * math.prod(header.shape[1:])
        block = max(1, min(block, _READ_BLOCK_BYTES // max(1, row_bytes)))  # reads stay bounded in bytes
        flat = out.reshape(rows, -1).view(np.uint8) if rows else out
        try:
            for first in range(0, rows, block):
                count = min(block, rows - first)
                read = stream.readinto(memoryview(flat[first : first + count]).cast("B"))  # type: ignore[arg-type,unused-ignore]
                if read != count * row_bytes:
                    raise CorruptStoreError(f"{path}: ends after {first * row_bytes + read} of {rows * row_bytes} "
                                            "bytes: the file is truncated")
            if stream.read(1):
                raise CorruptStoreError(f"{path}: holds more bytes than its .npy header says")
        except (OSError, EOFError, zlib.error) as error:
            raise CorruptStoreError(f"{path}: the gzip stream is corrupt ({error})") from None
    return out


class _SetOfInts(pickle.Unpickler):
    """Unpickles ``episode_end_indices`` (a set of ints, numpy's integer scalars in Dopamine's files) and
    nothing else: an arbitrary pickle may run code."""

    _ALLOWED = {("builtins", "set"), ("__builtin__", "set"), ("builtins", "frozenset"), ("numpy", "dtype"),
                ("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: expected a set of slot indices")


def read_episode_ends(path: Path) -> set[int]:
    """Dopamine's ``episode_end_indices``: a gzip'd pickle of a set of ring slots."""
    with gzip.open(path, "rb") as stream:
        try:
            data = stream.read()
            value = _SetOfInts(io.BytesIO(data)).load()
        except (OSError, EOFError, zlib.error, pickle.UnpicklingError, ValueError, TypeError) as error:
            raise CorruptStoreError(f"{path}: not a gzip'd pickle of a set of slots ({error})") from None
    if not isinstance(value, (set, frozenset)) or not all(isinstance(v, (int, np.integer)) for v in value):
        raise CorruptStoreError(f"{path}: expected a set of slot indices; got {type(value).__name__}")
    return {int(v) for v in value}


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint's files, checked: its ring holds the written slots ``[first, add_count)``."""

    number: int
    capacity: int
    frame_shape: tuple[int, ...]
    add_count: int
    has_episode_ends: bool
    stored_count: int  # add_count as written in the file (batch_rl's final log: the cursor)

    @property
    def first(self) -> int:
        return max(0, self.add_count - self.capacity)


def find_checkpoints(directory: Path) -> list[int]:
    """Every checkpoint number that any ``<name>_ckpt.<N>.gz`` file in ``directory`` belongs to."""
    return sorted({int(m.group(2)) for p in directory.iterdir() if (m := _CHECKPOINT_FILE.match(p.name))})


def check_checkpoint(directory: Path, number: int) -> Checkpoint:
    """Every file of checkpoint ``number`` present, with the shapes and dtypes Dopamine writes."""
    for name in ARRAYS + COUNTERS:
        if not checkpoint_file(directory, name, number).is_file():
            raise FileNotFoundError(f"checkpoint {number} is incomplete: {checkpoint_file(directory, name, number)} "
                                    "does not exist")
    headers = {}
    for name in ARRAYS:
        path = checkpoint_file(directory, name, number)
        with gzip.open(path, "rb") as stream:
            headers[name] = read_npy_header(stream, str(path))  # type: ignore[arg-type]
    observation = headers["$store$_observation"]
    if observation.dtype != np.uint8 or len(observation.shape) < 2:
        raise CorruptStoreError(f"{checkpoint_file(directory, ARRAYS[0], number)}: expected uint8 frames "
                                f"(capacity, *frame_shape); got {observation.dtype} {observation.shape}")
    capacity = observation.shape[0]
    if capacity < 1 or 0 in observation.shape:
        raise CorruptStoreError(f"{checkpoint_file(directory, ARRAYS[0], number)}: frames of shape "
                                f"{observation.shape}; expected no empty dimension")
    for name, kinds in zip(ARRAYS[1:], ("iu", "f", "iub")):
        header = headers[name]
        if header.shape != (capacity,) or header.dtype.kind not in kinds:
            raise CorruptStoreError(f"{checkpoint_file(directory, name, number)}: expected shape ({capacity},) "
                                    f"of kind {kinds!r}; got {header.dtype} {header.shape}")
    add_count = read_array(checkpoint_file(directory, "add_count", number))
    if add_count.shape != () or add_count.dtype.kind not in "iu" or int(add_count) < 0:
        raise CorruptStoreError(f"{checkpoint_file(directory, 'add_count', number)}: expected a 0-d count; "
                                f"got {add_count.dtype} {add_count.shape}")
    invalid = read_array(checkpoint_file(directory, "invalid_range", number))
    if int(add_count) % capacity not in set(invalid.astype(np.int64).ravel().tolist()):
        raise CorruptStoreError(f"{checkpoint_file(directory, 'invalid_range', number)}: does not hold the write "
                                f"cursor slot {int(add_count) % capacity}: files of different checkpoints mixed?")
    extra = sorted(p.name for p in directory.glob(f"$store$_*_ckpt.{number}.gz")
                   if p.name not in {f"{name}_ckpt.{number}.gz" for name in ARRAYS})
    if extra:
        warnings.warn(f"checkpoint {number}: {', '.join(extra)} not imported (a store keeps observation, action, "
                      "reward and episode ends only)", UserWarning, stacklevel=3)
    return Checkpoint(number, capacity, tuple(observation.shape[1:]), int(add_count),
                      checkpoint_file(directory, EPISODE_ENDS, number).is_file(), int(add_count))


def _final_log_count(directory: Path, checkpoint: Checkpoint, before: Checkpoint | None) -> Checkpoint:
    """``checkpoint`` with its true ``add_count`` when batch_rl's ``log_final_buffer`` wrote it: a count
    below the capacity that follows a log written when the ring was full (``add_count % capacity ==
    capacity - 1``), given before it or, when it comes first, found in the directory as the checkpoint
    numbered one less. (Slots past the cursor cannot tell: Dopamine's arrays start as ``np.empty``.)"""
    capacity = checkpoint.capacity
    if checkpoint.add_count >= capacity:
        return checkpoint
    if before is None:
        if not (directory / f"add_count_ckpt.{checkpoint.number - 1}.gz").is_file():
            return checkpoint
        before = check_checkpoint(directory, checkpoint.number - 1)
        if before.add_count <= checkpoint.add_count:
            return checkpoint
    if before.capacity != capacity or before.add_count % capacity != capacity - 1:
        return checkpoint
    return replace(checkpoint, add_count=before.add_count + 1 + checkpoint.add_count)


def ordered_checkpoints(directory: Path, found: list[Checkpoint]) -> list[Checkpoint]:
    """The checkpoints with batch_rl's final log counted right, checked to be in written order."""
    result: list[Checkpoint] = []
    for checkpoint in found:
        before = result[-1] if result else None
        if before is None or checkpoint.add_count <= before.add_count:
            checkpoint = _final_log_count(directory, checkpoint, before)
        if before is not None:
            if checkpoint.frame_shape != before.frame_shape:
                raise CorruptStoreError(f"checkpoint {checkpoint.number} has frames {checkpoint.frame_shape}; "
                                        f"checkpoint {before.number} has {before.frame_shape}")
            if checkpoint.add_count <= before.add_count:
                raise ValueError(f"checkpoints must be given in the order they were written: checkpoint "
                                 f"{checkpoint.number} (add_count {checkpoint.add_count}) is not newer than "
                                 f"{before.number} (add_count {before.add_count})")
        result.append(checkpoint)
    return result
