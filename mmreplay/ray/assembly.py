"""Joining the shards' encoded answers into the learner's batches, decoded in one compiled call each.

Vocabulary: a *group* is ``G`` batches of ``batch_size`` transitions drawn together; each shard answers
a group with one *part* holding its rows for all ``G`` batches, batch after batch (``counts[g]`` rows
for batch g): an ``EncodedBatch``, from a shard actor or from a co-located shard's store read directly.
``GroupBatches`` lays the parts' rows out as the batches are (batch g: its rows from shard 0, then
shard 1, ..., as ``ShardedReplay.sample`` joins them), turns each shard's steps into global ids,
rescales its importance weights to the global minimum priority, and decodes batch g's frames, from
every part's blocks in one call, straight into the array it returns.

Everything but the frames is done once per group with numpy calls over all its rows: the per-batch
work is one slice of each field and one decode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from mmreplay import Batch, BlockBatches, BlockRefs, EncodedBatch, EncodedSequenceBatch, SequenceBatch, decode_blocks

SHARD_BITS, EPOCH_BITS, STEP_BITS = 16, 8, 40
_FIELDS = ("action", "reward", "terminated", "truncated", "env_index", "discount")


def global_ids(shard: int, epoch: int, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The global ids of a shard's steps sampled in ``epoch``: ``shard << 48 | epoch << 40 | step``.

    Args:
        shard: the shard's index.
        epoch: the shard's epoch at the draw (it grows at each restart).
        steps: the shard store's steps.

    Returns:
        int64 global ids, shaped as ``steps``.
    """
    return (np.int64(shard) << (EPOCH_BITS + STEP_BITS)) | (np.int64(epoch) << STEP_BITS) | steps


def split_ids(ids: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The (shard, epoch, step) of each global id, ``shard << 48 | epoch << 40 | step``.

    Args:
        ids: int64 global ids, as a sharded batch's ``index`` holds them.

    Returns:
        Three int64 arrays shaped as ``ids``: shards, epochs and steps.
    """
    return ids >> (EPOCH_BITS + STEP_BITS), (ids >> STEP_BITS) & ((1 << EPOCH_BITS) - 1), ids & ((1 << STEP_BITS) - 1)


@dataclass(frozen=True)
class Part:
    """One shard's answer for a group: ``batch`` holds ``counts[g]`` rows for batch g, batch after batch,
    drawn when the shard's state was ``info`` (its ``epoch`` and ``min_leaf``)."""

    shard: int
    batch: EncodedBatch
    info: dict[str, Any]
    counts: npt.NDArray[np.int64]


def weight_scale(info: dict[str, Any], global_min: float, beta: float) -> np.float32:
    """What turns a shard's importance weights (normalised by its own smallest leaf) into weights
    normalised by the smallest leaf over all shards: ``(min_k / min)^-beta``."""
    return np.float32((info["min_leaf"] / global_min) ** -beta)


def frame_columns(index: npt.NDArray[np.int64], stack_size: int, columns: int) -> npt.NDArray[np.int64]:
    """A part's frame index (rows, c) with ``columns`` columns: obs is the first ``stack_size``, next_obs
    the last. ``stack_size + 1`` columns (obs and next_obs share frames) widen to ``2 * stack_size``."""
    if index.shape[-1] == columns:
        return index
    shared = np.r_[0:stack_size, 1 : stack_size + 1]
    return index[..., shared]


def row_order(counts: Sequence[npt.NDArray[np.int64]], batch_size: int) -> npt.NDArray[np.int64]:
    """Where each row of the ``G`` batches of a group comes from among the parts' rows, joined part after part.

    Batch g's rows are part 0's ``counts[0][g]`` rows for it, then part 1's, ...; each part holds its rows
    for all the batches, batch after batch.

    Args:
        counts: each part's (G,) rows per batch, in the parts' order.
        batch_size: the rows of each batch (every batch's counts add up to it).

    Returns:
        (G * batch_size,) int64: row i of the batches, batch after batch, is row ``order[i]`` of the parts'
        rows joined.
    """
    table = np.stack(counts, axis=1)  # (G, parts)
    groups = len(table)
    assert (table.sum(axis=1) == batch_size).all(), "each batch's parts add up to batch_size"
    # Part p's rows for batch g start at first[g, p] in the part and at within[g, p] in the batch.
    first = np.cumsum(table, axis=0) - table
    within = np.cumsum(table, axis=1) - table
    starts = batch_size * np.arange(groups)[:, None] + within
    positions = []
    for p in range(table.shape[1]):
        batch_of_row = np.repeat(np.arange(groups), table[:, p])
        positions.append(starts[batch_of_row, p] + np.arange(len(batch_of_row)) - first[batch_of_row, p])
    order = np.empty(groups * batch_size, np.int64)
    order[np.concatenate(positions)] = np.arange(groups * batch_size)
    return order


class GroupBatches:
    """The ``G`` batches of one group, from the shards' parts (see the module docstring)."""

    def __init__(
        self, parts: Sequence[Part], *, batch_size: int, stack_size: int, global_min: float, beta: float,
        decode_threads: int | None = None,
    ) -> None:
        parts = sorted(parts, key=lambda part: part.shard)
        groups = len(parts[0].counts)
        order = row_order([part.counts for part in parts], batch_size)
        self.stack_size = stack_size
        self.batch_size = batch_size
        self.columns = stack_size + 1
        if any(part.batch.frame_index.shape[1] != stack_size + 1 for part in parts):  # obs, next_obs apart
            self.columns = 2 * stack_size
        # Every part's blocks, in the batches' row order, checked once: a batch's frames decode in one call.
        joined = BlockRefs.join(
            [part.batch.frames.blocks(frame_columns(part.batch.frame_index, stack_size, self.columns)).from_source(p)
             for p, part in enumerate(parts)],
            order,
        )
        self.frames = BlockBatches([part.batch.frames for part in parts], joined, batches=groups,
                                   decode_threads=decode_threads)
        columns = joined_columns([(part.shard, part.batch, part.info) for part in parts], global_min=global_min,
                                 beta=beta)
        self.fields: dict[str, Any] = {name: values[order] for name, values in columns.items()}
        self.user_fields = joined_user_fields([part.batch for part in parts], order)

    def batch(self, g: int) -> Batch:
        """Batch g of the group, its frames decoded into a new array (obs and next_obs view it)."""
        pixels = self.frames.decode(g).reshape(self.batch_size, self.columns, *self.frames.frame_shape)
        rows = slice(g * self.batch_size, (g + 1) * self.batch_size)
        size = self.stack_size
        return Batch(obs=pixels[:, :size], next_obs=pixels[:, -size:],
                     **{name: array[rows] for name, array in self.fields.items()},
                     user_fields={name: array[rows] for name, array in self.user_fields.items()})


def join_batches(parts: Sequence[tuple[int, Batch, dict[str, Any]]], *, global_min: float, beta: float) -> Batch:
    """Decoded parts of one batch (shard, its rows, its info), joined shard after shard as ``GroupBatches``
    lays out a batch: global ids, weights rescaled to the global minimum.

    Args:
        parts: each shard's rows, in shard order.
        global_min: the smallest priority leaf over the shards.
        beta: the importance exponent the rows were drawn with.

    Returns:
        The joined batch.
    """
    batches = [batch for _, batch, _ in parts]
    return Batch(obs=np.concatenate([batch.obs for batch in batches]),
                 next_obs=np.concatenate([batch.next_obs for batch in batches]),
                 **joined_columns(parts, global_min=global_min, beta=beta), user_fields=joined_user_fields(batches))


def joined_columns(
    parts: Sequence[tuple[int, Batch | EncodedBatch, dict[str, Any]]], *, global_min: float, beta: float
) -> dict[str, npt.NDArray[Any]]:
    """The rows' columns other than frames, part after part (shard, its rows, its info): theirs as drawn,
    ``index`` as global ids and ``weight`` rescaled to the global minimum.

    Args:
        parts: each shard's rows, decoded or encoded, in the order they are joined.
        global_min: the smallest priority leaf over the shards.
        beta: the importance exponent the rows were drawn with.

    Returns:
        Each column joined, by name.
    """
    columns = {name: np.concatenate([getattr(rows, name) for _, rows, _ in parts]) for name in _FIELDS}
    columns["index"] = np.concatenate([global_ids(k, info["epoch"], rows.index) for k, rows, info in parts])
    columns["weight"] = np.concatenate([rows.weight * weight_scale(info, global_min, beta)
                                        for _, rows, info in parts]).astype(np.float32, copy=False)
    return columns


def join_sequences(
    parts: Sequence[tuple[int, EncodedSequenceBatch, dict[str, Any]]], *, stack_size: int, global_min: float,
    beta: float, decode_threads: int | None = None,
) -> SequenceBatch:
    """The shards' encoded windows (shard, windows, its info), shard after shard, as one ``SequenceBatch``:
    global ids (-1 past a window's end), weights rescaled to the global minimum, every frame decoded in
    one call (on at most ``decode_threads`` threads)."""
    columns = stack_size + 1
    if any(part.frame_index.shape[-1] != stack_size + 1 for _, part, _ in parts):
        columns = 2 * stack_size
    refs = BlockRefs.join([part.frames.blocks(frame_columns(part.frame_index, stack_size, columns)).from_source(p)
                           for p, (_, part, _) in enumerate(parts)])
    mask = np.concatenate([part.mask for _, part, _ in parts])
    frame_shape = parts[0][1].frames.frame_shape
    pixels = np.empty((*mask.shape, columns, *frame_shape), np.uint8)
    decode_blocks([part.frames for _, part, _ in parts], refs, pixels.reshape(-1, *frame_shape),
                  decode_threads=decode_threads)
    pixels[~mask] = 0
    columns = joined_window_columns(parts, global_min=global_min, beta=beta)
    del columns["mask"]
    return SequenceBatch(obs=pixels[:, :, :stack_size], next_obs=pixels[:, :, -stack_size:], mask=mask, **columns,
                         user_fields=joined_user_fields([part for _, part, _ in parts]))


def joined_window_columns(
    parts: Sequence[tuple[int, EncodedSequenceBatch, dict[str, Any]]], *, global_min: float, beta: float
) -> dict[str, npt.NDArray[Any]]:
    """The windows' columns other than frames, part after part (shard, its windows, its info): theirs as
    drawn, ``index`` as global ids (-1 past a window's end) and ``weight`` rescaled to the global minimum.

    Args:
        parts: each shard's encoded windows, in the order they are joined.
        global_min: the smallest priority leaf over the shards.
        beta: the importance exponent the windows were drawn with.

    Returns:
        Each column joined, by name.
    """
    columns: dict[str, npt.NDArray[Any]] = {
        name: np.concatenate([getattr(part, name) for _, part, _ in parts])
        for name in ("action", "reward", "terminated", "truncated", "env_index", "mask")
    }
    columns["index"] = np.concatenate([
        np.where(part.index >= 0, global_ids(k, info["epoch"], np.maximum(part.index, 0)), -1)
        for k, part, info in parts])
    columns["weight"] = np.concatenate([part.weight * weight_scale(info, global_min, beta)
                                        for _, part, info in parts]).astype(np.float32, copy=False)
    return columns


class SequenceParts:
    """The ``G`` batches of windows of one group, from the shards' parts (``Part.batch`` an
    ``EncodedSequenceBatch`` holding ``counts[g]`` windows for batch g, batch after batch): batch g holds
    each shard's windows for it, shard after shard, as ``join_sequences`` joins one batch's.

    As ``GroupBatches`` does for transitions, the windows are laid out and every reference checked once,
    for the whole group; each batch is then a slice of each field and one compiled decode.
    """

    def __init__(
        self, parts: Sequence[Part], *, batch_size: int, stack_size: int, global_min: float, beta: float,
        decode_threads: int | None = None,
    ) -> None:
        parts = sorted(parts, key=lambda part: part.shard)
        windows: list[EncodedSequenceBatch] = [part.batch for part in parts]  # type: ignore[misc]
        groups = len(parts[0].counts)
        order = row_order([part.counts for part in parts], batch_size)
        self.batch_size, self.stack_size, self.columns = batch_size, stack_size, stack_size + 1
        if any(part.frame_index.shape[-1] != stack_size + 1 for part in windows):  # obs, next_obs apart
            self.columns = 2 * stack_size
        joined = BlockRefs.join([part.frames.blocks(frame_columns(part.frame_index, stack_size, self.columns))
                                 .from_source(p) for p, part in enumerate(windows)], order)
        self.frames = BlockBatches([part.frames for part in windows], joined, batches=groups,
                                   decode_threads=decode_threads)
        columns = joined_window_columns([(part.shard, part.batch, part.info) for part in parts],  # type: ignore[misc]
                                        global_min=global_min, beta=beta)
        self.fields = {name: values[order] for name, values in columns.items()}
        self.user_fields = joined_user_fields(windows, order)

    def __len__(self) -> int:
        return self.frames.batches

    def batch(self, g: int) -> SequenceBatch:
        """Batch g of the group, its frames decoded in one call into a new array (obs and next_obs view it).

        Args:
            g: the batch's position in the group.

        Returns:
            Its windows, shard after shard; pixels past a window's end are zero.
        """
        rows = slice(g * self.batch_size, (g + 1) * self.batch_size)
        mask = self.fields["mask"][rows]
        pixels = self.frames.decode(g).reshape(*mask.shape, self.columns, *self.frames.frame_shape)
        pixels[~mask] = 0
        size = self.stack_size
        return SequenceBatch(obs=pixels[:, :, :size], next_obs=pixels[:, :, -size:],
                             **{name: array[rows] for name, array in self.fields.items()},
                             user_fields={name: array[rows] for name, array in self.user_fields.items()})


def joined_user_fields(
    parts: Sequence[Batch | EncodedBatch | EncodedSequenceBatch], order: npt.NDArray[np.int64] | None = None
) -> dict[str, npt.NDArray[np.generic]]:
    """The parts' user fields joined part after part (then in ``order``, when given), by name.

    Args:
        parts: the shards' answers (encoded, or decoded by a reader), each with the same fields (one
            replay's).
        order: the joined rows' order in the batches (None: as joined).

    Returns:
        Each field's rows of every part (empty for a replay without fields).
    """
    joined = {}
    for name in parts[0].fields:
        values = np.concatenate([part.fields[name] for part in parts])
        joined[name] = values if order is None else values[order]
    return joined
