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

import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from mmreplay.disk.atomic_builds import SiblingBuild
from mmreplay.dopamine.checkpoints import (
    ARRAYS,
    COLUMN_BYTES,
    EPISODE_ENDS,
    Checkpoint,
    check_checkpoint,
    checkpoint_file,
    find_checkpoints,
    ordered_checkpoints,
    read_array,
    read_episode_ends,
    spill_frames,
)
from mmreplay.dopamine.slot_episodes import Slot, SlotEpisodes
from mmreplay.errors import CorruptStoreError
from mmreplay.store import ReplayStore

PathLike = str | os.PathLike[str]

STACK_PADDINGS = ("zeros", "first")  # the default first


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
    action, reward, terminal = (read_array(checkpoint_file(directory, name, number), COLUMN_BYTES)
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
    """Create a store at ``store_path`` from Dopamine checkpoints.

    Every file is checked before anything is written; the store appears at ``store_path`` only once
    complete (built beside it, then renamed).

    Args:
        directory: the folder of Dopamine's ``<name>_ckpt.<N>.gz`` files.
        store_path: where the store goes; it must not exist.
        checkpoints: checkpoint numbers in the order they were written (None: all in ``directory``,
            ascending, the final log of a batch_rl run included).
        stack_size: the store's frames per obs.
        writer_stack_size: the stack size Dopamine wrote with, which sets the padding slots to skip
            (None: found in the files).
        stack_padding: ``"zeros"`` zero-pads stacks at an episode start as Dopamine does; ``"first"``
            repeats the first frame.
        capacity: the store's capacity (None: the slots read, at least every transition).
        block_slots: slots decompressed and handed on at a time.
        progress: show a progress bar on stderr.

    Returns:
        The transitions imported.

    Raises:
        FileNotFoundError: ``directory`` is not a folder, holds no checkpoint, or a checkpoint is
            incomplete.
        ValueError: ``stack_padding`` is not ``"zeros"`` or ``"first"``, a number is not a positive
            int, or ``writer_stack_size`` does not match the files' padding.
        CorruptStoreError: a checkpoint file is damaged, truncated or not what Dopamine writes.
        FileExistsError: ``store_path`` exists.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise FileNotFoundError(f"no Dopamine checkpoint directory at {str(folder)!r}")
    if stack_padding not in STACK_PADDINGS:
        raise ValueError(f"stack_padding must be one of {STACK_PADDINGS}; got {stack_padding!r}")
    for name, value in (("stack_size", stack_size), ("writer_stack_size", writer_stack_size),
                        ("capacity", capacity), ("block_slots", block_slots)):
        if value is not None and (not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1):
            raise ValueError(f"{name} must be a positive int; got {value!r}")
    numbers = find_checkpoints(folder) if checkpoints is None else [int(n) for n in checkpoints]
    if not numbers:
        raise FileNotFoundError(f"{folder} holds no Dopamine checkpoint files (<name>_ckpt.<N>.gz)")
    found = ordered_checkpoints(folder, [check_checkpoint(folder, n) for n in numbers])
    padding = _writer_padding(folder, found, writer_stack_size)
    spans = _spans(found)
    slots = sum(stop - start for _, start, stop in spans)
    target = Path(store_path)
    with SiblingBuild(target, "importing", "a store") as build:
        store = ReplayStore.create(build.directory / "store", frame_shape=found[0].frame_shape,
                                   capacity=max(slots, 1) if capacity is None else capacity, stack_size=stack_size, action_dtype=np.int32,
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
