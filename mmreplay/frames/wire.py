"""Frames that travel compressed: into a store (``add_encoded``) and out of it (``sample_encoded``).

Vocabulary: an *encoded frame* is one frame as the store keeps it, an lz4 block made by the store's own
codec (``encode_frames``), with its CRC-32. ``EncodedFrames`` holds several back to back. An
*encoded batch* (``EncodedBatch``) is what ``sample`` would return with its pixels left as the stored
blocks of the frames it needs, plus, for each transition, which of those blocks make its obs and
next_obs. A batch of 32 Pong transitions (stack 4) is ~42 KB encoded against 1.1 MB decoded: what
crosses a network or a process boundary should be the encoded form, decoded where it is used
(``EncodedBatch.decode``, by the compiled decoder that ``sample`` uses; the batches are in
``encoded_batches``). ``BlockRefs`` names frames among the blocks of several ``EncodedFrames``
(``EncodedFrames.blocks``), so that ``decode_blocks`` decodes the frames of a batch drawn from several
stores (shards) in one call, straight into place.

Both directions are checked: frames that arrive are decoded against their checksums before anything
is written (the pixels are needed anyway: the store compares each obs with its env's last next_obs),
and an encoded batch carries each frame's stored checksum and seed, so its ``decode`` checks the bytes
end to end, from the store's disk to the learner.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from mmreplay.disk.header import FORMAT_VERSION
from mmreplay.errors import CorruptStoreError
from mmreplay.frames import lz4_codec, referenced_blocks
from mmreplay.frames.threads import thread_limit
from mmreplay.validation import parse_decode_threads, parse_shape

T = TypeVar("T", bound=np.generic)


@dataclass(frozen=True, repr=False)
class EncodedFrames:
    """Frames compressed by the store's codec, as lz4 blocks back to back with their CRC-32s.

    Everything is checked and normalised once, at construction. Pickled with protocol 5 (Ray's, and
    ``multiprocessing``'s), ``data`` travels out of band: the receiver gets a read-only ``memoryview`` of
    the bytes Ray put in its object store instead of a copy.

    Attributes:
        data: the blocks back to back, frame i's ``lengths[i]`` bytes from ``sum(lengths[:i])``. Any
            buffer (``bytes``, a ``memoryview``, a numpy array of any shape and dtype), kept as ``bytes``
            or as a flat, read-only byte view of its bytes in C order (a buffer that is not C-contiguous
            is copied).
        lengths: (n,) int64, each block's bytes; they add up to ``data``'s bytes.
        checksums: (n,) uint32, each frame's CRC-32 seeded with its seed.
        seeds: (n,) uint32, each CRC's seed (0 for frames from ``encode_frames``; a stored frame's own
            seed in an ``EncodedBatch``).
        frame_shape: the shape of one decoded frame.
        references: (n,) int64 or None. In an encoded batch of a ``"lz4-reference"`` store, for each frame
            the index among these frames of the earlier frame its block is compressed against (lz4's
            dictionary), -1 for a block that decodes alone; None: every block decodes alone, as
            ``encode_frames`` makes them.
        format_version: the store format whose blocks these are, which says what a block with a reference
            holds: version 6, the units that differ from it (``reference_codec``); version 5, its changed
            rows, and version 4, the whole frame (``legacy_frames``).

    Raises:
        TypeError: ``data`` is not a buffer, or ``lengths``, ``checksums``, ``seeds`` or ``references`` is
            not an integer array.
        ValueError: an array has not one entry per frame or holds a value out of its dtype's range, a
            length is negative, the lengths do not add up to ``data``'s bytes, ``frame_shape`` is not a
            shape, a reference is not -1 or an earlier frame, or ``format_version`` is not 4, 5 or 6.
    """

    data: bytes | memoryview
    lengths: npt.NDArray[np.int64]
    checksums: npt.NDArray[np.uint32]
    seeds: npt.NDArray[np.uint32]
    frame_shape: tuple[int, ...]
    references: npt.NDArray[np.int64] | None = None
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        data = _byte_view(self.data)
        lengths = _integers(self.lengths, "lengths", np.int64, count=None)
        count = len(lengths)
        checksums = _integers(self.checksums, "checksums", np.uint32, count=count)
        seeds = _integers(self.seeds, "seeds", np.uint32, count=count)
        if count and int(lengths.min()) < 0:
            raise ValueError(f"lengths holds {int(lengths.min())}; expected block lengths >= 0")
        total = int(lengths.sum())
        if total != len(data):
            raise ValueError(f"lengths add up to {total:,} bytes; expected {len(data):,}, the bytes of data "
                             f"(the {count} blocks back to back)")
        frame_shape = parse_shape(self.frame_shape, "frame_shape", allow_empty=False)
        references = None if self.references is None else _references(self.references, count)
        if isinstance(self.format_version, bool) or self.format_version not in (4, 5, 6):
            raise ValueError(f"format_version is {self.format_version!r}; expected 4, 5 or 6")
        for name, value in (("data", data), ("lengths", lengths), ("checksums", checksums), ("seeds", seeds),
                            ("frame_shape", frame_shape), ("references", references),
                            ("format_version", int(self.format_version))):
            object.__setattr__(self, name, value)  # frozen: normalised once, here

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def changed_rows(self) -> bool:
        """Whether a block with a reference holds format version 5's changed rows.

        The name before ``format_version``; version 6's changed units and version 4's whole frames are
        False.

        Returns:
            True for format version 5.
        """
        return self.format_version == 5

    @property
    def nbytes(self) -> int:
        """Bytes of blocks, lengths, checksums, seeds and references: what sending these frames costs.

        Returns:
            The total in bytes.
        """
        references = 0 if self.references is None else self.references.nbytes
        return len(self.data) + self.lengths.nbytes + self.checksums.nbytes + self.seeds.nbytes + references

    def blocks(self, order: npt.NDArray[np.int64]) -> BlockRefs:
        """Where frames ``order`` lie in ``data``: each one's start, length, checksum and seed.

        Args:
            order: indices into these frames, any shape, repeats allowed.

        Returns:
            The frames' references into these frames (source 0), shaped as ``order``.

        Raises:
            TypeError: ``order`` is not integer.
            ValueError: an index is outside ``0 <= i < len(frames)``.
        """
        order = frame_indices(order, "order", len(self))
        starts = np.zeros(len(self) + 1, np.int64)
        np.cumsum(self.lengths, out=starts[1:])
        return BlockRefs(np.zeros(order.shape, np.int64), starts[order], self.lengths[order], self.checksums[order],
                         self.seeds[order].astype(np.int64), order)

    def decode(
        self, order: npt.NDArray[np.int64] | None = None, *, decode_threads: int | None = None
    ) -> npt.NDArray[np.uint8]:
        """The frames' pixels in ``order``, each checked against its checksum.

        Args:
            order: indices into these frames, repeats allowed (None: each once, in order).
            decode_threads: the most threads the decode may use, as in ``decode_blocks`` (None: no cap).

        Returns:
            (len(order), *frame_shape) uint8.

        Raises:
            CorruptStoreError: a frame fails its checksum or does not decode to exactly one frame.
            TypeError: ``order`` is not integer, or ``decode_threads`` is not None or an int.
            ValueError: an index is out of range, or ``decode_threads`` is not 1 to 64.
        """
        order = np.arange(len(self), dtype=np.int64) if order is None else frame_indices(order, "order", len(self))
        pixels = np.empty((len(order), *self.frame_shape), np.uint8)
        decode_blocks([self], self.blocks(order), pixels, numbers=order, decode_threads=decode_threads)
        return pixels

    def __repr__(self) -> str:
        referencing = "" if self.references is None else f", referencing={int((self.references >= 0).sum())}"
        return f"EncodedFrames(frames={len(self)}{referencing}, frame_shape={self.frame_shape}, nbytes={self.nbytes:,})"

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        data: object = pickle.PickleBuffer(self.data) if protocol >= 5 else bytes(self.data)
        return _rebuild_frames, (data, self.lengths, self.checksums, self.seeds, self.frame_shape, self.references,
                                 self.format_version)


def _rebuild_frames(
    data: object, lengths: npt.NDArray[np.int64], checksums: npt.NDArray[np.uint32], seeds: npt.NDArray[np.uint32],
    frame_shape: tuple[int, ...], references: npt.NDArray[np.int64] | None = None,
    format_version: int | bool = FORMAT_VERSION,
) -> EncodedFrames:
    """An unpickled ``EncodedFrames``: ``data`` is bytes (in band) or the buffer its receiver handed over
    (out of band), viewed as bytes without a copy (``EncodedFrames`` checks both). Pickles from before
    ``references`` name none; those from before ``format_version`` say whether their blocks were changed
    rows (a bool: version 5, or 4)."""
    if isinstance(format_version, bool):
        format_version = 5 if format_version else 4
    return EncodedFrames(data, lengths, checksums, seeds, frame_shape, references, format_version)  # type: ignore[arg-type]


def _byte_view(data: object) -> bytes | memoryview:
    """``data`` as ``bytes`` or a flat, read-only ``memoryview`` of unsigned bytes over the same memory (a
    buffer that is not C-contiguous is copied, in C order)."""
    if isinstance(data, bytes):
        return data
    try:
        view = memoryview(data)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"data must be bytes or a buffer of the lz4 blocks back to back; got {type(data).__name__}") from None
    if not view.c_contiguous:
        return view.tobytes()
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view if view.readonly else view.toreadonly()


def _integers(value: object, name: str, dtype: type[T], *, count: int | None) -> npt.NDArray[T]:
    """``value`` as a 1-D array of ``dtype`` (``count`` entries, if given), its values in ``dtype``'s range."""
    array = np.asarray(value)
    expected = "one per frame, as lengths" if count is not None else "one per frame"
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array ({expected}); got {array.dtype}")
    if array.ndim != 1 or (count is not None and len(array) != count):
        shape = "(frames,)" if count is None else f"({count},)"
        raise ValueError(f"{name} has shape {array.shape}; expected {shape}, {expected}")
    if array.dtype == dtype:
        return array
    limits = np.iinfo(np.dtype(dtype))
    if len(array) and (int(array.min()) < limits.min or int(array.max()) > limits.max):
        raise ValueError(f"{name} holds values outside [{limits.min}, {limits.max}] ({np.dtype(dtype).name})")
    return array.astype(dtype)


def _references(value: object, count: int) -> npt.NDArray[np.int64]:
    """``references`` as int64 (count,), each -1 or an earlier frame's index: frames that reference each
    other in a cycle, or a later frame, could not be decoded in any order."""
    array = _integers(value, "references", np.int64, count=count)
    bad = np.flatnonzero((array < -1) | (array >= np.arange(count)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"references[{i}] is {int(array[i])}; expected -1 (a block that decodes alone) or the index "
                         f"of an earlier frame (0 to {i - 1}), the frame its block is compressed against")
    return array


def frame_indices(value: object, name: str, frame_count: int) -> npt.NDArray[np.int64]:
    """``value`` as int64 indices (any shape) into ``frame_count`` frames; an error names ``name``."""
    array = np.asarray(value)
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integer indices into frames; got {array.dtype}")
    if array.size and (int(array.min()) < 0 or int(array.max()) >= frame_count):
        bad = int(array.max()) if int(array.max()) >= frame_count else int(array.min())
        raise ValueError(f"{name} holds {bad}; expected indices 0 <= i < {frame_count} (len(frames))")
    return array.astype(np.int64, copy=False)


@dataclass(frozen=True)
class BlockRefs:
    """Frames among the blocks of several ``EncodedFrames`` (the *sources*), by source and byte range.

    The arrays have any one shape (rows of a batch by their frames); ``take`` and ``join`` rearrange them,
    so that the frames of a batch drawn from several shards decode in one compiled call
    (``decode_blocks``).

    Attributes:
        sources: each frame's source, an index into the sources passed to ``decode_blocks``.
        starts: the byte offset of each frame's block in its source's ``data``.
        lengths: each block's bytes.
        checksums: each frame's CRC-32.
        seeds: each CRC's seed.
        frames: each one's index among its source's frames (``EncodedFrames.blocks`` gives it), which is
            how a block compressed against another frame finds it (``EncodedFrames.references``); None
            where every source's blocks decode alone.
    """

    sources: npt.NDArray[np.int64]
    starts: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    checksums: npt.NDArray[np.uint32]
    seeds: npt.NDArray[np.int64]
    frames: npt.NDArray[np.int64] | None = None

    def take(self, rows: npt.NDArray[np.int64] | slice) -> BlockRefs:
        """These references' rows ``rows``, along the first axis.

        Args:
            rows: row indices or a slice, as numpy indexing takes them.

        Returns:
            The chosen rows' references.
        """
        return BlockRefs(self.sources[rows], self.starts[rows], self.lengths[rows], self.checksums[rows],
                         self.seeds[rows], None if self.frames is None else self.frames[rows])

    def from_source(self, source: int) -> BlockRefs:
        """The same references, all into source ``source``.

        Args:
            source: the index of the source they now point into.

        Returns:
            The references with every ``sources`` entry ``source``.
        """
        return BlockRefs(np.full(self.sources.shape, source, np.int64), self.starts, self.lengths, self.checksums,
                         self.seeds, self.frames)

    @staticmethod
    def join(parts: Sequence[BlockRefs], order: npt.NDArray[np.int64] | None = None) -> BlockRefs:
        """The parts' rows one after the other, then in ``order``.

        Args:
            parts: the references to join, along their first axis.
            order: row i of the result is the joined rows' ``order[i]`` (None: as joined).

        Returns:
            The joined references, with ``frames`` where every part has them (else None).
        """
        sources, starts, lengths, checksums, seeds = (np.concatenate([getattr(part, name) for part in parts])
                                                      for name in ("sources", "starts", "lengths", "checksums", "seeds"))
        numbered = [part.frames for part in parts if part.frames is not None]
        joined = BlockRefs(sources, starts, lengths, checksums, seeds,
                           np.concatenate(numbered) if len(numbered) == len(parts) else None)
        return joined if order is None else joined.take(order)


def decode_blocks(
    sources: Sequence[EncodedFrames], refs: BlockRefs, out: npt.NDArray[np.uint8], *,
    numbers: npt.NDArray[np.int64] | None = None, decode_threads: int | None = None,
) -> None:
    """Decode the referenced frames into ``out`` in one call of the compiled decoder.

    Each frame is checked against its checksum. The batch decodes on as many threads as its size asks
    (``threads.batch_threads``), at most the cores this process may use and ``decode_threads``.

    Args:
        sources: the ``EncodedFrames`` that ``refs.sources`` indexes, all of one frame shape.
        refs: the frames to decode, one per frame of ``out``.
        out: a writeable, C-contiguous (refs' size, *frame_shape) uint8 array, filled in place.
        numbers: how an error names each frame (None: by its position in ``refs``).
        decode_threads: the most threads the decode may use (None: no cap; 1 to 64).

    Raises:
        TypeError: ``decode_threads`` is not None or an int.
        ValueError: ``out`` is not such an array, its frame shape is not the sources', the sources'
            frame shapes differ, or ``decode_threads`` is not 1 to 64.
        CorruptStoreError: a frame fails its checksum or does not decode to exactly one frame (the
            message names it by ``numbers``).
    """
    limit = thread_limit(parse_decode_threads(decode_threads))
    count = refs.starts.size
    if not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.ndim < 2 or out.shape[0] != count:
        raise ValueError(
            f"out must be a uint8 array of shape ({count}, *frame_shape), a frame for each of refs' {count} "
            f"references; got {type(out).__name__} {getattr(out, 'dtype', '')} of shape {getattr(out, 'shape', None)}"
        )
    # Decoded in place: a reshape of any other array would be a copy, decoded and dropped.
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(
            f"out must be a writeable C-contiguous array (np.empty(({count}, *frame_shape), np.uint8)); got one "
            f"of strides {out.strides}{'' if out.flags.writeable else ', read-only'}"
        )
    shapes = {source.frame_shape for source in sources}
    if len(shapes) > 1 or (shapes and shapes != {tuple(out.shape[1:])}):
        raise ValueError(f"out has frames of shape {tuple(out.shape[1:])}; the sources' frames have shape "
                         f"{' and '.join(map(str, sorted(shapes)))}")
    if count == 0:
        return
    if any(source.references is not None for source in sources):  # blocks compressed against other frames
        failed = referenced_blocks.decode_referenced(sources, refs, out.reshape(count, *out.shape[1:]), limit=limit)
        if failed is not None:
            row, frame, requested = failed
            name = (f"encoded frame {row if numbers is None else int(numbers.reshape(-1)[row])}" if requested
                    else f"encoded frame {frame} (a frame that a requested frame's block is compressed against)")
            raise CorruptStoreError(
                f"{name} fails its checksum or does not decode to one frame of shape {out.shape[1:]} against its "
                "reference: it was damaged on disk or on the way"
            )
        return
    bad = lz4_codec.decode_batch(
        refs.sources.reshape(-1), refs.starts.reshape(-1), refs.lengths.reshape(-1), refs.checksums.reshape(-1),
        refs.seeds.reshape(-1), out.reshape(count, -1), views=[memoryview(source.data) for source in sources],
        limit=limit,
    )
    if bad >= 0:
        raise CorruptStoreError(
            f"encoded frame {bad if numbers is None else int(numbers.reshape(-1)[bad])} fails its checksum or does "
            f"not decode to one frame of shape {out.shape[1:]}: it was damaged on disk or on the way, or made by "
            "another codec than encode_frames"
        )


def encode_frames(frames: npt.ArrayLike) -> EncodedFrames:
    """Compress frames with the store's codec, one lz4 block each.

    The blocks are the same bytes that ``ReplayStore.add`` writes for the frames, so a store given them
    by ``add_encoded`` holds exactly what ``add`` would have written.

    Args:
        frames: uint8, (n, *frame_shape).

    Returns:
        The n frames encoded, every block decoding alone (CRC seeds 0).

    Raises:
        TypeError: ``frames`` is not uint8.
        ValueError: ``frames`` has fewer than two axes.
    """
    array = np.asarray(frames)
    if array.dtype != np.uint8:
        raise TypeError(f"frames must be uint8; got {array.dtype}")
    if array.ndim < 2:
        raise ValueError(f"frames has shape {array.shape}; expected (n, *frame_shape)")
    array = np.ascontiguousarray(array)
    seeds = np.zeros(len(array), np.uint32)
    if len(array) == 0:
        data, lengths, checksums = b"", np.zeros(0, np.int64), np.zeros(0, np.uint32)
    else:  # one compiled call for the batch, on the cores this process may use
        data, lengths, checksums = lz4_codec.compress_batch(array, seeds)
    return EncodedFrames(data=data, lengths=lengths, checksums=checksums, seeds=seeds,
                         frame_shape=tuple(array.shape[1:]))


def encode_stacks(stacks: npt.ArrayLike) -> tuple[EncodedFrames, npt.NDArray[np.int64]]:
    """Consecutive observation stacks of one env as their distinct frames, encoded, and indices into them.

    A stack that is the one before shifted by one frame adds only its newest frame.
    ``add_encoded(frames, index[:-1], ..., index[1:], ...)`` then records the n - 1 transitions between
    them.

    Args:
        stacks: uint8, (n, stack_size, *frame_shape).

    Returns:
        The distinct frames, encoded, and each stack as indices into them, (n, stack_size) int64.

    Raises:
        ValueError: ``stacks`` is not uint8 or has fewer than three axes.
    """
    array = np.asarray(stacks)
    if array.dtype != np.uint8 or array.ndim < 3:
        raise ValueError(f"stacks must be uint8 (n, stack_size, *frame_shape); got {array.dtype} {array.shape}")
    size = array.shape[1]
    index = np.empty(array.shape[:2], np.int64)
    chosen: list[npt.NDArray[np.uint8]] = []
    for t in range(len(array)):
        if t and size > 1 and np.array_equal(array[t, :-1], array[t - 1, 1:]):
            index[t, :-1] = index[t - 1, 1:]
            index[t, -1] = len(chosen)
            chosen.append(array[t, -1])
        else:
            index[t] = np.arange(len(chosen), len(chosen) + size)
            chosen.extend(array[t])
    return encode_frames(np.stack(chosen)), index
