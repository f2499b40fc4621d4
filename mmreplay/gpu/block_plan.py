"""The host's half of decoding a batch on the device: where each stored block lies in what is copied,
what it is checked against, and which decoded frame fills each position of the batch's pixels.

An encoded batch (``sample_encoded``) holds the batch's distinct frames as lz4 blocks back to back
(``EncodedFrames.data``) and, per transition, which of them make its frames (``frame_index``). The
blocks travel as they are, one copy; the device decodes block i into row i of a (frames, frame bytes)
array, then gathers the batch's pixels from those rows by ``gather``. No per-frame Python work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mmreplay.frames.wire import EncodedFrames
from mmreplay.gpu.crc_parity import row_width, seed_prefixes


def lz4_bound(frame_nbytes: int) -> int:
    """The largest lz4 block of a frame of ``frame_nbytes`` (liblz4's LZ4_COMPRESSBOUND)."""
    return frame_nbytes + frame_nbytes // 255 + 16


@dataclass(frozen=True)
class BlockPlan:
    """One encoded batch laid out for the device.

    ``starts`` and ``lengths``: block i is ``data[starts[i] : starts[i] + lengths[i]]`` (int64, as nvCOMP
    reads sizes); ``prefixes`` (n, 4): its CRC seed folded into four bytes (``crc_parity``);
    ``checksums``: the CRC-32 it had on disk; ``gather``: for each position of the batch's pixels,
    flattened, the block that decodes into it; ``width``: the bytes of one CRC row for the longest block."""

    data: bytes | memoryview
    starts: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    prefixes: npt.NDArray[np.uint8]
    checksums: npt.NDArray[np.uint32]
    gather: npt.NDArray[np.int64]
    width: int

    def __len__(self) -> int:
        """The number of blocks (distinct frames)."""
        return len(self.lengths)


def plan_blocks(frames: EncodedFrames, frame_index: npt.NDArray[np.int64]) -> BlockPlan:
    """The plan of an encoded batch's ``frames`` and ``frame_index`` (any shape; each entry names one of
    ``frames``). Blocks that decode alone only: nvCOMP's batched lz4 takes no dictionary."""
    if frames.references is not None and bool((frames.references >= 0).any()):
        raise ValueError("frames holds blocks compressed against other frames (a 'lz4-reference' store's batch); "
                         "the device decodes blocks that decode alone: decode it on the host")
    lengths = np.ascontiguousarray(frames.lengths, np.int64)
    starts = np.zeros(len(lengths), np.int64)
    if len(lengths) > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    gather = np.ascontiguousarray(frame_index, np.int64).reshape(-1)
    if gather.size and (gather.min() < 0 or gather.max() >= len(lengths)):
        raise ValueError(f"frame_index holds {int(gather.min())} to {int(gather.max())}; expected 0 to {len(lengths) - 1}")
    return BlockPlan(
        data=frames.data,
        starts=starts,
        lengths=lengths,
        prefixes=seed_prefixes(frames.seeds),
        checksums=np.ascontiguousarray(frames.checksums, np.uint32),
        gather=gather,
        width=row_width(int(lengths.max()) if len(lengths) else 0),
    )
