"""Reading stored transitions back: rows, rebuilt stacks and decoded pixels, assembled into batches.

Frames are located through the transition rows and the frame table's episode links (``stacking``),
then decoded in one call per batch straight into the arrays the batch returns: new arrays, or those of
an ``out`` batch that an earlier call returned, refilled in place (no allocation, no page faults).
"""

from __future__ import annotations

import copy
import math
from dataclasses import fields
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from mmreplay import extensions
from mmreplay.batch import Batch, SequenceBatch
from mmreplay.frames.ring import FrameChecksumError, FrameRing
from mmreplay.frames.threads import background_limit, batch_threads, helper_rows, thread_limit
from mmreplay.limits import check_memory
from mmreplay.rows import stacking
from mmreplay.rows.episode_windows import follow_episodes, n_step_returns
from mmreplay.rows.fields import FieldArrays, FieldTable
from mmreplay.rows.transitions import (
    TERMINATED,
    TRUNCATED,
    TransitionTable,
    detached_rows,
    next_frame_steps,
    row_envs,
    row_flags,
)

T = TypeVar("T", Batch, SequenceBatch)

_lz4batch = extensions.load("_lz4batch")  # its read_transitions is ``transitions``' fast path
_NO_DETACHED = np.zeros(0, np.bool_)  # for _pixels_of: a batch the compiled read holds has no DETACHED row
COMPILED_MAX_STACK = 1024  # the largest stack_size the compiled read takes (_c/transition_read.c, read_transitions)
# What a frame of a batch costs beyond its pixels (its step, its table entry, its position and length,
# as int64 arrays): with the pixels, what a batch is checked against the memory the process can get.
FRAME_BOOKKEEPING_BYTES = 64
_CHECKED_FROM_BYTES = 64 << 20  # smaller batches are not checked (reading the machine's memory costs ~20 us)


class SharedOutError(ValueError):
    """``out`` cannot hold this batch: its obs and next_obs share frames, and a transition's do not."""


class TransitionReader:
    """Builds batches from a store's transition table and frame ring."""

    def __init__(
        self,
        table: TransitionTable,
        frames: FrameRing,
        *,
        stack_size: int,
        action_dtype: np.dtype,
        field_table: FieldTable | None = None,
        zero_padding: bool = False,
        decode_threads: int | None = None,
    ) -> None:
        """``decode_threads`` caps the threads a batch decodes on (None: the cores this process may use,
        resolved now; ``threads.thread_limit``)."""
        self.table = table
        self.field_table = field_table
        self.frames = frames
        self.stack_size = stack_size
        # Stacks at an episode start come back with all-zero padding frames (stack_padding="zeros").
        self.zero_padding = zero_padding
        self.frame_shape = frames.frame_shape
        self.frame_dtype = frames.frame_dtype
        self.action_dtype = action_dtype
        # What the compiled read of a batch (``compiled_transitions``) needs, fixed for the reader's life.
        # A subclass that decodes its own way (encoded.EncodingReader keeps the frames compressed) reads
        # through its _decode: the compiled read, which decodes into the batch, is the base class's.
        self.compiled = (
            _lz4batch is not None and table.compiled_rows is not None and type(self)._decode is TransitionReader._decode
            and stack_size <= COMPILED_MAX_STACK
        )
        self._columns = (stack_size + 1, *self.frame_shape)  # frames per transition, then a frame's shape
        self._batch_action = table.batch_action
        # The most threads a batch decodes on; each batch takes batch_threads of its decoded size.
        self.thread_limit = thread_limit(decode_threads)
        self._row_nbytes = (stack_size + 1) * frames.frame_nbytes
        self._helper_rows = helper_rows(self._row_nbytes)  # smaller batches decode on the calling thread
        # (dtype, shape after the batch axis) of a batch's action, reward, terminated, truncated,
        # env_index, index, weight and discount: what an ``out`` batch's arrays must be.
        action = table.batch_action
        self._batch_arrays = [(action.base, action.shape)] + [
            (np.dtype(dtype), ()) for dtype in (np.float32, np.bool_, np.bool_, np.int64, np.int64, np.float32, np.float32)
        ]

    def for_background(self) -> TransitionReader:
        """This reader for a background thread whose consumer works meanwhile (``batches()``): the same
        files, decoding on ``threads.background_limit`` threads (never the consumer's core)."""
        reader = copy.copy(self)
        reader.thread_limit = background_limit(self.thread_limit)
        return reader

    def prefetch(self, steps: npt.NDArray[np.int64]) -> None:
        """Start fetching the rows of these steps into the CPU's caches, and return at once: a hint for a
        read of them that follows. Sampled rows of a large store each cost a page walk and a memory read;
        issued before the caller's other work on the batch (its weights, the batch's arrays), those
        overlap it rather than stalling the read (0.5 to 0.7 us of ~18 in a CartPole batch of a 1,000,000
        transition store)."""
        if self.compiled and len(steps):
            assert _lz4batch is not None and self.table.compiled_rows is not None
            _lz4batch.prefetch_rows(self.table.compiled_rows[0], self.table.row_slots, steps)

    def _threads(self, rows: int) -> int:
        """The threads a batch of ``rows`` transitions decodes on (``threads.batch_threads``)."""
        return 1 if rows < self._helper_rows else batch_threads(rows * self._row_nbytes, self.thread_limit)

    def check_batch(self, transitions: int, what: str) -> None:
        """Refuse a batch of ``transitions`` whose frames (``stack_size + 1`` each, from the header) would
        take more memory than the process can get (``StoreLimitError``), before anything is allocated."""
        nbytes = transitions * (self.stack_size + 1) * (self.frames.frame_nbytes + FRAME_BOOKKEEPING_BYTES)
        if nbytes >= _CHECKED_FROM_BYTES:
            check_memory(nbytes, f"{what} of {transitions:,} transitions of {self.stack_size + 1:,} frames "
                                 f"(the header's stack_size {self.stack_size:,}, plus one)")

    def transition_frames(self, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        self.check_batch(steps.size, "the frame steps")
        next_frames = next_frame_steps(self.table.read(steps), steps)
        return self.frames.stacks(next_frames, self.stack_size)

    def transitions(
        self,
        steps: npt.NDArray[np.int64],
        *,
        weight: npt.NDArray[np.float32],
        discount: npt.NDArray[np.float32],
        out: Batch | None = None,
        padded: bool = True,
    ) -> Batch:
        """The transitions with these steps (assumed stored); in ``out``'s arrays when given. ``discount``
        becomes the batch's: zeroed in place where a transition terminated (no bootstrapping past it). With
        ``padded=False`` a zero-padding store's stacks come back as stored (the first frame repeated):
        what the writer compares the next add's obs with."""
        self.check_batch(steps.size, "a batch")
        if self.compiled:
            if out is None:
                batch = self.compiled_transitions(steps, weight, discount, padded)
            else:
                batch = self._compiled_refill(out, steps, weight, discount, padded)
            if batch is not None:
                return batch
        fields = self.table.read_fields(steps)
        # In place, and count_nonzero rather than any(): numpy's ufunc calls cost microseconds on arrays
        # of a batch, as much as reading the batch's small frames (CartPole's: benchmarks/bench_classic.py).
        if np.count_nonzero(fields.terminated):
            discount[fields.terminated] = 0.0
        frames = self.frames.stacks(fields.next_frames, self.stack_size)
        pixels, separate = self._pixels_of(out, steps.shape, fields.detached)
        if separate:
            # Some next_obs was stored whole (or ``out`` has room for that): obs then next_obs, each
            # its own stack_size frames.
            frames = stacking.separate_frames(frames, fields.detached, self.frames.stacks)
        # Otherwise obs and next_obs are two views of one (B, stack_size + 1) array of frames: they share
        # stack_size - 1 frames, so each is decoded once, straight into the memory the batch returns.
        pixels = self._decode(frames, steps, pixels, padded=padded)
        return _filled(out, Batch(
            obs=pixels[:, : self.stack_size],
            action=fields.action,
            reward=fields.reward,
            next_obs=pixels[:, -self.stack_size :],
            terminated=fields.terminated,
            truncated=fields.truncated,
            index=steps,
            env_index=fields.env_index,
            weight=weight,
            discount=discount,
            user_fields=self._fields(steps),
        ))

    def compiled_transitions(
        self,
        steps: npt.NDArray[np.int64],
        weight: npt.NDArray[np.float32],
        discount: npt.NDArray[np.float32],
        padded: bool,
    ) -> Batch | None:
        """``transitions`` without ``out``, in one compiled call (``_lz4batch.read_transitions``): rows
        checked and unpacked, stacks followed and frames decoded straight into the new batch's arrays.
        None where that call does not read the batch (no segment views yet, a format version 4 or 5 reference
        ring, a DETACHED row, a row or frame that fails its check, a frame outside the segments mapped so far): the general
        path then reads it, and raises what failed. Every check of the general path is made here too.

        For small frames this is most of a batch's cost saved: CartPole's 16-byte frames decode in a
        fraction of the ~10 numpy and Python steps that the general path takes around its three compiled
        calls (``benchmarks/bench_classic.py``)."""
        rows = self.table.compiled_rows
        ring = self.frames.compiled_ring()
        if rows is None or ring is None:
            return None
        assert _lz4batch is not None
        n = len(steps)
        pixels = np.empty((n, *self._columns), self.frame_dtype)
        action = np.empty(n, self._batch_action)
        reward = np.empty(n, np.float32)
        terminated = np.empty(n, np.bool_)
        truncated = np.empty(n, np.bool_)
        env_index = np.empty(n, np.int64)
        if steps.dtype != np.int64 or not steps.flags.c_contiguous:
            steps = np.ascontiguousarray(steps, np.int64)
        if not _lz4batch.read_transitions(
            rows, ring, steps, (self.stack_size, self.zero_padding and padded),
            (pixels, action, reward, terminated, truncated, env_index, discount), self._threads(n),
        ):
            return None
        size = self.stack_size
        return Batch._assemble(
            pixels[:, :size], action, reward, pixels[:, -size:], terminated, truncated, steps, env_index, weight,
            discount, {} if self.field_table is None else self.field_table.read(steps),
        )

    def _compiled_refill(
        self,
        out: Batch,
        steps: npt.NDArray[np.int64],
        weight: npt.NDArray[np.float32],
        discount: npt.NDArray[np.float32],
        padded: bool,
    ) -> Batch | None:
        """``compiled_transitions`` into ``out``'s arrays: ``out`` refilled and returned, or None where
        that call declines or ``out`` is not a batch it can fill as it stands (obs and next_obs separate,
        or any array not the one this store's batch has): the general path then refills it, or raises
        what is wrong with it, in its own order. ``out``'s contents are then unspecified, as when the
        general path raises."""
        rows = self.table.compiled_rows
        ring = self.frames.compiled_ring()
        if rows is None or ring is None:
            return None
        assert _lz4batch is not None
        n = len(steps)
        try:
            pixels, separate = self._pixels_of(out, steps.shape, _NO_DETACHED)
        except ValueError:
            return None
        targets = (out.action, out.reward, out.terminated, out.truncated, out.env_index, out.index, out.weight,
                   out.discount)
        # Separate obs and next_obs hold 2 * stack_size frames a row: the compiled read's layout (stack_size + 1)
        # only for stacks of one frame.
        if (separate and self.stack_size > 1) or not all(
            type(target) is np.ndarray and target.dtype == dtype and target.shape[1:] == shape
            and len(target) == n and target.flags.c_contiguous and target.flags.writeable
            for target, (dtype, shape) in zip(targets, self._batch_arrays)
        ):
            return None
        if steps.dtype != np.int64 or not steps.flags.c_contiguous:
            steps = np.ascontiguousarray(steps, np.int64)
        assert pixels is not None
        if not _lz4batch.read_transitions(
            rows, ring, steps, (self.stack_size, self.zero_padding and padded), (pixels, *targets[:5], discount),
            self._threads(n),
        ):
            return None
        np.copyto(out.index, steps)
        np.copyto(out.weight, weight)
        np.copyto(out.discount, discount)
        if self.field_table is not None:
            return _filled(out, Batch._assemble(
                out.obs, out.action, out.reward, out.next_obs, out.terminated, out.truncated, out.index,
                out.env_index, out.weight, out.discount, self.field_table.read(steps),
            ))
        return out if not out.fields else None

    def n_step(
        self,
        steps: npt.NDArray[np.int64],
        *,
        n_step: int,
        gamma: float,
        weight: npt.NDArray[np.float32],
        newest_exclusive: int,
        out: Batch | None = None,
    ) -> Batch:
        """Transitions with n-step returns: up to ``n_step`` rewards of the same episode, and the
        next_obs and flags of the last of them (see ``windows``)."""
        self.check_batch(2 * steps.size, "a batch of n-step transitions (each with its last one's frames)")
        window, mask = follow_episodes(
            steps,
            n_step,
            rows_of=self.table.read,
            newest_exclusive=newest_exclusive,
            stacks=self.frames.stacks,
            stack_size=self.stack_size,
            table_path=self.table.path,
        )
        rows = self._window_rows(window, mask)
        returns, used = n_step_returns(rows["reward"], mask, gamma)
        last_column = used - 1
        first, last = rows[:, 0], rows[np.arange(len(steps)), last_column]
        first_frames = self.frames.stacks(next_frame_steps(first, steps), self.stack_size)
        obs_frames = stacking.obs_frames(first_frames, detached_rows(first), self.frames.stacks)
        last_steps = window[np.arange(len(steps)), last_column]
        next_frames = self.frames.stacks(next_frame_steps(last, last_steps), self.stack_size)[
            :, stacking.next_obs_columns(self.stack_size)
        ]
        frames = np.concatenate([obs_frames, next_frames], axis=1)
        pixels, _ = self._pixels_of(out, steps.shape, None)
        pixels = self._decode(frames, steps, pixels)
        return _filled(out, Batch(
            obs=pixels[:, : self.stack_size],
            action=first["action"].astype(self.action_dtype),
            reward=returns,
            next_obs=pixels[:, self.stack_size :],
            terminated=(row_flags(last) & TERMINATED) != 0,
            truncated=(row_flags(last) & TRUNCATED) != 0,
            index=steps,
            env_index=row_envs(first),
            weight=weight,
            # gamma^m, and 0 when the window ended by termination: r + discount * Q(next_obs) is the target.
            discount=(np.power(gamma, used) * ((row_flags(last) & TERMINATED) == 0)).astype(np.float32),
            user_fields=self._fields(steps),  # the window's first transition's, as obs and action
        ))

    def sequences(
        self,
        window: npt.NDArray[np.int64],
        mask: npt.NDArray[np.bool_],
        weight: npt.NDArray[np.float32],
        out: SequenceBatch | None = None,
    ) -> SequenceBatch:
        """Windows of transitions (from ``windows.follow_episodes``) with their pixels; in ``out``'s
        arrays when given."""
        batch_size, length = window.shape
        self.check_batch(window.size, "a batch of sequences")
        rows = self._window_rows(window, mask)
        # Positions past a window's end read its first transition's frames, then are zeroed: the frames
        # decode straight into the batch, one pass, which beats decoding each distinct frame once and
        # copying it into place (the copies of a (B, length) batch cost twice the decode).
        filled = np.where(mask, window, window[:, :1])
        next_frames = next_frame_steps(rows, window)
        next_frames = np.where(mask, next_frames, next_frames[:, :1]).reshape(-1)
        detached = detached_rows(rows)
        detached = np.where(mask, detached, detached[:, :1]).reshape(-1)
        frames = self.frames.stacks(next_frames, self.stack_size)
        pixels, separate = self._pixels_of(out, window.shape, detached)
        if separate:
            frames = stacking.separate_frames(frames, detached, self.frames.stacks)
        pixels = self._decode(frames, filled.reshape(-1), pixels)
        pixels[~mask.reshape(-1)] = 0
        pixels = pixels.reshape(batch_size, length, frames.shape[1], *self.frame_shape)
        return _filled(out, SequenceBatch(
            obs=pixels[:, :, : self.stack_size],
            action=rows["action"].astype(self.action_dtype),
            reward=rows["reward"].astype(np.float32),
            next_obs=pixels[:, :, -self.stack_size :],
            terminated=(row_flags(rows) & TERMINATED) != 0,
            truncated=(row_flags(rows) & TRUNCATED) != 0,
            mask=mask,
            index=np.where(mask, window, -1),
            env_index=row_envs(rows)[:, 0],
            weight=weight,
            user_fields=self._fields(window, mask),
        ))

    def _fields(self, steps: npt.NDArray[np.int64], mask: npt.NDArray[np.bool_] | None = None) -> FieldArrays:
        """The user fields of these steps (zero where ``mask`` is False); empty without a field table."""
        if self.field_table is None:
            return {}
        if mask is None:
            return self.field_table.read(steps)
        # Masked positions read the window's first step (always stored), then are zeroed.
        values = self.field_table.read(np.where(mask, steps, steps[:, :1]))
        for array in values.values():
            array[~mask] = 0
        return values

    def _window_rows(self, window: npt.NDArray[np.int64], mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.void]:
        """Rows (B, length) of a window's transitions; zero where the mask is False."""
        rows = np.zeros(window.shape, self.table.dtype)
        rows[mask] = self.table.read(window[mask])
        return rows

    def _pixels_of(
        self,
        out: Batch | SequenceBatch | None,
        batch_shape: tuple[int, ...],
        detached: npt.NDArray[np.bool_] | None,
    ) -> tuple[npt.NDArray[np.generic] | None, bool]:
        """Where to decode a batch's frames, and whether its obs and next_obs are separate stacks.

        ``detached`` marks the batch's rows (flattened) whose obs is not the next_obs chain shifted; None
        for a batch whose obs and next_obs are always separate (n-step). Without ``out``: no array yet,
        and separate stacks when some row is detached. With ``out``: the array that ``out.obs`` and
        ``out.next_obs`` view, as (*batch_shape, columns, *frame_shape), separate when it holds
        2 * stack_size frames per row (such an ``out`` takes any batch), shared when stack_size + 1 (it
        takes batches without detached rows only); ``out.index`` must have ``batch_shape``.
        """
        size = self.stack_size
        if out is None:
            return None, detached is None or bool(np.count_nonzero(detached))
        pixels = out.obs.base if isinstance(out.obs, np.ndarray) else None
        shared = pixels is not None and getattr(out.next_obs, "base", None) is pixels
        frame_count = math.prod(batch_shape) * math.prod(self.frame_shape)
        columns = [2 * size] if detached is None else [size + 1, 2 * size]
        if not (
            shared
            and isinstance(pixels, np.ndarray)
            and getattr(out.index, "shape", None) == batch_shape
            and pixels.dtype == self.frame_dtype
            and pixels.size in [frame_count * count for count in columns]
            and pixels.flags.c_contiguous
            and pixels.flags.writeable
        ):
            shapes = " or ".join(str((*batch_shape, count, *self.frame_shape)) for count in columns)
            raise ValueError(
                f"out must be a {type(out).__name__} that this store returned for the same call: index of "
                f"shape {batch_shape}, obs and next_obs viewing one writeable {self.frame_dtype} array of {shapes} frames"
            )
        assert isinstance(pixels, np.ndarray)
        separate = pixels.size == frame_count * 2 * size
        if not separate and detached is not None and detached.any():
            raise SharedOutError(
                f"out's obs and next_obs share {size - 1} frames, but this batch holds a transition whose "
                "next_obs was stored as given, not as obs shifted by one frame (the final observation of an "
                "episode); pass out=None, or a batch whose obs and next_obs are separate arrays"
            )
        return pixels.reshape(-1, pixels.size // frame_count, *self.frame_shape), separate

    def _decode(
        self,
        frames: npt.NDArray[np.int64],
        steps: npt.NDArray[np.int64],
        pixels: npt.NDArray[np.generic] | None = None,
        *,
        padded: bool = True,
    ) -> npt.NDArray[np.generic]:
        """Pixels (*frames.shape, *frame_shape) of the frames (one row per transition in ``steps``),
        decoded into ``pixels`` when given; padding frames zeroed in a zero-padding store."""
        if pixels is None:
            pixels = np.empty((*frames.shape, *self.frame_shape), self.frame_dtype)
        try:
            self.frames.decode_into(frames.reshape(-1), pixels.reshape(-1, *self.frame_shape), limit=self.thread_limit)
        except FrameChecksumError as error:
            needing = steps[(frames == error.frame_step).any(axis=1)]
            if len(needing) == 0:
                raise
            raise FrameChecksumError(
                f"{error} (read for transition {int(needing[0])})", frame_step=error.frame_step
            ) from None
        if self.zero_padding and padded:
            pixels.reshape(*frames.shape, -1)[stacking.padding_columns(frames, self.stack_size)] = 0
        return pixels


def _filled(out: T | None, batch: T) -> T:
    """``batch``, or, with ``out``, ``out`` with every field overwritten by ``batch``'s (whose pixels
    were already decoded into ``out``'s memory)."""
    if out is None:
        return batch
    if out.fields.keys() != batch.fields.keys():
        raise ValueError(f"out.fields has keys {list(out.fields)}; expected {list(batch.fields)}")
    pairs = [(item.name, getattr(out, item.name), getattr(batch, item.name)) for item in fields(batch)]
    pairs += [(f"fields[{name!r}]", out.fields[name], value) for name, value in batch.fields.items()]
    for name, target, value in pairs:
        if target.shape != value.shape or target.dtype != value.dtype:
            raise ValueError(
                f"out.{name} has {target.dtype}{list(target.shape)}; expected {value.dtype}{list(value.shape)}"
            )
        if not np.may_share_memory(target, value):  # obs and next_obs: decoded in place already
            np.copyto(target, value)
    return out
