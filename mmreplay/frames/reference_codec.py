"""Denser frames: each frame compressed against an earlier frame of the same env, its reference.

Vocabulary (on top of ``frame_ring``'s frame step, slot and position):

- a *group* is a run of at most ``group_size`` consecutive frames of one env, inside one episode; a
  frame's *place* is its index in its group (0, 1, 2, ...).
- the frame at place 0 is the group's *key frame*: a plain lz4 block (``lz4_codec.compress``'s bytes),
  so decoding it needs nothing else.
- every other frame is *dependent*: compressed against its *reference*, the frame at its place with
  the lowest nonzero base-``branching`` digit set to 0 (``ReferenceScheme``). Decoding a frame needs at
  most ``depth`` other frames, all earlier frames of its group.
- ``ref_delta`` is a frame's step minus its reference's step, 0 for a key frame: the one number the
  frame table records per frame.
- a dependent frame's *units* are its runs of ``unit_nbytes(frame_shape)`` bytes; its *changed units*
  are those that differ from its reference's.

Format version 6 stores a dependent frame as one lz4 block, compressed with stock liblz4 calls
(``LZ4_loadDict`` of the reference, then ``LZ4_compress_fast_continue``: python-lz4's
``lz4.block.compress(..., dict=reference)``; below ``DICT_MIN_BYTES`` no dictionary is loaded),
whose bytes decode, with the reference as lz4's dictionary, to

    runs, taken, then ``runs`` pairs (skip, take), then the ``taken`` changed units' bytes

each number written as lz4 writes a length (bytes of 255 add 255 and go on; the first byte below 255
ends it), skip and take counted in units: after ``skip`` units equal to the reference's come ``take``
changed ones, and units past the last run are equal too. The numbers travel inside the block, where lz4
compresses their repeats (a paddle's column of runs). ``_c/codec/reference_frames.h`` has the same bytes.
Formats 4 and 5 (a bespoke encoder's blocks) are read by ``legacy_frames``.

A batch is decoded by rebuilding each requested frame in its own row from the nearest frame the call
has already rebuilt (a requested frame before it, or its group's key frame), applying the dependent
frames between them in place, oldest first: ``rebuild`` here, ``_c/ring/reference_reads.c`` compiled.
Why per env and recorded, rather than ``key = frame_step - frame_step % K``: in a vector env
consecutive frame steps belong to different envs, so an arithmetic key is another env's frame and
compresses badly. Why groups restart at an episode start: the reset frame looks little like the last
episode's frames, and a dependent frame never has to outlive another episode.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from types import ModuleType

import lz4.block
import numpy as np
import numpy.typing as npt

from mmreplay import extensions
from mmreplay.errors import CorruptStoreError
from mmreplay.frames import lz4_codec
from mmreplay.frames.reference_scheme import ReferenceScheme

_lz4batch: ModuleType | None = extensions.load("_lz4batch")

ACCELERATED: bool = _lz4batch is not None

# The smallest unit of a changed frame: the smallest divisor of the frame's row (its bytes past the first
# axis) of at least this many bytes. Measured at capacity 100,000, stack 4, on 20,000 recorded frames of
# Pong, Breakout, MsPacman and Seaquest (84x84, one 7-byte unit a twelfth of a row), against units of 6,
# 12, 14, 21, 42 and 84 bytes (a whole row): 7 bytes gave the fewest bytes on all four games and the
# fastest decode (the fewest bytes decoded per frame).
UNIT_MIN_BYTES = 7
# The fewest bytes (the numbers and the changed units) a dependent frame is compressed with its reference as
# lz4's dictionary from; a smaller one is compressed alone, which decodes with the dictionary all the same.
# Loading a dictionary hashes the whole reference (~3 us for 84x84), more than compressing a Pong frame
# alone costs. Measured on 6,400 recorded frames of each game (scheme 32/2), against the dictionary for
# every frame: Pong +4.8 bytes a frame, the dictionary loaded for 21% of its frames; Breakout -1.9 (1%);
# MsPacman +2.1 (64%); Seaquest +1.0 (77%). _c/codec/reference_frames.h has the same number.
DICT_MIN_BYTES = 256

RefDeltas = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]]


class CorruptFrameError(CorruptStoreError):
    """A frame (or a frame that it is compressed against) fails its checksum or does not decode."""

    def __init__(self, message: str, *, frame_step: int) -> None:
        super().__init__(message)
        self.frame_step = frame_step


def row_nbytes(frame_shape: tuple[int, ...]) -> int:
    """The bytes of one row of a uint8 frame of ``frame_shape``: its axes past the first (the whole frame
    for a 1-d one)."""
    return math.prod(frame_shape[1:]) if len(frame_shape) > 1 else math.prod(frame_shape)


def unit_nbytes(frame_shape: tuple[int, ...]) -> int:
    """The bytes of one unit of a uint8 frame of ``frame_shape``: the smallest divisor of its row of at
    least ``UNIT_MIN_BYTES`` (the whole row when none is)."""
    row = row_nbytes(frame_shape)
    return next((unit for unit in range(UNIT_MIN_BYTES, row + 1) if row % unit == 0), row)


def _header_bound(units: int) -> int:
    """The most bytes of a dependent frame's numbers: runs, taken and a pair a run (``_c``'s header_bound)."""
    return (2 + 2 * ((units + 1) // 2)) * (units // 255 + 1)


def block_extra(frame_shape: tuple[int, ...]) -> int:
    """The most bytes a stored frame of ``frame_shape`` takes beyond lz4's worst case for the frame: a
    dependent frame's block holds its numbers too."""
    frame = math.prod(frame_shape)
    decoded = frame + _header_bound(frame // unit_nbytes(frame_shape))
    return decoded // 255 - frame // 255 + decoded - frame


def _put(value: int) -> bytes:
    return b"\xff" * (value // 255) + bytes([value % 255])


def compress_against(
    frame: npt.NDArray[np.uint8], reference: npt.NDArray[np.uint8] | None, *, accelerated: bool = ACCELERATED
) -> bytes:
    """A frame as a reference store keeps it: alone when ``reference`` is None (a key frame), else its
    changed units against ``reference`` (see the module docstring)."""
    if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or not frame.flags.c_contiguous:
        raise TypeError(f"frame must be a C-contiguous numpy uint8 array; got {type(frame).__name__}")
    if reference is None:
        return lz4_codec.compress(frame)
    if not isinstance(reference, np.ndarray) or reference.dtype != np.uint8 or reference.shape != frame.shape:
        got = getattr(reference, "shape", type(reference).__name__)
        raise ValueError(f"reference must be a uint8 array of the frame's shape {frame.shape}; got {got}")
    reference = np.ascontiguousarray(reference)
    row, unit = row_nbytes(frame.shape), unit_nbytes(frame.shape)
    if accelerated and _lz4batch is not None:
        return bytes(_lz4batch.reference_encode(frame, reference, row, unit))
    if accelerated:
        raise ValueError("accelerated=True but mmreplay._lz4batch is not built (reference_codec.ACCELERATED is False)")
    units, references = frame.reshape(-1, unit), reference.reshape(-1, unit)
    changed = (units != references).any(axis=1)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], changed.astype(np.int8), [0]])))
    starts, stops = edges[0::2].tolist(), edges[1::2].tolist()
    numbers, after = [_put(len(starts)), _put(int(changed.sum()))], 0
    for start, stop in zip(starts, stops):
        numbers += [_put(start - after), _put(stop - start)]
        after = stop
    payload = b"".join(numbers) + units[changed].tobytes()
    if len(payload) < DICT_MIN_BYTES:
        return bytes(lz4.block.compress(payload, store_size=False))
    return bytes(lz4.block.compress(payload, store_size=False, dict=reference.tobytes()))


def _get(data: bytes, at: int) -> tuple[int, int]:
    """The number at ``at`` and where the next begins; ValueError when it runs past ``data``."""
    value = 0
    while at < len(data):
        byte = data[at]
        at += 1
        value += byte
        if byte != 255:
            return value, at
    raise ValueError("a number runs past the block")


def apply(
    payload: bytes | memoryview, reference: npt.NDArray[np.uint8] | bytes, frame_shape: tuple[int, ...], *,
    accelerated: bool = ACCELERATED,
) -> bytes:
    """The frame that a dependent ``payload`` holds against ``reference`` (of ``frame_shape``); ValueError
    when the payload is not one of this shape (a damaged block)."""
    reference = bytes(reference) if not isinstance(reference, np.ndarray) else reference.tobytes()
    row, unit = row_nbytes(frame_shape), unit_nbytes(frame_shape)
    if accelerated and _lz4batch is not None:
        frame: bytes | None = _lz4batch.reference_apply(payload, reference, row, unit)
        if frame is None:
            raise ValueError("the block does not decode to changed units of this frame")
        return frame
    units = len(reference) // unit
    try:
        data = lz4.block.decompress(payload, uncompressed_size=len(reference) + _header_bound(units), dict=reference)
    except lz4.block.LZ4BlockError as error:
        raise ValueError(f"the block does not decode ({error})") from None
    runs, at = _get(data, 0)
    taken, at = _get(data, at)
    start = len(data) - taken * unit
    if taken > units or runs > taken or start < at:
        raise ValueError("the block's numbers do not fit the frame")
    frame_units = np.frombuffer(reference, np.uint8).reshape(units, unit).copy()
    position, copied = 0, 0
    for _ in range(runs):
        skip, at = _get(data, at)
        take, at = _get(data, at)
        position += skip
        if take == 0 or position + take > units or copied + take > taken or at > start:
            raise ValueError("the block's runs do not fit the frame")
        frame_units[position : position + take] = np.frombuffer(data, np.uint8, take * unit,
                                                                start + copied * unit).reshape(take, unit)
        position, copied = position + take, copied + take
    if at != start or copied != taken:
        raise ValueError("the block's runs do not fit the frame")
    return frame_units.tobytes()


# locate(key) -> (the frame's block, checked against its CRC, and its reference's key or -1 for a key
# frame), or None when the frame at key is not good.
Locate = Callable[[int], "tuple[bytes | memoryview, int] | None"]
Apply = Callable[[bytes | memoryview, bytes], bytes]


def rebuild(
    keys: Sequence[int], out: npt.NDArray[np.uint8], *, locate: Locate, apply_block: Apply, depth: int
) -> tuple[int, int, bool] | None:
    """Rebuild each frame ``keys[i]`` into ``out[i]`` (see the module docstring), as the compiled read does:
    None when all are good, else (the first row that is not, the frame at fault: the requested one, or
    one it needs, and whether its chain is longer than ``depth``, a damaged link). ``apply_block(payload,
    reference)``: a dependent frame's bytes, ValueError when its payload is damaged."""
    rows = out.reshape(len(out), -1)
    frame_nbytes = rows.shape[1]
    done: dict[int, bytes] = {}
    key_frame: tuple[int, bytes] | None = None
    for i, key in enumerate(keys):
        if key in done:
            rows[i] = np.frombuffer(done[key], np.uint8)
            continue
        chain: list[tuple[int, bytes | memoryview]] = []  # (key, payload), newest first
        k, base = key, None
        while True:
            if k != key and k in done:
                base = done[k]
                break
            if key_frame is not None and key_frame[0] == k:
                base = key_frame[1]
                break
            found = locate(k)
            if found is None:
                return i, k, False
            payload, reference = found
            if reference < 0:
                try:
                    base = lz4_codec.decompress(payload, frame_nbytes)
                except lz4.block.LZ4BlockError:
                    return i, k, False
                if len(base) != frame_nbytes:
                    return i, k, False
                key_frame = (k, base)
                break
            if len(chain) >= depth:
                return i, key, True
            chain.append((k, payload))
            k = reference
        frame = base
        for applied, payload in reversed(chain):
            try:
                frame = apply_block(payload, frame)
            except ValueError:
                return i, applied, False
        rows[i] = np.frombuffer(frame, np.uint8)
        done[key] = frame
    return None


def reference_tail(oldest_frame: int, frames_written: int, *, ref_deltas_of: RefDeltas, scheme: ReferenceScheme) -> int:
    """The oldest frame step to keep so that the frames from ``oldest_frame`` on can still be decoded.

    A frame's key frame is at most ``scheme.max_distance`` steps before it, so only the frames in
    ``[oldest_frame, oldest_frame + max_distance)`` can depend on one before ``oldest_frame``; one table
    read per level of the scheme finds them.
    """
    frames = np.arange(oldest_frame, min(frames_written, oldest_frame + scheme.max_distance), dtype=np.int64)
    roots = frames
    for _ in range(scheme.depth):
        if roots.size == 0:
            break
        roots = roots - np.asarray(ref_deltas_of(roots), np.int64)
    return int(min(oldest_frame, roots.min())) if roots.size else oldest_frame
