"""The thread's work for ``batches(..., device="cuda", decode="device")``: each batch drawn with its frames
still compressed (``sample_encoded``, ``sample_sequences_encoded``), its stored lz4 blocks copied to the
GPU instead of its pixels (1/24 of them on Pong, 1/4 on MsPacman), decoded and checked there
(``gpu.device_decode``), and the stacks gathered into the batch's pixels on the device.

A batch's small fields, the plan of its blocks (``gpu.block_plan``) and the blocks themselves share one
staging block per slot, blocks last, so one copy of the bytes in use moves them. The thread waits for
the device to finish each batch (an event on the side stream), reads the index of the first block that
failed, and raises ``CorruptStoreError`` naming a transition that needed it: as on the host path, a
batch with a damaged frame is never handed over.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import numpy as np

from mmreplay.errors import CorruptStoreError
from mmreplay.gpu.block_plan import lz4_bound, plan_blocks
from mmreplay.gpu.device_decode import BlockCrc, Decompressor, DeviceDecoder, NvcompDecompressor, check_decoder
from mmreplay.gpu.nvcomp_crc32 import NvcompCrc
from mmreplay.gpu.staging import Staging, plan_slabs
from mmreplay.gpu.tensor_batches import TensorBatch, TensorSequenceBatch
from mmreplay.store.batch_source import BatchSource
from mmreplay.store.feeds.slots import Slot, SlotRing
from mmreplay.store.reading.encoded_batches import EncodedBatch, EncodedSequenceBatch

if TYPE_CHECKING:
    import torch

    from mmreplay.store.store_layout import StoreLayout

Encoded = EncodedBatch | EncodedSequenceBatch
_NOT_ARRAYS = ("frames", "frame_index", "stack_size")


def check_store(store: StoreLayout) -> None:
    """``ValueError`` unless ``store``'s frames can be decoded on the device: plain lz4 blocks of uint8
    frames, stacks padded by repeating the first frame, no user fields (what an encoded batch carries). A
    reference store's dependent frames are compressed with their reference as lz4's dictionary, which
    nvCOMP's batched lz4 does not take: its batches decode on the host."""
    if store.frame_encoding == "lz4-reference":
        raise ValueError(
            "decode='device' decodes blocks that decode alone (nvCOMP's batched lz4 takes no dictionary); this "
            "store's frames are compressed against earlier frames (frame_encoding='lz4-reference', their reference "
            "as lz4's dictionary): use decode='host', or a store created with frame_encoding='lz4'"
        )
    if store.frame_encoding != "lz4" or store.stack_padding != "first" or store.fields or store.frame_dtype != np.uint8:
        raise ValueError(
            "decode='device' decodes the stored blocks of a store with frame_encoding='lz4', stack_padding='first', "
            f"uint8 frames and no user fields; this one has frame_encoding={store.frame_encoding!r}, "
            f"stack_padding={store.stack_padding!r}, frame_dtype={store.frame_dtype} and fields {list(store.fields)}: "
            "use decode='host'"
        )


class DeviceDecodedFeed:
    """Produces the next (slot, device batch) from ``read()``, an encoded batch of ``batch_size`` rows
    (windows of ``length`` with ``length``), decoded by ``decoder`` into each slot's pixels."""

    def __init__(self, ring: SlotRing, read: Callable[[], Encoded], template: Encoded, decoder: DeviceDecoder, *,
                 batch_size: int, length: int | None, stack_size: int, frame_shape: tuple[int, ...]) -> None:
        self._ring = ring
        self._read = read
        self._decoder = decoder
        self.crc_method = decoder.crc.method  # which checker passed the self-check: "nvcomp" or "parity"
        self._stack = stack_size
        self._frame_shape = frame_shape
        self._window = (batch_size,) if length is None else (batch_size, length)
        self._kind = TensorBatch if length is None else TensorSequenceBatch
        self._names = [item.name for item in fields(template) if item.name not in _NOT_ARRAYS]
        arrays = [(name, getattr(template, name)) for name in self._names]
        positions = int(np.prod(self._window)) * 2 * stack_size  # the most frames a batch can name
        self._max_frames = most_distinct_frames(batch_size, length, stack_size)
        frames = self._max_frames
        self._slabs, self._nbytes = plan_slabs([
            *[(name, array.dtype, (batch_size, *array.shape[1:])) for name, array in arrays],
            ("gather", np.dtype(np.int64), (positions,)),
            ("starts", np.dtype(np.int64), (frames,)),
            ("lengths", np.dtype(np.int64), (frames,)),
            ("prefixes", np.dtype(np.uint8), (frames, 4)),
            ("checksums", np.dtype(np.int64), (frames,)),  # int64 on the device: torch's uint32 does little
            ("blocks", np.dtype(np.uint8), (frames * lz4_bound(int(np.prod(frame_shape))),)),  # last: sent as used
        ])
        self._stagings: dict[int, Staging] = {}
        self._pixels: dict[tuple[int, int], tuple[torch.Tensor, TensorBatch | TensorSequenceBatch]] = {}
        self._first_bad: dict[int, torch.Tensor] = {}

    def __call__(self) -> tuple[Slot, list[TensorBatch | TensorSequenceBatch]]:
        ring = self._ring
        encoded = self._read()
        plan = plan_blocks(encoded.frames, encoded.frame_index)
        if len(plan) > self._max_frames:  # most_distinct_frames is wrong: refuse rather than overrun the staging
            raise RuntimeError(f"a batch of {len(plan)} distinct frames; its staging holds {self._max_frames}")
        slot = ring.take()
        with ring.on_side():
            staging, first_bad = self._staging(slot)
            host = staging.host
            for name in self._names:
                np.copyto(host[name], getattr(encoded, name))
            count, positions, nbytes = len(plan), plan.gather.size, len(plan.data)
            host["starts"][:count] = plan.starts
            host["lengths"][:count] = plan.lengths
            host["prefixes"][:count] = plan.prefixes
            host["checksums"][:count] = plan.checksums
            host["gather"][:positions] = plan.gather
            host["blocks"][:nbytes] = np.frombuffer(plan.data, np.uint8)
            pixels, record = self._batch(slot, encoded.frame_index.shape[-1])
            if ring.side is not None:
                assert slot.released is not None
                ring.side.wait_event(slot.released)
            self._decode(staging, plan.width, count, positions, nbytes, pixels, first_bad)
            if ring.side is not None:
                assert slot.ready is not None and staging.device_block is not None
                slot.ready.record(ring.side)
                slot.hold((staging.device_block, pixels))
        if slot.ready is not None:
            slot.ready.synchronize()  # the checks' verdict, before the batch is handed over
        bad = int(first_bad[0])
        if bad >= 0:
            raise CorruptStoreError(
                f"a frame read for transition {_needing(encoded, bad)} fails its checksum or does not decode to one "
                f"frame of shape {self._frame_shape} on the device: the store is damaged"
            )
        return slot, [record]  # a group of one batch (DeviceBatches)

    def _decode(self, staging: Staging, width: int, count: int, positions: int, nbytes: int, pixels: torch.Tensor,
                first_bad: torch.Tensor) -> None:
        staging.upload(self._slabs["blocks"].offset + nbytes)
        device = staging.device
        self._decoder.decode(
            data=device["blocks"][:nbytes], starts=device["starts"], lengths=device["lengths"], prefixes=device["prefixes"],
            checksums=device["checksums"], count=count, width=width, gather=device["gather"][:positions],
            pixels=pixels, first_bad=first_bad,
        )
        if "mask" in device:  # windows: zero past their end, as sample_sequences does
            pixels.view(*self._window, -1).masked_fill_(~device["mask"].unsqueeze(-1), 0)

    def _staging(self, slot: Slot) -> tuple[Staging, torch.Tensor]:
        key = id(slot)
        if key not in self._stagings:
            import torch

            staging = Staging(self._slabs, self._nbytes, self._ring.device)  # on the side stream
            self._stagings[key] = staging
            self._first_bad[key] = torch.empty(1, dtype=torch.int64, pin_memory=self._ring.cuda)
        return self._stagings[key], self._first_bad[key]

    def _batch(self, slot: Slot, columns: int) -> tuple[torch.Tensor, TensorBatch | TensorSequenceBatch]:
        """The slot's pixels for batches of ``columns`` frames a row, and the record over them."""
        key = (id(slot), columns)
        if key not in self._pixels:
            import torch

            pixels = torch.empty((*self._window, columns, *self._frame_shape), dtype=torch.uint8, device=self._ring.device)
            tensors: dict[str, Any] = dict(self._stagings[id(slot)].device)
            tensors["index"] = torch.from_numpy(self._stagings[id(slot)].host["index"])
            axis = len(self._window)
            named = {name: tensors[name] for name in self._names}
            record = self._kind(obs=pixels.narrow(axis, 0, self._stack),
                                next_obs=pixels.narrow(axis, columns - self._stack, self._stack), **named)
            self._pixels[key] = (pixels, record)
        return self._pixels[key]


def most_distinct_frames(batch_size: int, length: int | None, stack_size: int) -> int:
    """The most distinct frames an encoded batch can hold: a window of ``length`` transitions of one episode
    (one, for transitions) names at most ``length + stack_size`` frames of its stacks, and ``stack_size``
    more for a next_obs stored as given at its episode's end (n-step rows: ``2 * stack_size``)."""
    return batch_size * ((length or 1) + 2 * stack_size)


def _needing(encoded: Encoded, frame: int) -> int:
    """A transition of ``encoded`` (a valid position, for windows) one of whose frames is ``frame``."""
    columns = encoded.frame_index.shape[-1]
    steps = encoded.index.reshape(-1)[(encoded.frame_index.reshape(-1, columns) == frame).any(axis=1)]
    return int(steps[steps >= 0][0])


def open_feed(store: StoreLayout, source: BatchSource, ring: SlotRing, generator: np.random.Generator, *, batch_size: int,
              length: int | None, sample_kwargs: dict[str, Any], decompressor: Decompressor | None = None) -> DeviceDecodedFeed:
    """The feed of ``store.batches(batch_size, device=..., decode="device", ...)``; ``decompressor``
    defaults to nvCOMP's on the ring's CUDA device (a CPU ring needs one: the tests pass a host lz4)."""
    check_store(store)
    if decompressor is None and not ring.cuda:
        raise ValueError(f"decode='device' decodes on a CUDA device; device is {ring.device}: use decode='host'")
    read: Callable[[], Encoded]
    template: Encoded
    if length is None:
        template = source.sample_encoded(1, np.random.default_rng(0), **sample_kwargs)  # bad arguments fail here
        read = lambda: source.sample_encoded(batch_size, generator, **sample_kwargs)
    else:
        template = source.sample_sequences_encoded(1, length, np.random.default_rng(0), **sample_kwargs)
        read = lambda: source.sample_sequences_encoded(batch_size, length, generator, **sample_kwargs)
    frame_nbytes = int(np.prod(store.frame_shape))
    max_frames = most_distinct_frames(batch_size, length, store.stack_size)
    if decompressor is None:
        decompressor = NvcompDecompressor(ring.device, frame_nbytes=frame_nbytes, max_frames=max_frames)
    decoder = checked_decoder(ring.device, decompressor, max_frames=max_frames, frame_shape=store.frame_shape)
    return DeviceDecodedFeed(ring, read, template, decoder, batch_size=batch_size, length=length,
                             stack_size=store.stack_size, frame_shape=store.frame_shape)


def checked_decoder(device: torch.device, decompressor: Decompressor, *, max_frames: int,
                    frame_shape: tuple[int, ...]) -> DeviceDecoder:
    """A decoder that passed its self-check (``check_decoder``), its CRCs checked by nvCOMP's kernel on a
    GPU where that passes, else by the parity product (``crc_parity``); the last failure is raised when
    neither does."""
    max_block_bytes = lz4_bound(int(np.prod(frame_shape)))
    checkers: list[Callable[[], BlockCrc | None]] = [lambda: None]  # None: the decoder's default, the parity product
    if device.type == "cuda":
        checkers.insert(0, lambda: NvcompCrc(device, max_blocks=max_frames, max_block_bytes=max_block_bytes))
    failure: Exception | None = None
    for make in checkers:
        try:
            decoder = DeviceDecoder(device, decompressor, max_frames=max_frames, max_block_bytes=max_block_bytes,
                                    crc=make())
            check_decoder(decoder, frame_shape)
            return decoder
        except (RuntimeError, ModuleNotFoundError, OSError) as error:
            failure = error
    assert failure is not None
    raise failure
