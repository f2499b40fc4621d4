"""Import Dopamine replay checkpoints (the DQN Replay Dataset's format) into a store.

Dopamine's ``OutOfGraphReplayBuffer.save`` writes each array with ``np.save`` into a gzip file named
``<name>_ckpt.<N>.gz``: ``$store$_observation`` (capacity, *frame) uint8 holding one frame per *slot*
(the newest frame only), ``$store$_action`` int32, ``$store$_reward`` float32, ``$store$_terminal``
uint8, and the 0-d ``add_count`` (slots ever written; the write cursor is ``add_count % capacity``) and
``invalid_range``; since 2021 also ``episode_end_indices``, a pickled set of the ring slots where an
episode ended, by termination or by a time limit (a truncation). Slot i holds (observation, action,
reward, terminal) of one step: the next observation is slot i + 1's. Before an episode's first slot, the
writer's ``stack_size - 1`` zero *padding* slots were written (at the very start, and after every
episode end).

Import rules (documented in the README):

* Slots are read in the order they were written: checkpoint N holds the written slots
  ``[add_count - capacity, add_count)``. Consecutive checkpoints continue each other (slots already
  read are skipped where they overlap; a gap cuts the episode in progress), so an episode may span two
  checkpoint files.
* batch_rl's ``log_final_buffer`` writes the run's last checkpoint with ``add_count`` replaced by the
  ring cursor; its true count is the previous log's ``add_count + 1 + cursor`` (batch_rl logs when
  ``add_count % capacity == capacity - 1``). Such a checkpoint is recognized (its ring wrapped though
  its count says it did not) and counted right; alone, without the log before it, it is refused.
* The padding slots to skip come from the files (the shortest run of all-zero slots after an episode
  end), or from ``writer_stack_size``; the store's ``stack_size`` is independent of the writer's.
* Stacks at an episode start are zero-padded, as Dopamine's sampler builds them (``stack_padding=
  "zeros"``), or repeat the episode's first frame (``"first"``, gymnasium's convention).
* A terminal slot's next frame was never stored: it is imported as an all-zero frame, which is also what
  Dopamine's own sampler returns there (the padding slot after it). A slot that ended its episode
  without being terminal (a time limit) has no next frame either: Dopamine never samples it, and the
  import ends the episode one transition earlier, ``truncated`` (its next_obs is the last real frame).
* An episode whose first slots are not in the files (overwritten where the ring wrapped, or lost in a
  gap between checkpoints) is a *fragment*: its first ``stack_size - 1`` slots only provide the frames
  of its first obs stack, and it is listed ``complete=False``.
* The newest slot's transition has no next frame yet and is left out, unless a later checkpoint
  continues it; that episode stays "in progress".
* Every gzip member's CRC and length is checked (each file is decompressed once, to its end): a damaged
  file is an error naming it. Arrays other than the four above are reported (a ``UserWarning``) and not
  imported.
"""

from __future__ import annotations

import gzip
import io
import math
import os
import pickle
import re
import sys
import warnings
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt
from tqdm import tqdm

from mmreplay.building import SiblingBuild
from mmreplay.dopamine_episodes import Slot, SlotEpisodes
from mmreplay.errors import CorruptStoreError
from mmreplay.store import ReplayStore

PathLike = str | os.PathLike[str]

ARRAYS = ("$store$_observation", "$store$_action", "$store$_reward", "$store$_terminal")
COUNTERS = ("add_count", "invalid_range")
EPISODE_ENDS = "episode_end_indices"
STACK_PADDINGS = ("zeros", "first")  # the default first
_CHECKPOINT_FILE = re.compile(r"^(.+)_ckpt\.(\d+)\.gz$")


def checkpoint_file(directory: Path, name: str, checkpoint: int) -> Path:
    return directory / f"{name}_ckpt.{checkpoint}.gz"


_MAX_ROW_BYTES = 1 << 30  # one row (a frame) of a .npy array
_MAX_ELEMENTS = 1 << 40  # declared elements: far beyond any file, far below int64's limit
_READ_BLOCK_BYTES = 1 << 26  # rows are read at most this many bytes at a time
_SMALL_BYTES = 1 << 20  # add_count, invalid_range
_COLUMN_BYTES = 1 << 28  # action, reward, terminal: one number per slot (64 million int32 slots)


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
    terminal (one number per slot, at most ``_COLUMN_BYTES``); a header declaring more is refused."""
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


def _ordered(directory: Path, found: list[Checkpoint]) -> list[Checkpoint]:
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


@dataclass
class _Ring:
    """One checkpoint's ring: frames (a memory map), the small arrays, and its episode-end slots."""

    frames: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    terminal: np.ndarray
    ends: np.ndarray  # bool per ring slot: an episode ended there (terminal, or a time limit)


def _load_ring(directory: Path, checkpoint: Checkpoint, spill: Path | None, block: int = 4096) -> _Ring:
    number = checkpoint.number
    action, reward, terminal = (read_array(checkpoint_file(directory, name, number), _COLUMN_BYTES)
                                for name in ARRAYS[1:])
    terminal = terminal.astype(bool)
    ends = terminal.copy()
    if checkpoint.has_episode_ends:
        slots = np.array(sorted(read_episode_ends(checkpoint_file(directory, EPISODE_ENDS, number))), np.int64)
        if len(slots) and (slots.min() < 0 or slots.max() >= checkpoint.capacity):
            raise CorruptStoreError(f"{checkpoint_file(directory, EPISODE_ENDS, number)}: slots outside "
                                    f"[0, {checkpoint.capacity})")
        ends[slots] = True
    frames = (spill_frames(checkpoint_file(directory, ARRAYS[0], number), spill, block) if spill is not None
              else np.empty((0,), np.uint8))
    return _Ring(frames, action, reward, terminal, ends)


def _padding_runs(checkpoint: Checkpoint, ring: _Ring) -> list[int]:
    """Lengths of the runs of all-zero slots (action, reward, terminal) after each episode end that the
    files show whole (a run cut by the newest slot is not counted); also the run at written slot 0."""
    start, stop, capacity = checkpoint.first, checkpoint.add_count, checkpoint.capacity
    order = np.arange(start, stop) % capacity
    zero = (ring.action[order] == 0) & (ring.reward[order] == 0) & ~ring.terminal[order]
    ends = ring.ends[order]
    runs = []
    boundaries = np.flatnonzero(ends) + 1
    if start == 0:
        boundaries = np.concatenate([[0], boundaries])
    for begin in boundaries.tolist():
        nonzero = np.flatnonzero(~zero[begin:])
        if len(nonzero):
            runs.append(int(nonzero[0]))
    return runs


def _writer_padding(directory: Path, found: list[Checkpoint], writer_stack_size: int | None) -> int | None:
    """The padding slots written before each episode (the writer's stack_size - 1), from the files;
    checked against ``writer_stack_size`` when given. None when the files hold no padding to skip."""
    runs = []
    for checkpoint in found:
        runs += _padding_runs(checkpoint, _load_ring(directory, checkpoint, None))
    if writer_stack_size is not None:
        padding = writer_stack_size - 1
        if runs and min(runs) < padding:
            raise ValueError(f"writer_stack_size={writer_stack_size} means {padding} padding slots before each "
                             f"episode; the files show only {min(runs)} after an episode end")
        return padding
    if not runs:
        return None
    return min(runs)


def import_dopamine(
    directory: PathLike,
    store_path: PathLike,
    *,
    checkpoints: Sequence[int] | None = None,
    stack_size: int = 4,
    writer_stack_size: int | None = None,
    stack_padding: str = "zeros",
    capacity: int | None = None,
    block_slots: int = 4096,
    progress: bool = False,
) -> int:
    """Create a store at ``store_path`` from Dopamine checkpoints; returns the transitions imported.

    ``checkpoints`` lists checkpoint numbers in the order they were written (default: all in
    ``directory``, ascending, the final log of a batch_rl run included). ``stack_size`` is the store's;
    the writer's (which sets the padding slots to skip) is found in the files, or given as
    ``writer_stack_size``. ``stack_padding="zeros"`` (default) zero-pads stacks at an episode start as
    Dopamine does; ``"first"`` repeats the first frame. ``capacity`` defaults to the slots read (at
    least every transition); ``block_slots`` slots are decompressed and handed on at a time. Every
    file is checked before anything is written; the store appears at ``store_path`` only once complete
    (built beside it, then renamed).
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise FileNotFoundError(f"no Dopamine checkpoint directory at {str(folder)!r}")
    if stack_padding not in STACK_PADDINGS:
        raise ValueError(f"stack_padding must be one of {STACK_PADDINGS}; got {stack_padding!r}")
    for name, value in (("stack_size", stack_size), ("writer_stack_size", writer_stack_size),
                        ("block_slots", block_slots)):
        if value is not None and (not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1):
            raise ValueError(f"{name} must be a positive int; got {value!r}")
    numbers = find_checkpoints(folder) if checkpoints is None else [int(n) for n in checkpoints]
    if not numbers:
        raise FileNotFoundError(f"{folder} holds no Dopamine checkpoint files (<name>_ckpt.<N>.gz)")
    found = _ordered(folder, [check_checkpoint(folder, n) for n in numbers])
    padding = _writer_padding(folder, found, writer_stack_size)
    spans = _spans(found)
    slots = sum(stop - start for _, start, stop in spans)
    target = Path(store_path)
    with SiblingBuild(target, "importing", "a store") as build:
        store = ReplayStore.create(build.directory / "store", frame_shape=found[0].frame_shape,
                                   capacity=capacity or max(slots, 1), stack_size=stack_size, action_dtype=np.int32,
                                   stack_padding=stack_padding)
        with store, tqdm(total=slots, disable=not progress, file=sys.stderr, unit="slot",
                         desc="import-dopamine") as bar:
            episodes = SlotEpisodes(store, padding, zero_padded=stack_padding == "zeros")
            added = episodes.feed(_slots(folder, spans, build.directory / "spill.npy", bar, block_slots))
        build.commit(build.directory / "store")
    return added


def _spans(found: list[Checkpoint]) -> list[tuple[Checkpoint, int, int]]:
    """For each checkpoint, the written slots ``[start, stop)`` not already read from an earlier one."""
    spans, read_up_to = [], 0
    for checkpoint in found:
        start = max(checkpoint.first, read_up_to)
        if start < checkpoint.add_count:
            spans.append((checkpoint, start, checkpoint.add_count))
        read_up_to = max(read_up_to, checkpoint.add_count)
    return spans


def _slots(folder: Path, spans: list[tuple[Checkpoint, int, int]], spill: Path, bar: tqdm[Any],
           block: int) -> Iterator[Slot]:
    """Every slot to import, in written order; each observation file is decompressed once."""
    for checkpoint, start, stop in spans:
        ring = _load_ring(folder, checkpoint, spill, block)
        capacity = checkpoint.capacity
        for first in range(start, stop, block):
            last = min(stop, first + block)
            ring_slots = np.arange(first, last) % capacity
            frames = ring.frames[ring_slots]
            actions, rewards = ring.action[ring_slots].tolist(), ring.reward[ring_slots].tolist()
            terminals, ends = ring.terminal[ring_slots].tolist(), ring.ends[ring_slots].tolist()
            for i in range(last - first):
                yield first + i, frames[i], actions[i], rewards[i], terminals[i], ends[i]
            bar.update(last - first)
        del ring
        spill.unlink()
