"""Frame compression: lz4 block format, one frame per block, with a CRC-32 bound to the frame's step.

This is the only module that imports lz4. The checksum is seeded with the frame step, so a frame read
back at the wrong step (a slot reused by the ring) fails the check just like a flipped byte.

A sampled batch decodes its frames with one call, ``decode_batch``. It runs in the compiled extension
``mmreplay._lz4batch`` (the system's liblz4 and zlib, the GIL released once per batch, large batches
shared with helper threads as ``threads.batch_threads`` decides) when that was built, else in a Python loop
over python-lz4 with identical results; ``ACCELERATED`` says which. One python-lz4 call per frame costs ~3 us of overhead against a
decode of ~1 us, and holds the GIL, which is why the extension exists. The frame ring's fast path
(``FrameRing.decode_compiled``) also reads the frame table's entries in the extension, so that a sampled
batch costs one call instead of a dozen numpy calls; when it declines, the ring's general path (this
module's ``decode_batch``) finds the fault.

The extension compresses too, for add's fast path (``FrameRing.append_frames``): the same bytes as
``compress``, since it calls liblz4 as python-lz4 does (a fresh stream state per frame;
``LZ4_compress_default`` would compress Atari frames ~5% worse).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from types import ModuleType

import lz4.block
import numpy as np
import numpy.typing as npt

from mmreplay import extensions
from mmreplay.frames.threads import (
    MAX_THREADS,
    batch_threads,
    compress_threads,
    thread_limit,
)

_lz4batch: ModuleType | None = extensions.load("_lz4batch")

ACCELERATED: bool = _lz4batch is not None

def compress(frame: npt.NDArray[np.uint8]) -> bytes:
    """Compress one contiguous frame; the uncompressed size is not stored (the store knows it)."""
    payload: bytes = lz4.block.compress(frame, store_size=False)
    return payload


def compress_batch(
    frames: npt.NDArray[np.uint8], seeds: npt.NDArray[np.uint32], *, limit: int | None = None
) -> tuple[bytes, npt.NDArray[np.int64], npt.NDArray[np.uint32]]:
    """Each of the C-contiguous ``frames`` ((n, *frame_shape), n >= 1) compressed alone, as ``compress``
    does: their blocks back to back, each block's length, and its ``checksum`` seeded with ``seeds[i]``.
    One compiled call on up to ``threads.compress_threads`` threads (``limit``: by default the cores this
    process may use) where the extension is built, else a Python loop with the same results."""
    n = len(frames)
    lengths, checksums = np.empty(n, np.int64), np.empty(n, np.uint32)
    frame_nbytes = frames.nbytes // n
    if _lz4batch is not None and 0 < frame_nbytes <= 1 << 30:
        threads = compress_threads(n, frame_nbytes, thread_limit() if limit is None else limit)
        seeds = np.ascontiguousarray(seeds, np.uint32)
        data: bytes = _lz4batch.compress_frames(frames, seeds, lengths, checksums, threads)
        return data, lengths, checksums
    payloads = [compress(frame) for frame in frames]
    lengths[:] = [len(payload) for payload in payloads]
    checksums[:] = [checksum(payload, int(seed)) for payload, seed in zip(payloads, seeds.tolist())]
    return b"".join(payloads), lengths, checksums


def checksum(payload: bytes | memoryview, frame_step: int) -> int:
    """zlib.crc32 of the payload seeded with ``frame_step & 0xFFFFFFFF`` (the extension's is ~5x faster)."""
    if _lz4batch is not None:
        return _lz4batch.crc32(payload, frame_step & 0xFFFFFFFF)  # type: ignore[no-any-return]
    return zlib.crc32(payload, frame_step & 0xFFFFFFFF)


def decompress(payload: bytes | memoryview, frame_nbytes: int) -> bytes:
    frame: bytes = lz4.block.decompress(payload, uncompressed_size=frame_nbytes)
    return frame


def decode_batch(
    segments: npt.NDArray[np.int64],
    offsets: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    checksums: npt.NDArray[np.uint32],
    seeds: npt.NDArray[np.int64],
    out: npt.NDArray[np.uint8],
    *,
    views: Sequence[memoryview],
    accelerated: bool = ACCELERATED,
    threads: int | None = None,
    limit: int | None = None,
) -> int:
    """Decode n frames into ``out[i]``; -1 when all are good, else the index of the first bad frame.

    Frame i's compressed bytes are ``views[segments[i]][offsets[i] : offsets[i] + lengths[i]]``; it is
    good when that range lies inside the view, the bytes' CRC-32 seeded with ``seeds[i] & 0xFFFFFFFF``
    (the seed ``checksum`` took: the frame step, or what the caller derives from it) equals
    ``checksums[i]``, and they decode to exactly one frame. ``out`` is a C-contiguous (n, *frame_shape)
    uint8 array; when the result is not -1, its content is unspecified (the caller raises).
    ``accelerated=False`` forces the python-lz4 loop (tests compare both). ``threads`` is how many
    threads share an accelerated batch; by default ``threads.batch_threads`` of its decoded size
    and ``limit`` (by default the cores this process may use: ``threads.thread_limit()``).
    """
    n = _validate(segments, offsets, lengths, checksums, seeds, out)
    if n == 0:
        return -1
    frame_nbytes = out.nbytes // n
    # Conversions copy only what is not already a contiguous, aligned array of the type the decoder reads
    # (a one-frame view of a packed table's checksum field is contiguous but not aligned).
    arrays = (
        np.require(segments, np.int64, ("C", "A")),
        np.require(offsets, np.int64, ("C", "A")),
        np.require(lengths, np.int64, ("C", "A")),
        np.require(checksums, np.uint32, ("C", "A")),
        np.require(seeds.astype(np.uint32, copy=False), requirements=("C", "A")),  # wraps modulo 2**32
    )
    if accelerated and _lz4batch is not None:
        if threads is None:
            threads = batch_threads(n * frame_nbytes, thread_limit() if limit is None else limit)
        elif not 1 <= threads <= MAX_THREADS:
            raise ValueError(f"threads is {threads}; expected 1 to {MAX_THREADS}")
        # The extension checks each segment against len(views), with the message below.
        return int(_lz4batch.decode(views, arrays, out, frame_nbytes, threads))
    if accelerated:
        raise ValueError("accelerated=True but mmreplay._lz4batch is not built (codec.ACCELERATED is False)")
    _check_segments(arrays[0], len(views))
    return _decode_in_python(views, *arrays, out, frame_nbytes)


def _validate(
    segments: npt.NDArray[np.int64],
    offsets: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    checksums: npt.NDArray[np.uint32],
    seeds: npt.NDArray[np.int64],
    out: npt.NDArray[np.uint8],
) -> int:
    """Checks the arguments both paths trust; returns the batch size n."""
    if not isinstance(out, np.ndarray) or out.dtype != np.uint8:
        raise TypeError(f"out must be a numpy uint8 array; got {type(out).__name__} {getattr(out, 'dtype', '')}")
    if out.ndim < 1 or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"out must be a writeable C-contiguous (n, *frame_shape) array; got shape {out.shape}")
    n: int = out.shape[0]
    named = {"segments": segments, "offsets": offsets, "lengths": lengths, "checksums": checksums, "seeds": seeds}
    for name, array in named.items():
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "iu":
            raise TypeError(f"{name} must be a numpy integer array; got {type(array).__name__}")
        if array.shape != (n,):
            raise ValueError(f"{name} has shape {array.shape}; expected ({n},) for out of shape {out.shape}")
    if n > 0 and out.nbytes == 0:
        raise ValueError(f"out has shape {out.shape}; expected frames of at least one byte")
    return n


def _check_segments(segments: npt.NDArray[np.int64], view_count: int) -> None:
    if segments.min() < 0 or segments.max() >= view_count:
        i = int(np.flatnonzero((segments < 0) | (segments >= view_count))[0])
        raise ValueError(f"segments[{i}] is {segments[i]}; expected 0 <= segment < {view_count} (len(views))")


def _decode_in_python(
    views: Sequence[memoryview],
    segments: npt.NDArray[np.int64],
    offsets: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    checksums: npt.NDArray[np.uint32],
    seeds: npt.NDArray[np.uint32],
    out: npt.NDArray[np.uint8],
    frame_nbytes: int,
) -> int:
    """The fallback: the same checks as the extension, in the same order, one python-lz4 call a frame."""
    out_bytes = out.data.cast("B")
    crc32, decompress_block = zlib.crc32, lz4.block.decompress
    start = 0
    columns = zip(segments.tolist(), offsets.tolist(), lengths.tolist(), checksums.tolist(), seeds.tolist())
    for i, (segment, offset, length, expected, seed) in enumerate(columns):
        payload = views[segment][offset : offset + length]
        if offset < 0 or len(payload) != length or crc32(payload, seed) != expected:
            return i
        try:
            frame = decompress_block(payload, uncompressed_size=frame_nbytes)
        except lz4.block.LZ4BlockError:
            return i
        if len(frame) != frame_nbytes:
            return i
        out_bytes[start : start + frame_nbytes] = frame
        start += frame_nbytes
    return -1
