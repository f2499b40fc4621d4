"""Decoding a batch's stored lz4 blocks on the device: decompress, check, gather.

``DeviceDecoder.decode`` takes what ``block_plan`` laid out, already on the device: the blocks back to
back, where each starts, its length, CRC prefix and stored checksum, and the gather indices. On the
current CUDA stream it decompresses block i into row i of a scratch array (a ``Decompressor``: nvCOMP's
batched LZ4 on a GPU), checks each block as the host path does (its CRC-32 seeded as stored, by a
``BlockCrc``: ``crc_parity``'s matrix product or ``nvcomp_crc32``'s kernel; and that it decoded to exactly
one frame), and gathers the batch's pixels from the rows.
Nothing waits for the device: the index of the first bad block (or -1) is copied into a host tensor
that the caller reads once the stream has passed it.

The decompressor is an argument so that the whole of this, but the nvCOMP call, runs on the CPU in tests;
``check_decoder`` runs a decoder once on frames the host encoded before it serves batches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from mmreplay.gpu.crc_parity import ParityCrc, row_width
from mmreplay.gpu.nvcomp_lz4 import BatchedLZ4

if TYPE_CHECKING:
    from pathlib import Path

    import torch


class BlockCrc(Protocol):
    """Checks blocks: ``checksums`` gives (n,) int64, ``zlib.crc32`` of each block (``lengths[i]`` bytes of
    ``data`` from ``starts[i]``) with the seed its four ``prefixes[i]`` fold in (``crc_parity``), or -1;
    ``width`` is the row width for the longest block (``crc_parity.row_width``)."""

    method: str

    def checksums(self, data: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, prefixes: torch.Tensor,
                  width: int) -> torch.Tensor: ...


class Decompressor(Protocol):
    """Decodes ``count`` lz4 blocks (``lengths[i]`` bytes of ``data`` from ``starts[i]``) into rows
    ``out[:count, :frame_nbytes]`` and returns a (count,) bool tensor: True where block i decoded to
    exactly ``frame_nbytes`` bytes."""

    frame_nbytes: int
    row_bytes: int  # the stride of ``out``'s rows (frame_nbytes rounded up to the output alignment)

    def __call__(
        self, data: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, count: int, out: torch.Tensor
    ) -> torch.Tensor: ...


class NvcompDecompressor:
    """``Decompressor`` by nvCOMP's batched LZ4 on a CUDA device, for up to ``max_frames`` blocks a call;
    its working arrays are allocated once."""

    def __init__(self, device: torch.device, *, frame_nbytes: int, max_frames: int, library: str | Path | None = None) -> None:
        import torch

        self.lz4 = BatchedLZ4(library)
        input_alignment, output_alignment, _ = self.lz4.alignment
        if input_alignment != 1:
            raise RuntimeError(
                f"nvCOMP {self.lz4.version_text} wants lz4 blocks aligned to {input_alignment} bytes; mmreplay "
                "sends them back to back as stored"
            )
        self.frame_nbytes = frame_nbytes
        self.row_bytes = -(-frame_nbytes // output_alignment) * output_alignment
        self.device = device
        self._capacity = torch.full((max_frames,), frame_nbytes, dtype=torch.int64, device=device)
        self._decoded = torch.zeros(max_frames, dtype=torch.int64, device=device)
        self._statuses = torch.zeros(max_frames, dtype=torch.int32, device=device)
        self._row_offsets = torch.arange(max_frames, dtype=torch.int64, device=device) * self.row_bytes
        self._temp_bytes = self.lz4.temp_bytes(max_frames, frame_nbytes)
        self._temp = torch.empty(max(self._temp_bytes, 1), dtype=torch.uint8, device=device)

    def __call__(
        self, data: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, count: int, out: torch.Tensor
    ) -> torch.Tensor:
        import torch

        # Addresses computed on the device, so nothing but the blocks and their places crosses the bus.
        # They are freed when this returns, after the launch: the allocator reuses them in stream order.
        block_addresses = starts[:count] + data.data_ptr()
        row_addresses = self._row_offsets[:count] + out.data_ptr()
        self.lz4.decompress_async(
            compressed_ptrs=block_addresses.data_ptr(),
            compressed_bytes=lengths.data_ptr(),
            buffer_bytes=self._capacity.data_ptr(),
            actual_bytes=self._decoded.data_ptr(),
            count=count,
            temp=self._temp.data_ptr(),
            temp_bytes=self._temp_bytes,
            out_ptrs=row_addresses.data_ptr(),
            statuses=self._statuses.data_ptr(),
            stream=torch.cuda.current_stream(self.device).cuda_stream,
        )
        return (self._statuses[:count] == 0) & (self._decoded[:count] == self.frame_nbytes)


class DeviceDecoder:
    """Decodes, checks and gathers batches of up to ``max_frames`` distinct frames of ``frame_nbytes``
    bytes whose blocks are at most ``max_block_bytes`` long, on ``device`` (see the module docstring);
    ``crc`` checks the blocks (by default ``crc_parity.ParityCrc``)."""

    def __init__(self, device: torch.device, decompressor: Decompressor, *, max_frames: int, max_block_bytes: int,
                 crc: BlockCrc | None = None) -> None:
        import torch

        self.device = device
        self.decompressor = decompressor
        self.frame_nbytes = decompressor.frame_nbytes
        self.max_frames = max_frames
        self.crc: BlockCrc = ParityCrc(device, max_width=row_width(max_block_bytes)) if crc is None else crc
        self._rows = torch.empty((max_frames, decompressor.row_bytes), dtype=torch.uint8, device=device)
        self._positions = torch.arange(max_frames, dtype=torch.int64, device=device)

    def decode(
        self,
        *,
        data: torch.Tensor,
        starts: torch.Tensor,
        lengths: torch.Tensor,
        prefixes: torch.Tensor,
        checksums: torch.Tensor,
        count: int,
        width: int,
        gather: torch.Tensor,
        pixels: torch.Tensor,
        first_bad: torch.Tensor,
    ) -> None:
        """Decode ``count`` blocks (``data`` holds them all, and nothing past the last is read) and fill
        ``pixels`` (``len(gather)`` frames, C-contiguous, any shape) with row ``gather[k]`` at position k;
        ``checksums`` are int64 (the stored CRC-32s); ``first_bad`` (a one-element int64 host tensor, pinned for
        a GPU) receives the index of the first block that failed, or -1, when the stream gets there."""
        import torch

        if count > self.max_frames:
            raise ValueError(f"a batch of {count} frames; this decoder holds at most {self.max_frames}")
        starts, lengths = starts[:count], lengths[:count]
        good = self.decompressor(data, starts, lengths, count, self._rows)
        if count:
            good = good & (self.crc.checksums(data, starts, lengths, prefixes[:count], width) == checksums[:count])
        bad = torch.where(good, count, self._positions[:count]).amin() if count else self._positions.new_tensor(count)
        first_bad.copy_(torch.where(bad == count, -1, bad).reshape(1), non_blocking=True)
        torch.index_select(self._rows[:count, : self.frame_nbytes], 0, gather, out=pixels.view(-1, self.frame_nbytes))


def check_decoder(decoder: DeviceDecoder, frame_shape: tuple[int, ...]) -> None:
    """Decode frames the host encoded, through ``decoder`` on its device, and one of them damaged:
    ``RuntimeError`` unless the pixels are the host's and the damaged block is the one refused. Run once
    before a decoder serves batches, so that a library that decodes otherwise than liblz4 encodes (or a
    check that would let a bad block through) fails at ``batches()`` rather than as corrupt batches."""
    import numpy as np
    import torch

    from mmreplay.frames import lz4_codec
    from mmreplay.frames.wire import encode_frames
    from mmreplay.gpu.block_plan import plan_blocks

    count = min(8, decoder.max_frames)
    shape = (count, *frame_shape)
    ramp = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    frames = ((ramp // 7 + ramp % 251 * (ramp % 3 == 0)) % 256).astype(np.uint8)  # runs and noise: real matches
    encoded = encode_frames(frames)
    seeds = np.array([0, 1, 2**31 + 7, 2**32 - 1, 5, 6, 7, 8][:count], np.uint32)
    starts = np.concatenate([[0], np.cumsum(encoded.lengths)[:-1]]).astype(np.int64)
    blocks = [bytes(encoded.data[s : s + n]) for s, n in zip(starts, encoded.lengths)]
    checksums = np.array([lz4_codec.checksum(block, int(seed)) for block, seed in zip(blocks, seeds)], np.uint32)
    order = np.arange(count, dtype=np.int64)[::-1].copy()
    plan = plan_blocks(type(encoded)(encoded.data, encoded.lengths, checksums, seeds, encoded.frame_shape), order)
    device = decoder.device
    pinned = device.type == "cuda"
    for damaged in (None, count // 2):
        data = np.frombuffer(plan.data, np.uint8).copy()
        if damaged is not None:
            data[int(plan.starts[damaged]) + int(plan.lengths[damaged]) // 2] ^= 0x10
        pixels = torch.empty(shape, dtype=torch.uint8, device=device)
        first_bad = torch.empty(1, dtype=torch.int64, pin_memory=pinned)
        decoder.decode(
            data=torch.from_numpy(data).to(device), starts=torch.from_numpy(plan.starts).to(device),
            lengths=torch.from_numpy(plan.lengths).to(device), prefixes=torch.from_numpy(plan.prefixes).to(device),
            checksums=torch.from_numpy(plan.checksums.astype(np.int64)).to(device), count=count, width=plan.width,
            gather=torch.from_numpy(plan.gather).to(device), pixels=pixels, first_bad=first_bad,
        )
        if pinned:
            torch.cuda.current_stream(device).synchronize()
        bad = int(first_bad[0])
        if damaged is None and (bad != -1 or not np.array_equal(pixels.cpu().numpy(), frames[order])):
            raise RuntimeError(f"decoding on {device} did not give the host's frames (first refused: {bad}): use decode='host'")
        if damaged is not None and bad != damaged:
            raise RuntimeError(f"decoding on {device} did not refuse a damaged block (first refused: {bad}): use decode='host'")
