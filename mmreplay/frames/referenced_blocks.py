"""Encoded frames whose blocks reference other frames (an encoded batch of a ``"lz4-reference"`` store),
decoded: the plan that lists each requested frame and, once each, the frames its block is compressed
against (and theirs), references first, then the decode; in one compiled call
(``_lz4batch.referenced_decode``) where the extension is built, else planned here in numpy and decoded by
``reference_codec.decode_batch``.

Frames are numbered across the sources (several ``EncodedFrames``, the shards of a batch) by a *global
id*: a frame's index in its source plus the frames of the sources before it. A frame's reference is an
earlier frame of the same source (``EncodedFrames.references``), so its global id is smaller, and listing
the entries by global id lists every reference before the frames that need it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from mmreplay import extensions
from mmreplay.frames import reference_codec
from mmreplay.frames.threads import batch_threads

_lz4batch: ModuleType | None = extensions.load("_lz4batch")  # its referenced_decode: plan and decode in one call

if TYPE_CHECKING:
    from mmreplay.frames.wire import BlockRefs, EncodedFrames


@dataclass(frozen=True)
class ReferencedPlan:
    """What ``reference_codec.decode_batch`` takes for m entries (requested rows 0..n-1 of ``out``, then
    the references no row asked for, in scratch rows n..), and each entry's source and frame number."""

    segments: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    checksums: npt.NDArray[np.uint32]
    seeds: npt.NDArray[np.int64]
    refs: npt.NDArray[np.int64]
    rows: npt.NDArray[np.int64]
    frames: npt.NDArray[np.int64]


def changed_rows_of(sources: Sequence[EncodedFrames]) -> bool:
    """Whether the referencing blocks of ``sources`` are changed rows (they must all agree)."""
    kinds = {source.changed_rows for source in sources if source.references is not None}
    if len(kinds) > 1:
        raise ValueError("the sources' referencing blocks mix changed rows (format version 5) and whole frames "
                         "(version 4); decode them in separate calls")
    return kinds != {False}


def _requested_frames(
    sources: Sequence[EncodedFrames], refs: BlockRefs
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Each of ``refs``' frames as (its source, its index there), checked against the sources."""
    if refs.frames is None:
        raise ValueError("refs has no frames (each reference's index in its source, as EncodedFrames.blocks "
                         "gives it); a source's blocks reference other frames, which decode needs to find")
    sizes = np.array([len(source) for source in sources], np.int64)
    source_of = refs.sources.reshape(-1).astype(np.int64, copy=False)
    local = refs.frames.reshape(-1).astype(np.int64, copy=False)
    outside = source_of[(source_of < 0) | (source_of >= len(sources))]
    if outside.size:
        raise ValueError(f"refs.sources holds {int(outside[0])}; expected indices into the {len(sources)} sources")
    bad = np.flatnonzero((local < 0) | (local >= sizes[source_of]))
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"refs.frames holds an index past its source's frames ({int(local[k])} for source "
                         f"{int(source_of[k])}, which has {int(sizes[source_of[k]])}); expected each frame's index "
                         "in its source")
    return source_of, local


@dataclass(frozen=True)
class _Frames:
    """Every frame of the sources by global id: its source, its block's start there, length, checksum and
    seed, and its reference's global id (-1: none); ``base[p]``, the global id of source p's first frame."""

    base: npt.NDArray[np.int64]
    source: npt.NDArray[np.int64]
    starts: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    checksums: npt.NDArray[np.uint32]
    seeds: npt.NDArray[np.uint32]
    reference: npt.NDArray[np.int64]


def _frames_of(sources: Sequence[EncodedFrames]) -> _Frames:
    """The sources' frames numbered across them (``_Frames``)."""
    sizes = np.array([len(source) for source in sources], np.int64)
    base = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return _Frames(
        base=base,
        source=np.repeat(np.arange(len(sources), dtype=np.int64), sizes),
        starts=np.concatenate([np.cumsum(source.lengths) - source.lengths for source in sources]).astype(np.int64),
        lengths=np.concatenate([source.lengths for source in sources]).astype(np.int64),
        checksums=np.concatenate([source.checksums for source in sources]).astype(np.uint32),
        seeds=np.concatenate([source.seeds for source in sources]).astype(np.uint32),
        reference=_global_references(sources, base),
    )


def _global_references(sources: Sequence[EncodedFrames], base: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Each frame's reference by global id (-1: none), for frames numbered across the sources."""
    return np.concatenate([
        np.full(len(source), -1, np.int64) if source.references is None
        else np.where(source.references >= 0, source.references + base[p], -1)
        for p, source in enumerate(sources)
    ])


def plan_referenced(sources: Sequence[EncodedFrames], refs: BlockRefs) -> ReferencedPlan:
    """The decode plan of ``refs``' frames (their size n) among ``sources``: see the module docstring.
    A frame's block is found by its index in its source (``refs.frames``), as the compiled path does."""
    source_of, local = _requested_frames(sources, refs)
    n = len(local)
    every = _frames_of(sources)
    reference = every.reference
    requested = every.base[source_of] + local
    # Every frame the requested ones need: their references, and theirs, a level at a time (a chain is
    # at most as long as its source has frames).
    needed = np.zeros(len(reference), bool)
    needed[requested] = True
    wanted = np.unique(requested)
    while wanted.size:
        up = reference[wanted]
        up = up[up >= 0]
        wanted = up[~needed[up]]
        needed[wanted] = True
    asked = np.zeros(len(reference), bool)
    asked[requested] = True
    extra = np.flatnonzero(needed & ~asked)
    ids = np.concatenate([requested, extra])
    # A reference is the first row that asked for it, else its own scratch entry.
    entry_of = np.full(len(reference), -1, np.int64)
    distinct, first_row = np.unique(requested, return_index=True)
    entry_of[distinct] = first_row
    entry_of[extra] = n + np.arange(len(extra))
    referenced = reference[ids]
    ref_entry = np.where(referenced >= 0, entry_of[np.maximum(referenced, 0)], -1)
    # References first: by global id (a reference's is smaller), repeats of a frame in row order.
    order = np.argsort(ids, kind="stable")
    position = np.empty(len(ids), np.int64)
    position[order] = np.arange(len(ids))
    ordered_ids, ordered_refs = ids[order], ref_entry[order]
    return ReferencedPlan(
        segments=every.source[ordered_ids],
        offsets=every.starts[ordered_ids],
        lengths=every.lengths[ordered_ids],
        checksums=every.checksums[ordered_ids],
        seeds=every.seeds[ordered_ids].astype(np.int64),
        refs=np.where(ordered_refs >= 0, position[np.maximum(ordered_refs, 0)], -1).astype(np.int64),
        rows=order.astype(np.int64),
        frames=ordered_ids - every.base[every.source[ordered_ids]],
    )


def decode_referenced(
    sources: Sequence[EncodedFrames], refs: BlockRefs, out: npt.NDArray[np.uint8], *, limit: int
) -> tuple[int, int, bool] | None:
    """Decode ``refs``' frames into ``out`` ((n, *frame_shape), checked by the caller) with the frames
    their blocks reference, each once, on up to ``limit`` threads: in one compiled call where the
    extension is built (``_lz4batch.referenced_decode``), else planned here and decoded by
    ``reference_codec.decode_batch``. None when every block matches its checksum and decodes; else (row,
    frame, requested) of the first that does not: its row of the plan (a requested row below n), its
    index in its source, and whether a row asked for it."""
    n = refs.starts.size
    frame_nbytes = int(np.prod(out.shape[1:]))
    if _lz4batch is not None:
        failed = _decode_compiled(sources, refs, out, threads=batch_threads(n * frame_nbytes, limit))
        if failed is not False:
            return failed
    plan = plan_referenced(sources, refs)
    bad = reference_codec.decode_batch(
        plan.segments, plan.offsets, plan.lengths, plan.checksums, plan.seeds, plan.refs, plan.rows, out,
        views=[memoryview(source.data) for source in sources], changed_rows=changed_rows_of(sources),
        threads=batch_threads(len(plan.rows) * frame_nbytes, limit),
    )
    if bad < 0:
        return None
    return int(plan.rows[bad]), int(plan.frames[bad]), int(plan.rows[bad]) < n


def _decode_compiled(
    sources: Sequence[EncodedFrames], refs: BlockRefs, out: npt.NDArray[np.uint8], *, threads: int
) -> tuple[int, int, bool] | None | Literal[False]:
    """``decode_referenced`` in one call of ``_lz4batch.referenced_decode``; False where it declines (a
    chain deeper than it follows)."""
    assert _lz4batch is not None
    source_of, local = _requested_frames(sources, refs)
    every = _frames_of(sources)
    n = refs.starts.size
    row_nbytes = reference_codec.mask_row_nbytes(out.shape[1:]) if changed_rows_of(sources) else 0
    result = _lz4batch.referenced_decode(
        [memoryview(source.data) for source in sources], every.source, every.starts, every.lengths, every.checksums,
        every.seeds, every.reference, every.base[source_of] + local, out.reshape(n, -1), int(np.prod(out.shape[1:])),
        row_nbytes, threads,
    )
    if result is None:
        return False
    if result == -1:
        return None
    row, frame = result
    return int(row), int(frame - every.base[every.source[frame]]), int(row) < n
