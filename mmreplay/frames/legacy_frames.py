"""Reference frames of format versions 4 and 5, decoded in pure Python: what opens a store those versions
wrote (read-only) and what ``mmreplay convert`` reads to write it again in the current format.

Both keep a key frame as one lz4 block (version 4 compressed it with lz4's HC mode, version 5 plainly:
either decodes as any lz4 block). A dependent frame is, in version 4, one lz4 block of the whole frame
with its reference as lz4's dictionary; in version 5, its *changed rows*: a count, then ``count`` pairs
(skip, take) of rows of ``mask_row_nbytes`` bytes, each number written as lz4 writes a length, then one
lz4 block of just the changed rows, back to back, with the reference as dictionary (a frame equal to its
reference is one byte, 0). Nothing here writes these formats.
"""

from __future__ import annotations

import lz4.block
import numpy as np

from mmreplay.frames.reference_codec import Apply

# A version 5 changed-rows frame's rows: the first run of a frame's trailing axes that holds at least
# this many bytes (an 84x84 frame's rows of 84 bytes; a (210, 160, 3) frame's of 480).
MASK_ROW_MIN_BYTES = 32


def mask_row_nbytes(frame_shape: tuple[int, ...]) -> int:
    """The bytes of one row of a version 5 changed-rows frame of uint8 ``frame_shape``: the product of its
    trailing axes, from the last, once it reaches ``MASK_ROW_MIN_BYTES`` (the whole frame if it never does)."""
    size = 1
    for dimension in reversed(frame_shape):
        size *= dimension
        if size >= MASK_ROW_MIN_BYTES:
            break
    return size


def changed_rows_bound(frame_shape: tuple[int, ...]) -> int:
    """The most bytes a version 5 changed-rows frame takes beyond lz4's worst case: its list of rows."""
    return 3 * (int(np.prod(frame_shape)) // mask_row_nbytes(frame_shape)) + 8


def _get_count(payload: bytes | memoryview, at: int, limit: int) -> tuple[int, int]:
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


def decode_changed_rows(payload: bytes | memoryview, reference: bytes, row: int) -> bytes:
    """A version 5 changed-rows frame against ``reference``; ValueError / LZ4BlockError when the payload
    is not one."""
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
    frame = np.frombuffer(reference, np.uint8).reshape(rows, row).copy()
    if changed == 0:
        if at != len(payload):
            raise ValueError("a frame without changed rows has bytes after its list")
        return frame.tobytes()
    data = np.frombuffer(lz4.block.decompress(payload[at:], uncompressed_size=changed * row, dict=reference), np.uint8)
    if len(data) != changed * row:
        raise ValueError("the changed rows decode to another size")
    taken = 0
    for start, take in runs:
        frame[start : start + take] = data[taken * row : (taken + take) * row].reshape(take, row)
        taken += take
    return frame.tobytes()


def apply_for(version: int, frame_shape: tuple[int, ...]) -> Apply:
    """How a dependent frame of format ``version`` (4 or 5) decodes against its reference (the bytes of
    ``frame_shape``): reference_codec.rebuild's ``apply_block``."""
    frame_nbytes = int(np.prod(frame_shape))
    if version >= 5:
        row = mask_row_nbytes(frame_shape)

        def changed_rows(payload: bytes | memoryview, reference: bytes) -> bytes:
            try:
                return decode_changed_rows(payload, reference, row)
            except lz4.block.LZ4BlockError as error:
                raise ValueError(str(error)) from None

        return changed_rows

    def whole(payload: bytes | memoryview, reference: bytes) -> bytes:
        try:
            frame: bytes = lz4.block.decompress(payload, uncompressed_size=frame_nbytes, dict=reference)
        except lz4.block.LZ4BlockError as error:
            raise ValueError(str(error)) from None
        if len(frame) != frame_nbytes:
            raise ValueError("the frame decodes to another size")
        return frame

    return whole
