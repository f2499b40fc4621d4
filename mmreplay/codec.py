"""Frame compression: lz4 block format, one frame per block, with a CRC-32 bound to the frame's step.

This is the only module that imports lz4. The checksum is seeded with the frame step, so a frame read
back at the wrong step (a slot reused by the ring) fails the check just like a flipped byte.
"""

from __future__ import annotations

import zlib

import lz4.block
import numpy as np
import numpy.typing as npt


def compress(frame: npt.NDArray[np.uint8]) -> bytes:
    """Compress one contiguous frame; the uncompressed size is not stored (the store knows it)."""
    return lz4.block.compress(frame, store_size=False)


def checksum(payload: bytes | memoryview, frame_step: int) -> int:
    return zlib.crc32(payload, frame_step & 0xFFFFFFFF)


def decompress(payload: bytes | memoryview, frame_nbytes: int) -> bytes:
    return lz4.block.decompress(payload, uncompressed_size=frame_nbytes)
