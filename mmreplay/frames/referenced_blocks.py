"""Encoded frames whose blocks reference other frames (an encoded batch of a ``"lz4-reference"`` store),
decoded: each requested frame rebuilt in its row from the frames its block is compressed against (and
theirs), as a store's own read rebuilds them (``reference_codec``); in one compiled call
(``_lz4batch.decode_referenced``) where the extension is built and the blocks are format version 6's,
else frame by frame here. Only the frames the requested ones need are decoded, however many the
sources hold (a Ray group's frames serve many batches).

Frames are numbered across the sources (several ``EncodedFrames``, the shards of a batch) by a *global
id*: a frame's index in its source plus the frames of the sources before it. A frame's reference is an
earlier frame of the same source (``EncodedFrames.references``), so its global id is smaller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from mmreplay import extensions
from mmreplay.frames import legacy_frames, lz4_codec, reference_codec
from mmreplay.frames.reference_scheme import MAX_GROUP_SIZE
from mmreplay.frames.threads import batch_threads

_lz4batch: ModuleType | None = extensions.load("_lz4batch")  # its decode_referenced

if TYPE_CHECKING:
    from mmreplay.frames.wire import BlockRefs, EncodedFrames

# The longest chain of references an encoded batch's frames may have: a scheme's deepest (branching 2).
MAX_DEPTH = (MAX_GROUP_SIZE - 1).bit_length()


def format_of(sources: Sequence[EncodedFrames]) -> int:
    """The format version of the referencing blocks of ``sources`` (they must all agree)."""
    versions = {source.format_version for source in sources if source.references is not None}
    if len(versions) > 1:
        raise ValueError(f"the sources' referencing blocks mix format versions {sorted(versions)}; decode them "
                         "in separate calls")
    return versions.pop() if versions else 6


def check_sources(source_of: npt.NDArray[np.integer], count: int) -> None:
    """Refuse a reference to a source outside the ``count`` given (``refs.sources``).

    Raises:
        ValueError: naming the first such index.
    """
    outside = source_of[(source_of < 0) | (source_of >= count)]
    if outside.size:
        raise ValueError(f"refs.sources holds {int(outside[0])}; expected indices into the {count} sources")


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
    check_sources(source_of, len(sources))
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


# The tables of the last sources decoded from, by identity: a Ray group's batches decode from the same
# sources one after another, and build the group's tables once (not once a batch).
_last_tables: tuple[tuple[EncodedFrames, ...], _Frames] | None = None


def _frames_of(sources: Sequence[EncodedFrames]) -> _Frames:
    """The sources' frames numbered across them (``_Frames``), built once for the same sources in a row."""
    global _last_tables
    last = _last_tables
    if last is not None and len(last[0]) == len(sources) and all(a is b for a, b in zip(last[0], sources)):
        return last[1]
    tables = _build_tables(sources)
    _last_tables = (tuple(sources), tables)
    return tables


def _build_tables(sources: Sequence[EncodedFrames]) -> _Frames:
    """The sources' frames numbered across them."""
    sizes = np.array([len(source) for source in sources], np.int64)
    base = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return _Frames(
        base=base,
        source=np.repeat(np.arange(len(sources), dtype=np.int64), sizes),
        starts=np.concatenate([np.cumsum(source.lengths) - source.lengths for source in sources]).astype(np.int64),
        lengths=np.concatenate([source.lengths for source in sources]).astype(np.int64),
        checksums=np.concatenate([source.checksums for source in sources]).astype(np.uint32),
        seeds=np.concatenate([source.seeds for source in sources]).astype(np.uint32),
        reference=np.concatenate([
            np.full(len(source), -1, np.int64) if source.references is None
            else np.where(source.references >= 0, source.references + base[p], -1)
            for p, source in enumerate(sources)
        ]),
    )


def decode_referenced(
    sources: Sequence[EncodedFrames], refs: BlockRefs, out: npt.NDArray[np.uint8], *, limit: int
) -> tuple[int, int, bool] | None:
    """Decode ``refs``' frames into ``out`` ((n, *frame_shape), checked by the caller) with the frames
    their blocks reference, on up to ``limit`` threads. None when every block they need matches its
    checksum and decodes; else (row, frame, requested) of the first that does not: the row of ``out``
    whose frame failed, the failing frame's index in its source, and whether it is that row's own."""
    every, wanted = group_table(sources, refs)
    n, frame_shape = len(wanted), tuple(out.shape[1:])
    version = format_of(sources)
    views = [memoryview(source.data) for source in sources]
    if _lz4batch is not None and version >= 6:
        shape = compiled_shape(frame_shape)
        blocks = (every.source, every.starts, every.lengths, every.checksums, every.seeds)
        bad = int(_lz4batch.decode_referenced(views, blocks, every.reference, wanted, out.reshape(n, -1), shape,
                                              batch_threads(out.nbytes, limit)))
        if bad < 0:
            return None
        failed = _rebuild(every, views, wanted[bad : bad + 1], out[bad : bad + 1], version, frame_shape)
        frame = int(wanted[bad]) if failed is None else failed[1]  # the frame at fault, as the Python read finds it
        return bad, frame - int(every.base[every.source[frame]]), frame == int(wanted[bad])
    failed = _rebuild(every, views, wanted, out, version, frame_shape)
    if failed is None:
        return None
    row, frame, _ = failed
    return row, frame - int(every.base[every.source[frame]]), frame == int(wanted[row])


def group_table(sources: Sequence[EncodedFrames], refs: BlockRefs) -> tuple[_Frames, npt.NDArray[np.int64]]:
    """Every frame of the sources numbered across them, and ``refs``' frames as such global ids (checked).

    Raises:
        ValueError: ``refs`` names a source or a frame the sources do not have.
    """
    source_of, local = _requested_frames(sources, refs)
    every = _frames_of(sources)
    return every, np.ascontiguousarray(every.base[source_of] + local, np.int64)


def compiled_shape(frame_shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """``_lz4batch.decode_referenced``'s shape argument: frame bytes, row bytes, unit bytes, deepest chain."""
    return (int(np.prod(frame_shape)), reference_codec.row_nbytes(frame_shape), reference_codec.unit_nbytes(frame_shape),
            MAX_DEPTH)


def _rebuild(
    every: _Frames, views: list[memoryview], wanted: npt.NDArray[np.int64], out: npt.NDArray[np.uint8], version: int,
    frame_shape: tuple[int, ...],
) -> tuple[int, int, bool] | None:
    """``reference_codec.rebuild`` over the sources' blocks: None, or (row, global id, too deep) of the first
    failure."""
    def locate(frame: int) -> tuple[memoryview, int] | None:
        if not 0 <= frame < len(every.source):
            return None
        start, length = int(every.starts[frame]), int(every.lengths[frame])
        payload = views[int(every.source[frame])][start : start + length]
        reference = int(every.reference[frame])
        if (len(payload) != length or reference >= frame
                or lz4_codec.checksum(payload, int(every.seeds[frame])) != int(every.checksums[frame])):
            return None
        return payload, reference

    if version >= 6:
        def apply_block(payload: bytes | memoryview, reference: bytes) -> bytes:
            return reference_codec.apply(payload, reference, frame_shape)
    else:
        apply_block = legacy_frames.apply_for(version, frame_shape)
    return reference_codec.rebuild(wanted.tolist(), out.reshape(len(wanted), -1), locate=locate,
                                   apply_block=apply_block, depth=MAX_DEPTH)
