"""Denser frames: each frame lz4-compressed against an earlier frame of the same env, its reference.

Vocabulary (on top of ``frame_ring``'s frame step, slot and position):

- a *group* is a run of at most ``group_size`` consecutive frames of one env, inside one episode; a
  frame's *place* is its index in its group (0, 1, 2, ...).
- the frame at place 0 is the group's *key frame*: it is compressed alone (a plain lz4 block), so
  decoding it needs nothing else.
- every other frame is *dependent*: one lz4 block whose matches may reach into its *reference* frame, as
  if the reference lay just before it (lz4's dictionary). The reference of place ``c`` is place ``c``
  with its lowest nonzero base-``branching`` digit set to 0: with ``branching == group_size`` every
  frame references the key frame (a star); with ``group_size=64, branching=8`` places 1-7 reference
  the key, 9-15 place 8, 16 the key, 17-23 place 16, and so on. Decoding a frame therefore needs at most
  ``depth`` other frames (``branching ** depth >= group_size``), all earlier frames of its group.
- ``ref_delta`` is a frame's step minus its reference's step, 0 for a key frame: the one number the
  frame table records per frame. A group never spans more than ``max_distance`` frame steps, so no
  frame is ever more than that far from its key frame.
- format version 5 stores a dependent frame as its *changed rows* (``changed_rows=True`` below): which
  rows of ``mask_row_nbytes`` bytes differ from the reference, then one lz4 block of just those rows with
  the reference as dictionary (``_c/changed_rows.h`` has the bytes), and a key frame as a plain lz4 block
  (``lz4_codec.compress``'s bytes). Version 4 stored a dependent frame as one block of the whole frame,
  which paid lz4 a length byte per 255 unchanged bytes (~28 of Pong's ~82 bytes), and key frames in lz4's
  HC mode.

Why per env and recorded, rather than ``key = frame_step - frame_step % K``: in a vector env consecutive
frame steps belong to different envs, so an arithmetic key is another env's frame and compresses badly
(see ``benchmarks/bench_dense.py``). Why groups restart at an episode start: the reset frame looks
little like the last episode's frames, and a dependent frame never has to outlive another episode.

The writer keeps, per env, an ``EnvReferences``: its place in the current group and the few frames that
later frames of the group may reference (``depth`` of them), so that encoding never reads the disk. A
reader's batch is one compiled call where the extension is built (``_c/reference_table.c``: the chains
followed through the frame table, planned and decoded). Its steps are the functions here:
``plan_decode`` lists the requested frames and, once each, the references they need (and theirs), key
frames first, so that a reference is decoded before the frames that use it; ``decode_batch`` decodes
that list with the GIL released once. Without the extension ``mmreplay._lz4ref`` both run in Python
(python-lz4) with identical results. Dependent frames
are encoded by the extension's reference-aware encoder (``_c/reference_encode.c``: ~10 us for an 84x84
frame, within a few percent of lz4 HC 9's size) or, without it, by python-lz4's HC mode with the
reference as dictionary: different bytes, the same frames once decoded.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType

import lz4.block
import numpy as np
import numpy.typing as npt

from mmreplay import extensions
from mmreplay.errors import CorruptStoreError
from mmreplay.frames import lz4_codec
from mmreplay.frames.reference_scheme import ReferenceScheme

_lz4ref: ModuleType | None = extensions.load("_lz4ref")
_lz4batch: ModuleType | None = extensions.load("_lz4batch")  # its reference_decode: a batch on the pool's threads

ACCELERATED: bool = _lz4ref is not None

# Format version 4's key frames: rare (one per group), so they could afford lz4's HC mode: at level 9 a
# Pong key frame takes ~210 bytes instead of 266 for ~80 us once per group. Version 5 compresses them as
# plain frames, as add's compiled path does (~0.2 bytes a frame more; no 80 us add every 256 frames).
KEY_LEVEL = 9
# A changed-rows frame's rows: the first run of a frame's trailing axes that holds at least this many bytes
# (an 84x84 frame's rows of 84 bytes; a (210, 160, 3) frame's of 480).
MASK_ROW_MIN_BYTES = 32
# Without the extension, dependent frames go through python-lz4's HC mode: ~40-100 us a frame, a little
# smaller than the extension's encoder, which takes ~3-10 us.
FALLBACK_LEVEL = 3

# Locates frames by step: (segments, offsets, lengths, checksums, seeds) as codec.decode_batch takes them.
Locator = Callable[
    [npt.NDArray[np.int64]],
    tuple[
        npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.uint32], npt.NDArray[np.int64]
    ],
]
RefDeltas = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]]


class CorruptFrameError(CorruptStoreError):
    """A frame (or a frame that it is compressed against) fails its checksum or does not decode."""

    def __init__(self, message: str, *, frame_step: int) -> None:
        super().__init__(message)
        self.frame_step = frame_step


def mask_row_nbytes(frame_shape: tuple[int, ...]) -> int:
    """The bytes of one row of a changed-rows frame of uint8 ``frame_shape``: the product of its trailing
    axes, from the last, once it reaches ``MASK_ROW_MIN_BYTES`` (the whole frame if it never does)."""
    size = 1
    for dimension in reversed(frame_shape):
        size *= dimension
        if size >= MASK_ROW_MIN_BYTES:
            break
    return size


def changed_rows_bound(frame_shape: tuple[int, ...]) -> int:
    """The most bytes a changed-rows frame takes beyond lz4's worst case: its list of changed rows
    (``_c/changed_rows.h``, changed_rows_header_bound)."""
    return 3 * (math.prod(frame_shape) // mask_row_nbytes(frame_shape)) + 8


def compress_against(
    frame: npt.NDArray[np.uint8],
    reference: npt.NDArray[np.uint8] | None,
    *,
    changed_rows: bool = False,
    accelerated: bool = ACCELERATED,
) -> bytes:
    """A frame as a reference ring stores it: alone when ``reference`` is None (an lz4 block: HC for
    format version 4, plain for version 5, ``changed_rows``), else against it (one lz4 block of the whole
    frame, or, ``changed_rows``, its changed rows and one block of them)."""
    if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or not frame.flags.c_contiguous:
        raise TypeError(f"frame must be a C-contiguous numpy uint8 array; got {type(frame).__name__}")
    if reference is None:
        if changed_rows:
            return lz4_codec.compress(frame)
        key_frame: bytes = lz4.block.compress(frame, store_size=False, mode="high_compression", compression=KEY_LEVEL)
        return key_frame
    if not isinstance(reference, np.ndarray) or reference.dtype != np.uint8 or reference.shape != frame.shape:
        got = getattr(reference, "shape", type(reference).__name__)
        raise ValueError(f"reference must be a uint8 array of the frame's shape {frame.shape}; got {got}")
    if accelerated and _lz4ref is not None:
        if changed_rows:
            return bytes(_lz4ref.encode_rows(frame, np.ascontiguousarray(reference), mask_row_nbytes(frame.shape)))
        row_nbytes = frame.strides[0] if frame.ndim > 1 else frame.nbytes
        return bytes(_lz4ref.encode(frame, np.ascontiguousarray(reference), row_nbytes))
    if accelerated:
        raise ValueError("accelerated=True but mmreplay._lz4ref is not built (reference_codec.ACCELERATED is False)")
    if changed_rows:
        return _changed_rows_in_python(frame, reference)
    dependent: bytes = lz4.block.compress(
        frame, store_size=False, mode="high_compression", compression=FALLBACK_LEVEL, dict=reference.tobytes()
    )
    return dependent


def _put_count(value: int) -> bytes:
    """A number as a changed-rows frame writes it: lz4's length bytes (255 each, then the rest)."""
    return b"\xff" * (value // 255) + bytes([value % 255])


def _changed_rows_in_python(frame: npt.NDArray[np.uint8], reference: npt.NDArray[np.uint8]) -> bytes:
    """The fallback of ``_lz4ref.encode_rows``: the same list of rows, python-lz4's HC block of them
    (different bytes from the extension's block, the same frame once decoded)."""
    row = mask_row_nbytes(frame.shape)
    rows = frame.reshape(-1, row)
    changed = (rows != reference.reshape(-1, row)).any(axis=1)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], changed.astype(np.int8), [0]])))
    starts, stops = edges[0::2], edges[1::2]
    header = [_put_count(len(starts))]
    previous = 0
    for start, stop in zip(starts.tolist(), stops.tolist()):
        header += [_put_count(start - previous), _put_count(stop - start)]
        previous = stop
    if not len(starts):
        return b"".join(header)
    block: bytes = lz4.block.compress(
        rows[changed].tobytes(), store_size=False, mode="high_compression", compression=FALLBACK_LEVEL,
        dict=reference.tobytes(),
    )
    return b"".join(header) + block


def _get_count(payload: memoryview | bytes, at: int, limit: int) -> tuple[int, int]:
    """A number of a changed-rows frame's list at ``at``: its value and where the next begins; ValueError
    when it runs past the payload or beyond ``limit``."""
    value = 0
    while True:
        if at >= len(payload):
            raise ValueError("the list of changed rows runs past the frame")
        byte = payload[at]
        at += 1
        value += byte
        if value > limit:
            raise ValueError("the list of changed rows names more rows than the frame has")
        if byte != 255:
            return value, at


def _decode_changed_rows(payload: memoryview | bytes, reference: npt.NDArray[np.uint8], row: int) -> bytes:
    """The fallback of the compiled decoder for a changed-rows frame (``_c/reference_frame.c``): the frame,
    or ValueError / LZ4BlockError when the payload is not one."""
    rows = len(reference) // row
    count, at = _get_count(payload, 0, rows)
    runs = []
    covered = 0
    for _ in range(count):
        skip, at = _get_count(payload, at, rows)
        take, at = _get_count(payload, at, rows)
        if take == 0 or skip + take > rows - covered:
            raise ValueError("the list of changed rows does not fit the frame")
        runs.append((covered + skip, take))
        covered += skip + take
    changed = sum(take for _, take in runs)
    frame = np.array(reference, np.uint8).reshape(rows, row)
    if changed == 0:
        if at != len(payload):
            raise ValueError("a frame without changed rows has bytes after its list")
        return frame.tobytes()
    data = np.frombuffer(
        lz4.block.decompress(payload[at:], uncompressed_size=changed * row, dict=reference.tobytes()), np.uint8
    )
    if len(data) != changed * row:
        raise ValueError("the changed rows decode to another size")
    taken = 0
    for start, take in runs:
        frame[start : start + take] = data[taken * row : (taken + take) * row].reshape(take, row)
        taken += take
    return frame.tobytes()


@dataclass(frozen=True)
class DecodePlan:
    """What to decode for some requested frames and the frames they depend on, in decode order.

    Entry i is frame ``steps[i]``; it goes to row ``rows[i]`` (below ``requested``: that row of the
    caller's output; from ``requested`` on: a scratch row) and is compressed against entry ``refs[i]``
    (an earlier entry), or alone when -1.
    """

    steps: npt.NDArray[np.int64]
    refs: npt.NDArray[np.int64]
    rows: npt.NDArray[np.int64]
    requested: int

    @property
    def extra(self) -> int:
        """How many references were added to the requested frames."""
        return len(self.steps) - self.requested


def plan_decode(
    frame_steps: npt.ArrayLike, *, ref_deltas_of: RefDeltas, depth: int, accelerated: bool = ACCELERATED
) -> DecodePlan:
    """The plan that decodes ``frame_steps`` (repeats allowed) and every frame they depend on.

    ``ref_deltas_of(steps)`` reads the frame table (``depth + 1`` calls of one numpy lookup each) and
    returns integers of at most 32 bits, or int64. A
    chain of references longer than ``depth`` or a reference before frame step 0 means the table is
    damaged: ``CorruptFrameError``. Entries are ordered by level (key frames first), then by first
    appearance: requested frames in order, then references row by row.
    """
    requested = np.asarray(frame_steps, np.int64).reshape(-1)
    n = len(requested)
    # chain[k]: the k-th reference up from each requested frame (a key frame is its own reference)
    chain = np.empty((depth + 2, n), np.int64)
    chain[0] = requested
    for k in range(depth + 1):
        np.subtract(chain[k], ref_deltas_of(chain[k]), out=chain[k + 1])
    entries = np.empty((3, n * (depth + 1)), np.int64)
    if accelerated and _lz4ref is not None:
        try:
            m = int(_lz4ref.plan(chain, depth + 2, entries))
        except ValueError:
            raise _chain_error(chain) from None
    elif accelerated:
        raise ValueError("accelerated=True but mmreplay._lz4ref is not built (reference_codec.ACCELERATED is False)")
    else:
        if n and (chain.min() < 0 or (chain[1:] > chain[:-1]).any() or (chain[-1] != chain[-2]).any()):
            raise _chain_error(chain)
        m = _plan_in_python(chain.T.tolist(), entries)
    steps, refs, rows = entries[:, :m]
    return DecodePlan(steps=steps, refs=refs, rows=rows, requested=n)


def _chain_error(chain: npt.NDArray[np.int64]) -> Exception:
    """What is wrong with a table of reference chains that ``_lz4ref.plan`` refused."""
    if chain.shape[1] and chain[0].min() < 0:
        return ValueError(f"frame_steps must not be negative; got {chain[0].min()}")
    if chain.min() < 0:
        k, i = (int(x[0]) for x in np.nonzero(chain < 0))
        step = int(chain[k - 1, i])
        return CorruptFrameError(f"frame {step} names a reference before frame step 0", frame_step=step)
    if (chain[1:] > chain[:-1]).any():
        k, i = (int(x[0]) for x in np.nonzero(chain[1:] > chain[:-1]))
        step = int(chain[k, i])
        return CorruptFrameError(f"frame {step} names a reference after itself", frame_step=step)
    i = int(np.flatnonzero(chain[-1] != chain[-2])[0])
    step = int(chain[-1, i])
    depth = len(chain) - 2
    return CorruptFrameError(
        f"frame {step} is a reference {depth + 1} frames deep; the scheme allows {depth}", frame_step=step
    )


def _plan_in_python(chain: list[list[int]], out: npt.NDArray[np.int64]) -> int:
    """The fallback of ``_lz4ref.plan`` (``chain`` one list per requested frame): the same entries."""
    steps, refs, rows = out
    entry_of: dict[int, int] = {}
    entries: list[tuple[int, int, int, int]] = []  # (step, reference step, level, row)
    for i, links in enumerate(chain):
        level = 0
        while level < len(links) - 1 and links[level] != links[level + 1]:
            level += 1
        entry_of.setdefault(links[0], len(entries))
        entries.append((links[0], links[1], level, i))
    for i, links in enumerate(chain):
        for k in range(1, entries[i][2] + 1):
            if links[k] in entry_of:
                break
            entry_of[links[k]] = len(entries)
            entries.append((links[k], links[k + 1], entries[i][2] - k, len(entries)))  # row n, n + 1, ...
    order = sorted(range(len(entries)), key=lambda e: entries[e][2])  # stable
    position = [0] * len(entries)
    for p, e in enumerate(order):
        position[e] = p
    for p, e in enumerate(order):
        step, reference, level, row = entries[e]
        steps[p], rows[p] = step, row
        refs[p] = -1 if level == 0 else position[entry_of[reference]]
    return len(entries)


def decode_frames(
    frame_steps: npt.ArrayLike,
    out: npt.NDArray[np.uint8],
    *,
    ref_deltas_of: RefDeltas,
    locate: Locator,
    views: Sequence[memoryview],
    depth: int,
    changed_rows: bool = False,
    accelerated: bool = ACCELERATED,
) -> DecodePlan:
    """Decode each frame of ``frame_steps`` into ``out[i]`` with the frames it depends on; returns the plan.

    ``locate(steps)`` gives each frame's segment, offset, length, checksum and CRC seed (as
    ``codec.decode_batch`` takes them); ``changed_rows``: dependent frames are their changed rows (format
    version 5). Raises ``CorruptFrameError`` naming the first frame that fails.
    """
    plan = plan_decode(frame_steps, ref_deltas_of=ref_deltas_of, depth=depth, accelerated=accelerated)
    segments, offsets, lengths, checksums, seeds = locate(plan.steps)
    bad = decode_batch(
        segments, offsets, lengths, checksums, seeds, plan.refs, plan.rows, out, views=views,
        changed_rows=changed_rows, accelerated=accelerated,
    )
    if bad >= 0:
        step = int(plan.steps[bad])
        role = "" if plan.rows[bad] < plan.requested else " (a reference of a requested frame)"
        raise CorruptFrameError(f"frame {step}{role} fails its checksum or does not decode", frame_step=step)
    return plan


def decode_batch(
    segments: npt.NDArray[np.int64],
    offsets: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    checksums: npt.NDArray[np.uint32],
    seeds: npt.NDArray[np.int64],
    refs: npt.NDArray[np.int64],
    rows: npt.NDArray[np.int64],
    out: npt.NDArray[np.uint8],
    *,
    views: Sequence[memoryview],
    changed_rows: bool = False,
    accelerated: bool = ACCELERATED,
    threads: int = 1,
) -> int:
    """Decode m entries in order; -1 when all are good, else the index of the first bad entry.

    Entry i's bytes are ``views[segments[i]][offsets[i] : offsets[i] + lengths[i]]``, checked against
    ``checksums[i]`` (CRC-32 seeded with ``seeds[i] & 0xFFFFFFFF``), and decode (against entry
    ``refs[i]``'s frame unless -1) into ``out[rows[i]]``, or a scratch row when ``rows[i] >= len(out)``.
    ``out`` is C-contiguous (n, *frame_shape) uint8; when the result is not -1 its content is
    unspecified. ``changed_rows``: dependent frames are their changed rows (format version 5), in rows of
    ``mask_row_nbytes(out.shape[1:])``. ``accelerated=False`` forces the python-lz4 loop (tests compare both).
    ``threads``: up to that many of the plain frames' pool threads (``mmreplay._lz4batch.reference_decode``:
    each key frame and the entries that depend on it on one thread), with the same result.
    """
    if not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.ndim < 1:
        raise TypeError(f"out must be a numpy uint8 (n, *frame_shape) array; got {type(out).__name__}")
    frame_nbytes = int(np.prod(out.shape[1:]))
    if not out.flags.c_contiguous or not out.flags.writeable or frame_nbytes == 0:
        raise ValueError(f"out must be a writeable C-contiguous (n, *frame_shape) array; got shape {out.shape}")
    named = {"segments": segments, "offsets": offsets, "lengths": lengths, "checksums": checksums, "seeds": seeds,
             "refs": refs, "rows": rows}  # fmt: skip
    m = len(rows) if isinstance(rows, np.ndarray) else -1
    for name, array in named.items():
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "iu" or array.shape != (m,):
            got = f"{type(array).__name__} of shape {getattr(array, 'shape', None)}"
            raise TypeError(f"{name} must be a numpy integer array of shape ({m},) like rows; got {got}")
    scratch_rows = max(0, int(rows.max()) + 1 - len(out)) if m else 0
    scratch = np.empty((scratch_rows, *out.shape[1:]), np.uint8)
    arrays = (
        np.require(segments, np.int64, ("C", "A")),
        np.require(offsets, np.int64, ("C", "A")),
        np.require(lengths, np.int64, ("C", "A")),
        np.require(checksums, np.uint32, ("C", "A")),
        np.asarray(seeds).astype(np.uint32),  # wraps modulo 2**32, like ``& 0xFFFFFFFF``
        np.require(refs, np.int64, ("C", "A")),
        np.require(rows, np.int64, ("C", "A")),
    )
    row_nbytes = mask_row_nbytes(out.shape[1:]) if changed_rows else 0
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 64:
        raise ValueError(f"threads is {threads!r}; expected 1 to 64")
    if accelerated and threads > 1 and _lz4batch is not None:
        return int(_lz4batch.reference_decode(views, *arrays, out, scratch, frame_nbytes, row_nbytes, threads))
    if accelerated and _lz4ref is not None:
        return int(_lz4ref.decode(views, *arrays, out, scratch, frame_nbytes, row_nbytes))
    if accelerated:
        raise ValueError("accelerated=True but mmreplay._lz4ref is not built (reference_codec.ACCELERATED is False)")
    _check_plan(arrays[0], arrays[5], arrays[6], view_count=len(views), total_rows=len(out) + scratch_rows)
    return _decode_in_python(views, *arrays, out, scratch, frame_nbytes, row_nbytes)


def _check_plan(
    segments: npt.NDArray[np.int64], refs: npt.NDArray[np.int64], rows: npt.NDArray[np.int64], *, view_count: int,
    total_rows: int,
) -> None:  # fmt: skip
    """The extension's argument checks, with its messages, for the fallback."""
    m = len(rows)
    bad_ref = np.flatnonzero((refs < -1) | (refs >= np.arange(m)))
    if bad_ref.size:
        i = int(bad_ref[0])
        raise ValueError(f"refs[{i}] is {refs[i]}; expected -1 or an earlier entry (0 to {i - 1})")
    first_use = np.zeros(m, bool)
    first_use[np.unique(rows, return_index=True)[1]] = True
    bad_row = np.flatnonzero((rows < 0) | (rows >= total_rows) | ~first_use)
    if bad_row.size:
        i = int(bad_row[0])
        raise ValueError(
            f"rows[{i}] is {rows[i]}; expected a row not used before, 0 <= row < {total_rows} (out and scratch rows)"
        )
    bad_segment = np.flatnonzero((segments < 0) | (segments >= view_count))
    if bad_segment.size:
        i = int(bad_segment[0])
        raise ValueError(f"segments[{i}] is {segments[i]}; expected 0 <= segment < {view_count} (len(views))")


def _decode_in_python(
    views: Sequence[memoryview],
    segments: npt.NDArray[np.int64],
    offsets: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    checksums: npt.NDArray[np.uint32],
    seeds: npt.NDArray[np.uint32],
    refs: npt.NDArray[np.int64],
    rows: npt.NDArray[np.int64],
    out: npt.NDArray[np.uint8],
    scratch: npt.NDArray[np.uint8],
    frame_nbytes: int,
    row_nbytes: int,
) -> int:
    """The fallback: the extension's checks in the same order, one python-lz4 call a frame (a changed-rows
    frame's rows put in place with numpy, where ``row_nbytes``)."""
    n_out = len(out)
    targets = (out.reshape(n_out, frame_nbytes), scratch.reshape(len(scratch), frame_nbytes))
    crc32, decompress_block = zlib.crc32, lz4.block.decompress
    columns = zip(
        segments.tolist(), offsets.tolist(), lengths.tolist(), checksums.tolist(), seeds.tolist(), refs.tolist()
    )
    row_list = rows.tolist()
    for i, (segment, offset, length, expected, seed, ref) in enumerate(columns):
        payload = views[segment][offset : offset + length]
        if offset < 0 or len(payload) != length or crc32(payload, seed) != expected:
            return i
        row = row_list[i]
        target = targets[0][row] if row < n_out else targets[1][row - n_out]
        try:
            if ref < 0:
                frame = decompress_block(payload, uncompressed_size=frame_nbytes)
            else:
                ref_row = row_list[ref]
                reference = targets[0][ref_row] if ref_row < n_out else targets[1][ref_row - n_out]
                if row_nbytes:
                    frame = _decode_changed_rows(payload, reference, row_nbytes)
                else:
                    frame = decompress_block(payload, uncompressed_size=frame_nbytes, dict=reference)
        except (lz4.block.LZ4BlockError, ValueError):
            return i
        if len(frame) != frame_nbytes:
            return i
        target[:] = np.frombuffer(frame, np.uint8)
    return -1


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
