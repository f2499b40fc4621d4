"""zlib's CRC-32 as a linear map over GF(2): a batch's frame checksums checked as one matrix product.

A stored frame's checksum is ``zlib.crc32(block, seed)`` of its lz4 block (``frames.lz4_codec``). Let
R(m) be the CRC register after processing the bytes m from a zero register, without zlib's inversions.
R is linear over GF(2), leading zero bytes leave it unchanged, and processing m from a register r gives
Z^len(m)(r) ^ R(m), where Z is the step of one zero byte. zlib starts from ``seed ^ 0xFFFFFFFF`` and
inverts the result, so for the four bytes q with R(q) = seed ^ 0xFFFFFFFF:

    zlib.crc32(m, seed) = R(q + m) ^ 0xFFFFFFFF

R of four bytes from a zero register is 32 steps of the CRC's shift register, which is invertible, so q
is a fixed linear function of the seed (``seed_prefixes``, four table lookups). Each block then becomes a
*row* of W bytes, right-aligned: zeros, q, the block. Byte p of a row, bit j, adds the same 32-bit vector
to R for every row (the register contribution of that bit at distance W - 1 - p from the row's end), so
R of all rows at once is bits(rows) @ M mod 2, with M of shape (8W, 32) (``parity_matrix``): one integer
matrix product on the GPU in place of a CRC kernel, and the same code checked against zlib on the CPU.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import torch

POLYNOMIAL = 0xEDB88320  # zlib's CRC-32, bit-reflected
INVERT = 0xFFFFFFFF
PREFIX_BYTES = 4
ROW_ALIGNMENT = 64  # row widths are rounded up to this: fewer distinct shapes, and 8W a multiple of 8


@functools.cache
def crc_table() -> npt.NDArray[np.uint32]:
    """zlib's table: the register after one byte ``b`` from a zero register, for b in 0..255."""
    values = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        values = ((values >> 1) ^ np.where(values & 1, POLYNOMIAL, 0)).astype(np.uint32)
    return values


def register(data: bytes) -> int:
    """R(data): the register after ``data`` from zero, without zlib's inversions (a plain reference)."""
    table = crc_table()
    value = 0
    for byte in data:
        value = int(table[(value ^ byte) & 0xFF]) ^ (value >> 8)
    return value


@functools.cache
def _unshift_tables() -> npt.NDArray[np.uint32]:
    """(4, 256): T[k][v] is the 32-bit little-endian word w whose four bytes give R = v << 8k, so that
    the word for a target t is T[0][t & 255] ^ T[1][(t >> 8) & 255] ^ ... (R is linear)."""
    values = (np.arange(256, dtype=np.uint64)[None, :] << (8 * np.arange(4, dtype=np.uint64))[:, None]).astype(np.uint32)
    top = np.uint32(0x80000000)
    for _ in range(32):  # undo one shift-register step: the polynomial was added iff the top bit is set now
        undone = (((values ^ np.uint32(POLYNOMIAL)) << np.uint32(1)) | np.uint32(1)).astype(np.uint32)
        values = np.where(values & top, undone, (values << np.uint32(1)).astype(np.uint32)).astype(np.uint32)
    return values


def seed_prefixes(seeds: npt.NDArray[np.integer]) -> npt.NDArray[np.uint8]:
    """(n, 4) bytes q with R(q) = seed ^ 0xFFFFFFFF for each seed (taken modulo 2**32): the prefix that
    makes ``R(q + block) ^ 0xFFFFFFFF`` equal ``zlib.crc32(block, seed)``."""
    target = np.asarray(seeds).astype(np.uint32) ^ np.uint32(INVERT)
    tables = _unshift_tables()
    words = tables[0][target & 255] ^ tables[1][(target >> 8) & 255] ^ tables[2][(target >> 16) & 255] ^ tables[3][target >> 24]
    return np.ascontiguousarray(words.astype("<u4")).view(np.uint8).reshape(-1, PREFIX_BYTES)


def row_width(longest_block: int) -> int:
    """The row width for blocks of up to ``longest_block`` bytes: the block and its prefix, rounded up."""
    needed = longest_block + PREFIX_BYTES
    return max(ROW_ALIGNMENT, -(-needed // ROW_ALIGNMENT) * ROW_ALIGNMENT)


@functools.cache
def parity_matrix(width: int) -> npt.NDArray[np.uint8]:
    """(8 * width, 32) of 0 and 1: row 8p + j holds the bits of R's contribution of bit j of byte p of a
    ``width``-byte row. A narrower width's matrix is this one's last rows (rows are right-aligned).
    Read-only: one per width, made once (~0.2 s for Atari frames' widest rows)."""
    table = crc_table()
    contributions = np.empty((width, 8), np.uint32)
    vector = table[1 << np.arange(8)]  # bit j of the last byte
    for distance in range(width):
        contributions[width - 1 - distance] = vector
        vector = table[vector & 0xFF] ^ (vector >> 8)  # one more zero byte after it
    bits = ((contributions[..., None] >> np.arange(32, dtype=np.uint32)) & 1).reshape(8 * width, 32).astype(np.uint8)
    bits.setflags(write=False)
    return bits


def rows_of_blocks(
    data: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, prefixes: torch.Tensor, width: int
) -> torch.Tensor:
    """(n, width) uint8 rows on ``data``'s device: block i (``lengths[i]`` bytes of ``data`` from
    ``starts[i]``) right-aligned behind its four ``prefixes[i]`` and leading zeros. Every block must be
    at most ``width - 4`` bytes long, and ``data`` must hold every block."""
    import torch

    count = len(lengths)
    # One source for both: the blocks, then the prefixes (four bytes per row); int32 index arithmetic.
    source = torch.cat([data.reshape(-1), prefixes.reshape(-1)])
    offset = torch.arange(width, dtype=torch.int32, device=data.device)[None, :] - (width - lengths.to(torch.int32))[:, None]
    prefix_at = data.numel() + PREFIX_BYTES * torch.arange(count, dtype=torch.int32, device=data.device) + PREFIX_BYTES
    index = torch.where(offset >= 0, starts.to(torch.int32)[:, None] + offset, prefix_at[:, None] + offset)
    gathered = source[index.clamp_(0, source.numel() - 1)]
    return gathered.masked_fill_(offset < -PREFIX_BYTES, 0)


class ParityCrc:
    """The CRC-32 of right-aligned rows as a matrix product on one device: ``row_checksums(rows)`` gives
    ``zlib.crc32(block, seed)`` of each row's block, whose prefix folded in its seed (``seed_prefixes``);
    ``checksums`` takes the blocks themselves (what ``nvcomp_crc32.NvcompCrc`` takes).

    The product runs in int8 with int32 sums (``torch._int_mm``) where the device has it, else in float32
    (exact: sums of 0 and 1 stay far below 2**24)."""

    method = "parity"

    def __init__(self, device: torch.device, *, max_width: int) -> None:
        import torch

        self.max_width = max_width
        matrix = torch.from_numpy(parity_matrix(max_width).copy()).to(device)
        self._int8 = matrix.to(torch.int8)
        self._float = matrix.to(torch.float32)
        self._shifts = torch.arange(8, dtype=torch.uint8, device=device)
        self._powers = torch.pow(2, torch.arange(32, device=device, dtype=torch.int64))
        self.uses_int8 = _int_mm_works(device)

    def checksums(self, data: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, prefixes: torch.Tensor,
                  width: int) -> torch.Tensor:
        """(n,) int64: ``zlib.crc32`` of each block (``rows_of_blocks``' arguments) with its prefix's seed."""
        return self.row_checksums(rows_of_blocks(data, starts, lengths, prefixes, width))

    def row_checksums(self, rows: torch.Tensor) -> torch.Tensor:
        """(n,) int64: ``zlib.crc32`` of each row's block with the seed its prefix folds in."""
        import torch

        count, width = rows.shape
        if width > self.max_width:
            raise ValueError(f"rows are {width} bytes wide; this ParityCrc was built for at most {self.max_width}")
        bits = ((rows.unsqueeze(-1) >> self._shifts) & 1).reshape(count, 8 * width)
        start = 8 * (self.max_width - width)
        sums = None
        if self.uses_int8:
            padded = max(count, 17)  # _int_mm wants more than 16 rows
            if padded != count:
                bits = torch.cat([bits, bits.new_zeros(padded - count, bits.shape[1])])
            try:
                sums = torch._int_mm(bits.to(torch.int8), self._int8[start:])[:count]
            except RuntimeError:  # a shape this build's int8 product refuses: float32 from now on
                self.uses_int8 = False
                bits = bits[:count]
        if sums is None:
            sums = (bits.to(torch.float32) @ self._float[start:]).to(torch.int64)
        register = ((sums & 1).to(torch.int64) * self._powers).sum(dim=1)
        return register ^ INVERT


def _int_mm_works(device: torch.device) -> bool:
    """Whether ``torch._int_mm`` multiplies int8 matrices of the shapes ``ParityCrc`` uses on ``device``."""
    import torch

    try:
        left = torch.ones((17, 16), dtype=torch.int8, device=device)
        right = torch.ones((16, 32), dtype=torch.int8, device=device)
        return bool((torch._int_mm(left, right) == 16).all())
    except (RuntimeError, AttributeError, NotImplementedError):
        return False
