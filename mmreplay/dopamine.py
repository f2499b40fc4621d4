"""Import Dopamine replay checkpoints (the DQN Replay Dataset's format) into a store, streaming.

Dopamine's ``OutOfGraphReplayBuffer.save`` writes each array with ``np.save`` into a gzip file named
``<name>_ckpt.<N>.gz``: ``$store$_observation`` (capacity, *frame) uint8 holding one frame per *slot*
(the newest frame only), ``$store$_action`` int32, ``$store$_reward`` float32, ``$store$_terminal``
uint8, and the 0-d ``add_count`` (slots ever written; the write cursor is ``add_count % capacity``) and
``invalid_range``. Slot i holds (observation, action, reward, terminal) of one step: the next
observation is slot i + 1's. Before an episode's first slot, ``stack_size - 1`` zero *padding* slots
were written (at the very start, and after every terminal slot).

Import rules (documented in the README):

* Slots are read in the order they were written: checkpoint N holds the written slots
  ``[add_count - capacity, add_count)``. Consecutive checkpoints continue each other (slots already
  read are skipped where they overlap; a gap cuts the episode in progress), so an episode may span two
  checkpoint files.
* Padding slots are skipped; episodes start with their first frame repeated (mmreplay's convention).
* A terminal slot's next frame was never stored: it is imported as an all-zero frame, which is also what
  Dopamine's own sampler returns there (the padding slot after it). Terminal means ``terminated``; the
  format records no truncations.
* Where the ring wrapped, the slots at the write cursor are the oldest: their episode's start was
  overwritten, so its first ``stack_size - 1`` slots only provide the frames of the first obs stack.
  Leading all-zero slots there are taken to be padding, and the episode after them as complete.
* The newest slot's transition has no next frame yet and is left out, unless a later checkpoint
  continues it; that episode stays "in progress".
"""

from __future__ import annotations

import gzip
import math
import itertools
import os
import re
import shutil
import sys
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt
from tqdm import tqdm

from mmreplay.errors import CorruptStoreError
from mmreplay.store import ReplayStore

PathLike = str | os.PathLike[str]

ARRAYS = ("$store$_observation", "$store$_action", "$store$_reward", "$store$_terminal")
COUNTERS = ("add_count", "invalid_range")
_CHECKPOINT = re.compile(r"^\$store\$_observation_ckpt\.(\d+)\.gz$")


def checkpoint_file(directory: Path, name: str, checkpoint: int) -> Path:
    return directory / f"{name}_ckpt.{checkpoint}.gz"


_MAX_ROW_BYTES = 1 << 30  # one row (a frame) of a .npy array
_MAX_ELEMENTS = 1 << 40  # declared elements: far beyond any file, far below int64's limit
_READ_BLOCK_BYTES = 1 << 26  # rows are read at most this many bytes at a time
_SMALL_BYTES = 1 << 20  # add_count, invalid_range


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


def stream_rows(path: Path, start: int, stop: int, block: int) -> Iterator[np.ndarray]:
    """Rows ``[start, stop)`` of a gzip'd ``.npy`` array, ``block`` rows at a time, never all at once."""
    with gzip.open(path, "rb") as stream:
        header = read_npy_header(stream, str(path))  # type: ignore[arg-type]
        row_bytes = header.dtype.itemsize * math.prod(header.shape[1:])
        block = max(1, min(block, _READ_BLOCK_BYTES // max(1, row_bytes)))  # reads stay bounded in bytes
        try:
            stream.seek(header.offset + start * row_bytes)  # gzip seeks forward by decompressing
            for first in range(start, stop, block):
                count = min(block, stop - first)
                data = stream.read(count * row_bytes)
                if len(data) != count * row_bytes:
                    raise CorruptStoreError(f"{path}: ends after {len(data)} of {count * row_bytes} bytes "
                                            f"at row {first}: the file is truncated")
                yield np.frombuffer(data, header.dtype).reshape(count, *header.shape[1:])
        except (OSError, EOFError, zlib.error) as error:
            raise CorruptStoreError(f"{path}: the gzip stream is corrupt ({error})") from None


def read_small(path: Path) -> np.ndarray:
    """A small gzip'd ``.npy`` array (``add_count``, ``invalid_range``), read whole."""
    with gzip.open(path, "rb") as stream:
        header = read_npy_header(stream, str(path))  # type: ignore[arg-type]
        size = header.dtype.itemsize * math.prod(header.shape)
        if size > _SMALL_BYTES:
            raise CorruptStoreError(f"{path}: declares {size} bytes (shape {header.shape}); expected a small array")
        try:
            data = stream.read(size)
        except (OSError, EOFError, zlib.error) as error:
            raise CorruptStoreError(f"{path}: the gzip stream is corrupt ({error})") from None
    if len(data) != size:
        raise CorruptStoreError(f"{path}: truncated ({len(data)} of {size} bytes)")
    return np.frombuffer(data, header.dtype).reshape(header.shape)


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint's files, checked: its ring holds the written slots ``[first, add_count)``."""

    number: int
    capacity: int
    frame_shape: tuple[int, ...]
    add_count: int

    @property
    def first(self) -> int:
        return max(0, self.add_count - self.capacity)


def find_checkpoints(directory: Path) -> list[int]:
    return sorted(int(m.group(1)) for p in directory.iterdir() if (m := _CHECKPOINT.match(p.name)))


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
    add_count = read_small(checkpoint_file(directory, "add_count", number))
    if add_count.shape != () or add_count.dtype.kind not in "iu" or int(add_count) < 0:
        raise CorruptStoreError(f"{checkpoint_file(directory, 'add_count', number)}: expected a 0-d count; "
                                f"got {add_count.dtype} {add_count.shape}")
    invalid = read_small(checkpoint_file(directory, "invalid_range", number))
    if int(add_count) % capacity not in set(invalid.astype(np.int64).ravel().tolist()):
        raise CorruptStoreError(f"{checkpoint_file(directory, 'invalid_range', number)}: does not hold the write "
                                f"cursor slot {int(add_count) % capacity}: files of different checkpoints mixed?")
    return Checkpoint(number, capacity, tuple(observation.shape[1:]), int(add_count))


def import_dopamine(
    directory: PathLike,
    store_path: PathLike,
    *,
    checkpoints: Sequence[int] | None = None,
    stack_size: int = 4,
    capacity: int | None = None,
    block_slots: int = 4096,
    progress: bool = False,
) -> int:
    """Create a store at ``store_path`` from Dopamine checkpoints; returns the transitions imported.

    ``checkpoints`` lists checkpoint numbers in the order they were written (default: all in
    ``directory``, ascending). ``capacity`` defaults to the slots read (at least every transition).
    Every file is checked before the store is created; a failed import removes the store.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise FileNotFoundError(f"no Dopamine checkpoint directory at {str(folder)!r}")
    numbers = find_checkpoints(folder) if checkpoints is None else [int(n) for n in checkpoints]
    if not numbers:
        raise FileNotFoundError(f"{folder} holds no $store$_observation_ckpt.<N>.gz files")
    found = [check_checkpoint(folder, n) for n in numbers]
    for before, after in itertools.pairwise(found):
        if after.frame_shape != before.frame_shape:
            raise CorruptStoreError(f"checkpoint {after.number} has frames {after.frame_shape}; checkpoint "
                                    f"{before.number} has {before.frame_shape}")
        if after.add_count <= before.add_count:
            raise ValueError(f"checkpoints must be given in the order they were written: checkpoint {after.number} "
                             f"(add_count {after.add_count}) is not newer than {before.number} "
                             f"(add_count {before.add_count})")
    spans = _spans(found)
    slots = sum(stop - start for _, start, stop in spans)
    target = Path(store_path)
    store = ReplayStore.create(target, frame_shape=found[0].frame_shape, capacity=capacity or max(slots, 1),
                               stack_size=stack_size, action_dtype=np.int32)
    try:
        with tqdm(total=slots, disable=not progress, file=sys.stderr, unit="slot", desc="import-dopamine") as bar:
            added = _Episodes(store).feed(_slots(folder, spans, block_slots, bar))
        store.close()
    except BaseException:
        store.close()
        shutil.rmtree(target, ignore_errors=True)
        raise
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


Slot = tuple[int, npt.NDArray[np.uint8], int, float, bool]  # written slot number, frame, action, reward, terminal


def _slots(folder: Path, spans: list[tuple[Checkpoint, int, int]], block: int, bar: tqdm[Any]) -> Iterator[Slot]:
    """Every slot to import, in written order; each ring is read in at most two passes (it may wrap)."""
    for checkpoint, start, stop in spans:
        capacity = checkpoint.capacity
        pieces = [(start, min(stop, start - start % capacity + capacity))]
        if pieces[0][1] < stop:
            pieces.append((pieces[0][1], stop))
        for first, last in pieces:
            ring = first % capacity
            streams = [stream_rows(checkpoint_file(folder, name, checkpoint.number), ring, ring + last - first, block)
                       for name in ARRAYS]
            slot = first
            for frames, actions, rewards, terminals in zip(*streams):
                for i in range(len(frames)):
                    yield slot, frames[i], int(actions[i]), float(rewards[i]), bool(terminals[i])
                    slot += 1
                bar.update(len(frames))


class _Episodes:
    """Rebuilds episodes from slots and adds their transitions (as stacks) to the store."""

    def __init__(self, store: ReplayStore) -> None:
        self.store = store
        self.stack = store.stack_size
        self.zero = np.zeros(store.frame_shape, np.uint8)
        self.history: deque[npt.NDArray[np.uint8]] | None = None  # the episode's newest frames
        self.pending: tuple[int, float] | None = None  # the previous slot's action and reward
        self.padding = 0  # padding slots still to skip
        self.known_start = False  # the next slot after padding starts an episode (not a fragment)
        self.presumed_padding = 0  # leading all-zero slots skipped where the ring wrapped
        self.added = 0

    def feed(self, slots: Iterator[Slot]) -> int:
        expected = None
        for slot, frame, action, reward, terminal in slots:
            if slot != expected:
                self._cut(slot)
            expected = slot + 1
            if self.padding:
                self.padding -= 1
                continue
            if self.history is None:
                if not self.known_start and self._skip_presumed_padding(frame, action, reward, terminal):
                    continue
                complete = self.known_start or self.presumed_padding > 0
                self.history = deque([frame] * (self.stack if complete else 1), maxlen=self.stack)
            else:
                self._emit(frame, terminated=False)
                self.history.append(frame)
            self.pending = (action, reward)
            if terminal:
                self._emit(self.zero, terminated=True)
                self.history, self.pending, self.padding = None, None, self.stack - 1
                self.known_start = True
        return self.added

    def _cut(self, slot: int) -> None:
        """Slots resume at ``slot`` after a gap (or at the start): the episode in progress ends here."""
        self.history, self.pending, self.presumed_padding = None, None, 0
        self.known_start = slot == 0
        self.padding = self.stack - 1 if slot == 0 else 0  # Dopamine pads before the first episode

    def _skip_presumed_padding(self, frame: np.ndarray, action: int, reward: float, terminal: bool) -> bool:
        zero = not frame.any() and action == 0 and reward == 0 and not terminal
        if zero and self.presumed_padding < self.stack - 1:
            self.presumed_padding += 1
            return True
        return False

    def _emit(self, next_frame: npt.NDArray[np.uint8], *, terminated: bool) -> None:
        history = self.history
        assert history is not None and self.pending is not None
        if len(history) < self.stack:
            return  # still collecting the first obs stack of an episode whose start was overwritten
        obs = np.stack(history)
        next_obs = np.concatenate([obs[1:], next_frame[None]])
        action, reward = self.pending
        self.store.add(obs, np.int32(action), np.float32(reward), next_obs, terminated, False)
        self.added += 1
