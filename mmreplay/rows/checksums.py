"""The checksum of a fixed-size record tied to its step: the transition table's rows (format version 4).

``row_checksum(body, step)`` is the CRC-32 (zlib's polynomial, the one frames use) of the step as 8
little-endian bytes followed by ``body``, the record's checked bytes. Mixing in the step makes a record
read at the wrong step (a reused slot) fail; the CRC makes multi-byte damage fail: a CRC-32 detects every
change confined to 32 consecutive bits and every change of up to 4 bits in records under 371 bytes
(Hamming distance 5 up to 2,974 bits, Koopman's tables), and misses any other random change with
probability 2**-32. The position-weighted byte sum of format version 3 missed compensating two-byte
changes (about 1 in 12,000) and accepted an all-zero row at step 0; a CRC of zeros is not zero.

The compiled extension computes the same values (``_lz4batch.row_checksums``, and inside its row
gathering); ``MMREPLAY_PURE_PYTHON=1`` hides it. Other records with a step (a user field's ring) can
reuse these two functions.
"""

from __future__ import annotations

import zlib

import numpy as np
import numpy.typing as npt

from mmreplay import extensions

_lz4batch = extensions.load("_lz4batch")


def row_checksum(body: bytes, step: int) -> int:
    """The checksum of one record's checked bytes at ``step`` (an unsigned 32-bit int)."""
    return zlib.crc32(body, zlib.crc32(int(step).to_bytes(8, "little", signed=True)))


def row_checksums(
    records: npt.NDArray[np.uint8], steps: npt.NDArray[np.int64], *, skip: int = 0
) -> npt.NDArray[np.uint32]:
    """``row_checksum`` of each row of ``records`` (an ``(n, width)`` byte array) at its step, over the
    bytes after the first ``skip`` of each row (a packed row's own checksum field and unchecked links)."""
    records = np.ascontiguousarray(records, np.uint8)
    steps = np.ascontiguousarray(steps, np.int64)
    if records.ndim != 2 or len(records) != len(steps) or not 0 <= skip <= records.shape[1]:
        raise ValueError(
            f"records has shape {records.shape}, steps {steps.shape} and skip is {skip}; expected (n, width), "
            "(n,) and 0 <= skip <= width"
        )
    out = np.empty(len(steps), np.uint32)
    if _lz4batch is not None:
        if skip != 8:  # the extension checksums the bytes after the first 8 of each row
            padded = np.zeros((len(records), records.shape[1] - skip + 8), np.uint8)
            padded[:, 8:] = records[:, skip:]
            records = padded
        _lz4batch.row_checksums(records, records.shape[1], steps, out)
        return out
    prefixes = steps.astype("<i8").tobytes()
    bodies = records[:, skip:]
    out[:] = [zlib.crc32(bodies[i].tobytes(), zlib.crc32(prefixes[8 * i : 8 * i + 8])) for i in range(len(steps))]
    return out
