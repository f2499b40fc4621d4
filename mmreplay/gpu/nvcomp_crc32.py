"""The frames' checksums checked by nvCOMP's batched CRC-32 kernel: the alternative to ``crc_parity``'s
matrix product, chosen where it passes the decoder's self-check (``device_decode.check_decoder``).

nvCOMP computes a CRC model given as (polynomial, initial register, reflection, final xor) over many
chunks in one launch, one initial value for all. With the reflected CRC-32 polynomial, a zero initial
register and no final xor it gives R(chunk), the plain register of ``crc_parity``; so, as there, each
block travels behind the four bytes q of its seed (``crc_parity.seed_prefixes``) and
``R(q + block) ^ 0xFFFFFFFF`` is ``zlib.crc32(block, seed)``. The chunks (q, block) are laid out back to
back by one gather on the device: block i moves 4 * (i + 1) bytes up, behind its prefix.

The signatures are nvCOMP 6's ``nvcomp/crc32.h``; ctypes releases the GIL during each call.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import TYPE_CHECKING

from mmreplay.gpu.crc_parity import INVERT, PREFIX_BYTES
from mmreplay.gpu.nvcomp_lz4 import NVCOMP_SUCCESS, load_library

if TYPE_CHECKING:
    import torch

_REFLECTED_POLYNOMIAL_NORMAL_FORM = 0x04C11DB7  # zlib's polynomial as nvCOMP's spec names it
_ONLY_SEGMENT = 0  # nvcompCRC32SegmentKind_t: nvcompCRC32OnlySegment


class Spec(ctypes.Structure):
    """``nvcompCRC32Spec_t`` (32 bytes)."""

    _fields_ = [("poly", ctypes.c_uint32), ("init", ctypes.c_uint32), ("ref_in", ctypes.c_bool),
                ("ref_out", ctypes.c_bool), ("xorout", ctypes.c_uint32), ("reserved", ctypes.c_char * 16)]


class KernelConf(ctypes.Structure):
    """``nvcompCRC32KernelConf_t`` (32 bytes)."""

    _fields_ = [("kernel_kind", ctypes.c_int), ("bytes_per_read", ctypes.c_int32), ("blocks_per_msg", ctypes.c_int32),
                ("reserved", ctypes.c_char * 20)]


class Opts(ctypes.Structure):
    """``nvcompBatchedCRC32Opts_t``: passed by value, 128 bytes."""

    _fields_ = [("spec", Spec), ("kernel_conf", KernelConf), ("reserved", ctypes.c_char * 64)]


class NvcompCrc:
    """``checksums(...)`` by nvCOMP on a CUDA device, for up to ``max_blocks`` blocks of at most
    ``max_block_bytes`` each a call. ``ModuleNotFoundError`` without libnvcomp, ``RuntimeError`` when the
    library refuses the configuration."""

    method = "nvcomp"

    def __init__(self, device: torch.device, *, max_blocks: int, max_block_bytes: int,
                 library: str | Path | None = None) -> None:
        import torch

        self.device = device
        self._lib = load_library(library)
        self._declare()
        conf = KernelConf()
        status = self._lib.nvcompBatchedCRC32GetHeuristicConf(None, max_blocks, ctypes.byref(conf),
                                                              max_block_bytes + PREFIX_BYTES, None)
        if status != NVCOMP_SUCCESS:
            raise RuntimeError(f"nvcompBatchedCRC32GetHeuristicConf failed (nvCOMP status {status})")
        spec = Spec(poly=_REFLECTED_POLYNOMIAL_NORMAL_FORM, init=0, ref_in=True, ref_out=True, xorout=0)
        self._opts = Opts(spec=spec, kernel_conf=conf)
        self._registers = torch.zeros(max_blocks, dtype=torch.int32, device=device)  # uint32 bits
        self._statuses = torch.zeros(max_blocks, dtype=torch.int32, device=device)

    def checksums(self, data: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, prefixes: torch.Tensor,
                  width: int) -> torch.Tensor:
        """(n,) int64: ``zlib.crc32`` of each block with the seed its prefix folds in; -1 where nvCOMP
        reports a failure (never a CRC-32). ``data`` holds the blocks back to back and nothing after."""
        import torch

        count = len(lengths)
        chunks, chunk_starts, sizes = chunks_of_blocks(data, starts, lengths, prefixes)
        addresses = chunk_starts + chunks.data_ptr()
        status = self._lib.nvcompBatchedCRC32Async(
            addresses.data_ptr(), sizes.data_ptr(), count, self._registers.data_ptr(), self._opts, _ONLY_SEGMENT,
            self._statuses.data_ptr(), torch.cuda.current_stream(self.device).cuda_stream,
        )
        if status != NVCOMP_SUCCESS:
            raise RuntimeError(f"nvcompBatchedCRC32Async failed (nvCOMP status {status})")
        crcs = (self._registers[:count].to(torch.int64) & INVERT) ^ INVERT
        return torch.where(self._statuses[:count] == NVCOMP_SUCCESS, crcs, -1)

    def _declare(self) -> None:
        lib, size, pointer = self._lib, ctypes.c_size_t, ctypes.c_void_p
        lib.nvcompBatchedCRC32GetHeuristicConf.restype = ctypes.c_int
        lib.nvcompBatchedCRC32GetHeuristicConf.argtypes = [pointer, size, ctypes.POINTER(KernelConf), size, pointer]
        lib.nvcompBatchedCRC32Async.restype = ctypes.c_int
        lib.nvcompBatchedCRC32Async.argtypes = [pointer, pointer, size, pointer, Opts, ctypes.c_int, pointer, pointer]


def chunks_of_blocks(data: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, prefixes: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The blocks of ``data`` (back to back: ``starts`` are the running sums of ``lengths``) each behind its
    four ``prefixes``, back to back on ``data``'s device: (bytes, where each chunk starts, its size)."""
    import torch

    count = len(lengths)
    positions = torch.arange(count, dtype=torch.int64, device=data.device)
    chunk_starts = starts + PREFIX_BYTES * positions
    total = data.numel() + PREFIX_BYTES * count
    owner = torch.repeat_interleave(positions, lengths + PREFIX_BYTES, output_size=total)
    offset = torch.arange(total, dtype=torch.int64, device=data.device) - chunk_starts[owner]
    source = torch.where(offset < PREFIX_BYTES, data.numel() + PREFIX_BYTES * owner + offset,
                         starts[owner] + offset - PREFIX_BYTES)
    chunks = torch.cat([data.reshape(-1), prefixes.reshape(-1)])[source]
    return chunks, chunk_starts, lengths + PREFIX_BYTES
