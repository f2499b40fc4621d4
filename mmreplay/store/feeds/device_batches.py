"""Batches handed to a learner as torch tensors on its device, prepared in a background thread.

The pipeline behind ``ReplayStore.batches(..., device=...)``. One thread draws each batch exactly as
``sample`` (``sample_sequences`` with ``length``) would with the same generator, in order, in *groups*
of ``group`` batches read as one (``parse_group``), and either

- decodes it on the host (``decode="host"``, the default): the compiled decoder, with the GIL released,
  fills the arrays of a *staging block* (``gpu.staging``), page-locked, whose pixels hold
  ``stack_size + 1`` frames a row where the batch allows; the block is copied to the device on a side
  CUDA stream, in one copy; or
- keeps its frames compressed (``decode="device"``, ``sample_encoded``), copies the stored lz4 blocks
  instead of the pixels, and decodes them on the device with nvCOMP (``feeds.device_decoded_feed``).

The stream that is current in the consumer's ``next()`` waits on an event recorded after the copy (and
the decode), so a batch is ready when it is handed over; the thread has already checked the batch
(checksums included), so an error is raised by the ``next()`` that would have returned the first batch of
its read.

Memory: ``ceil(prefetch / group) + 2`` *slots*, each a read's staging block on the host and its
mirror on the device, used in turn. The thread refills a slot only once the consumer has moved past the
read's batches in it (the counting of ``prefetch.recycling``: the consumer holds one read, the others
wait in the queue, the thread fills one), and the copy into the slot's device memory waits on an event
that the consumer's stream recorded at that ``next()``, after the learner's kernels that read the batches.
A batch is thus valid until the next ``next()`` at least. On the CPU (pinning off) there is no copy: the
tensors view the staging block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from mmreplay.batch import Batch, SequenceBatch
from mmreplay.gpu.devices import parse_device
from mmreplay.gpu.staging import Slab, Staging, plan_slabs
from mmreplay.gpu.tensor_batches import TensorBatch, TensorSequenceBatch
from mmreplay.sampling.samplers import UniformSampler
from mmreplay.store.batch_source import BatchSource
from mmreplay.store.feeds.prefetch import Prefetcher
from mmreplay.store.feeds.slots import Slot, SlotRing
from mmreplay.store.reading.transition_reader import SharedOutError

if TYPE_CHECKING:
    from mmreplay.store.store_layout import StoreLayout

R = TypeVar("R")
D = TypeVar("D", TensorBatch, TensorSequenceBatch)
NumpyRecord = Batch | SequenceBatch
DeviceRecord = TensorBatch | TensorSequenceBatch

DECODE_CHOICES = ("host", "device")

# A uniform sampler's batches are read up to this many at a time by default (``group``), at most
# GROUP_ROWS rows a read (a slot's memory): the thread's Python (draws, the read's setup, the handoff) then
# runs once per several batches, and an eager learner, which waits each time the thread takes the GIL,
# keeps more of its rate. On 2 cores (benchmarks/bench_feed_gil.py, Pong and MsPacman, batch 32, medians of
# 5 rounds; benchmarks/results/feed-gil-2core-reads.jsonl) groups of 1, 4 and 8 kept 0.76-0.81, 0.86-0.88
# and 0.91-0.92 of a Python-bound learner's rate (16, in one earlier run on Pong: 0.93, at twice the memory).
MAX_GROUP = 8
GROUP_ROWS = 1024


def parse_group(value: object, *, batch_size: int, sampler: object, decode: str) -> int:
    """``batches(device=..., group=...)``: a positive int, or None for the default: for a
    ``UniformSampler`` (its draws never depend on what the learner does) as many batches as fit
    ``GROUP_ROWS`` rows, 1 to ``MAX_GROUP``; 1 for any other sampler (a prioritized batch drawn
    ahead misses the priorities updated since, so the default draws no further ahead than ``prefetch``)
    and for ``decode="device"`` (which reads one batch at a time)."""
    if value is None:
        if decode != "host" or not isinstance(sampler, UniformSampler):
            return 1
        return min(MAX_GROUP, max(1, GROUP_ROWS // batch_size))
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"group must be a positive int or None; got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"group must be a positive int or None; got {value}")
    if decode == "device" and value != 1:
        raise ValueError(f"group={value} needs decode='host': decode='device' reads one batch at a time")
    return int(value)


def parse_decode(decode: object) -> str:
    if not isinstance(decode, str):
        raise TypeError(f"decode must be a str, 'host' or 'device'; got {type(decode).__name__}")
    if decode not in DECODE_CHOICES:
        raise ValueError(f"decode is {decode!r}; expected 'host' (the compiled decoder on the CPU) or 'device' "
                         "(nvCOMP on the CUDA device)")
    return decode


def sample_into(read: Callable[[R | None], R], out: R | None, generator: np.random.Generator,
                fallback: Callable[[], R | None] = lambda: None) -> R:
    """``read(out)``, where ``read`` draws from ``generator``; when ``out`` cannot hold the batch drawn
    (obs and next_obs share frames in ``out`` and not in the batch: ``SharedOutError``, raised before
    anything is decoded), the generator is put back and the same batch drawn again into ``fallback()``
    (None: new arrays). The batch is then exactly the one ``read`` would have returned without ``out``."""
    if out is None:
        return read(None)
    state = generator.bit_generator.state
    try:
        return read(out)
    except SharedOutError:
        generator.bit_generator.state = state
        return read(fallback())


class DeviceBatches(Generic[D]):
    """An endless iterator of device batches prepared by a background thread, as ``batches(device=...)`` returns.

    Each ``next()`` gives a ``TensorBatch`` (a ``TensorSequenceBatch`` for windows). ``close()``,
    ``with``, closing the store or garbage collection stop the thread; errors of the thread are raised by
    ``next()``. The thread hands over a slot's *group*: the batches it drew and read at once, in order,
    views of the slot's memory; ``next()`` takes the next group only once it has handed out the held
    one's batches. Made by ``ReplayStore.batches``, not by users.

    Args:
        produce: the thread's work: each call gives the next slot and its group's batches.
        ring: the slots the thread fills in turn.
        depth: how many slots may be filled ahead of ``next()``.
        description: what the ``repr`` says the iterator draws.
    """

    def __init__(
        self, produce: Callable[[], tuple[Slot, list[D]]], ring: SlotRing, *, depth: int, description: str
    ) -> None:
        self._ring = ring
        self._held: Slot | None = None
        self._pending: list[D] = []  # the held group's batches not handed out yet, the next one last
        self._description = description
        self.prefetcher: Prefetcher[tuple[Slot, list[D]]] = Prefetcher(produce, depth=depth)

    def __iter__(self) -> DeviceBatches[D]:
        return self

    def __next__(self) -> D:
        import torch

        stream = torch.cuda.current_stream(self._ring.device) if self._ring.cuda else None
        if self._pending and (self.closed or self._held is None):
            # Stopped (the store closed it: the held read's memory is gone too), or the last next() failed
            # before it held the read's slot: its other batches are not handed out.
            self._pending = []
        if not self._pending:
            if self._held is not None and self._held.released is not None:
                # Recorded before the queue is read: the thread cannot reach this slot again before that read.
                self._held.released.record(stream)
            self._held = None
            slot, group = next(self.prefetcher)
            self._pending = group[::-1]
        else:  # the held read's next batch
            assert self._held is not None
            slot = self._held
        self._held = None
        batch = self._pending.pop()
        if stream is not None:
            assert slot.ready is not None
            if not slot.ready.query():  # type: ignore[no-untyped-call]  # (query keeps the GIL; a wait gives it up)
                stream.wait_event(slot.ready)
            if stream.cuda_stream not in slot.recorded_on:
                # The caching allocator waits for this stream before reusing the blocks: once per block and stream.
                for block in slot.device_blocks:
                    block.record_stream(stream)
                slot.recorded_on.add(stream.cuda_stream)
        self._held = slot
        return batch

    def close(self) -> None:
        """Stop the thread and wait for the copies it started; the batches handed out are then invalid."""
        self.prefetcher.close()
        self._ring.close()
        self._held = None
        self._pending = []

    @property
    def closed(self) -> bool:
        """Whether the thread has stopped (``close()``, the store closed, or an error).

        Returns:
            True once stopped.
        """
        return self.prefetcher._finished

    def __enter__(self) -> DeviceBatches[D]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<DeviceBatches {self._description} {'closed' if self.closed else 'open'}>"


class HostDecodedFeed:
    """The thread's work for ``decode="host"``: draw ``group`` batches in order and decode them into a slot's
    staging block in one read, copy the block to the device on the side stream. Calling it produces the
    next (slot, the group's device batches)."""

    def __init__(self, store: StoreLayout, ring: SlotRing, read: Callable[[Any], NumpyRecord],
                 generator: np.random.Generator, template: NumpyRecord, *, batch_size: int, n_step: int,
                 group: int = 1) -> None:
        self._ring = ring
        self._read = read
        self._generator = generator
        self._stack = store.stack_size
        self._layout = BatchLayout(template, batch_size=batch_size, stack_size=store.stack_size,
                                   frame_shape=store.frame_shape, frame_dtype=store.frame_dtype, group=group)
        # n-step batches always hold obs and next_obs apart; others share frames unless a transition's
        # next_obs was stored as given (then the batch is drawn again into a slot's separate staging).
        self._shared = 2 * self._stack if n_step > 1 else self._stack + 1

    def __call__(self) -> tuple[Slot, list[DeviceRecord]]:
        # The fewer calls that give up the GIL here, the less an eager learner waits for it (each one it gets
        # back costs the learner a hand-over): the side stream is set once, an event already passed is not
        # waited on (Event.query keeps the GIL, a wait gives it up), the upload is one copy.
        ring, slot = self._ring, self._ring.take()
        ring.use_side()
        columns = self._shared
        out, _ = self._records(slot, columns)

        def separate() -> NumpyRecord:
            nonlocal columns
            columns = 2 * self._stack
            return self._records(slot, columns)[0]

        batch = sample_into(self._read, out, self._generator, separate)
        assert batch is self._records(slot, columns)[0], "sample(out=...) fills out in place"
        staging = slot.stagings[columns]
        if ring.side is not None:
            assert slot.ready is not None and slot.released is not None and staging.device_block is not None
            if not slot.released.query():  # type: ignore[no-untyped-call]  # the consumer's reads may still be queued
                ring.side.wait_event(slot.released)
            staging.upload()
            slot.ready.record(ring.side)
            slot.hold((staging.device_block,))
        return slot, slot.records[columns][1]

    def _records(self, slot: Slot, columns: int) -> tuple[NumpyRecord, list[DeviceRecord]]:
        """The slot's numpy record (what ``sample`` fills: the whole group) and the group's device records
        over one staging block, made once per slot and kept."""
        if columns not in slot.records:
            slabs, nbytes = self._layout.slabs(columns)
            staging = Staging(slabs, nbytes, self._ring.device)  # on the side stream (see SlotRing.use_side)
            slot.stagings[columns] = staging
            slot.records[columns] = (self._layout.numpy_record(staging), self._layout.device_records(staging))
        return slot.records[columns]


class BatchLayout:
    """The arrays of a group of ``group`` batches of ``batch_size`` read as one (slabs named as the record's
    fields, ``"pixels"`` for the one array obs and next_obs view, ``"fields.<name>"`` for user fields),
    taken from a one-transition ``template`` that the store returned for the same call, and the records
    over a staging block: the whole group's for the read, each batch's for the consumer."""

    def __init__(self, template: NumpyRecord, *, batch_size: int, stack_size: int, frame_shape: tuple[int, ...],
                 frame_dtype: np.dtype, group: int = 1) -> None:
        self.kind = type(template)
        self.stack_size = stack_size
        self.frame_shape = frame_shape
        self.frame_dtype = frame_dtype
        self.window = tuple(template.index.shape[1:])  # (length,) for sequences, () for transitions
        self.batch_size = batch_size
        self.group = group
        rows = group * batch_size
        arrays = [(name, array) for name, array in template._arrays() if name not in ("obs", "next_obs")]
        self.arrays = [(name, array.dtype, (rows, *array.shape[1:])) for name, array in arrays]

    def slabs(self, columns: int) -> tuple[dict[str, Slab], int]:
        rows = self.group * self.batch_size
        pixels = ("pixels", self.frame_dtype, (rows, *self.window, columns, *self.frame_shape))
        return plan_slabs([pixels, *self.arrays])

    def numpy_record(self, staging: Staging) -> NumpyRecord:
        host = staging.host
        pixels = host["pixels"]
        size = self.stack_size
        axis = len(self.window)  # the columns axis after the batch (and window) axes
        obs = pixels[(slice(None),) * (axis + 1) + (slice(None, size),)]
        next_obs = pixels[(slice(None),) * (axis + 1) + (slice(pixels.shape[axis + 1] - size, None),)]
        named = {item.name: host[item.name] for item in fields(self.kind) if item.name not in ("obs", "next_obs")}
        user = {name.removeprefix("fields."): array for name, array in host.items() if name.startswith("fields.")}
        return self.kind(obs=obs, next_obs=next_obs, user_fields=user, **named)  # type: ignore[arg-type]

    def device_records(self, staging: Staging) -> list[DeviceRecord]:
        """Each batch of the group, in draw order: views of the staging block's device tensors (rows
        ``i * batch_size`` on), ``index`` on the host."""
        return [self._device_record(staging, i * self.batch_size) for i in range(self.group)]

    def _device_record(self, staging: Staging, first: int) -> DeviceRecord:
        import torch

        size = self.batch_size
        tensors = {name: tensor.narrow(0, first, size) for name, tensor in staging.device.items()}
        pixels = tensors["pixels"]
        axis = len(self.window) + 1
        obs = pixels.narrow(axis, 0, self.stack_size)
        next_obs = pixels.narrow(axis, pixels.shape[axis] - self.stack_size, self.stack_size)
        named: dict[str, torch.Tensor] = {}
        for name, _, _ in self.arrays:
            if not name.startswith("fields."):
                named[name] = tensors[name]
        # index stays on the host: update_priorities' key
        named["index"] = torch.from_numpy(staging.host["index"][first : first + size])
        user = {name.removeprefix("fields."): tensors[name] for name, _, _ in self.arrays if name.startswith("fields.")}
        kind = TensorBatch if self.kind is Batch else TensorSequenceBatch
        return kind(obs=obs, next_obs=next_obs, fields=user, **named)


def open_device_batches(
    store: StoreLayout,
    source: BatchSource,
    batch_size: int,
    *,
    prefetch: int,
    generator: np.random.Generator,
    device: object,
    decode: object,
    length: int | None,
    sample_kwargs: dict[str, Any],
    group: object = None,
) -> DeviceBatches[Any]:
    """The iterator of ``store.batches(batch_size, device=device, ...)``; every argument is checked here,
    in the caller, before the thread starts (``batch_size``, ``prefetch`` and ``length`` already were).
    The thread reads ``group`` batches at a time (``parse_group``) into a slot; the
    queue holds ``prefetch`` batches' worth of such groups (at least one)."""
    torch_device = parse_device(device)
    decode = parse_decode(decode)
    group = parse_group(group, batch_size=batch_size, sampler=store.sampler, decode=decode)
    depth = -(-prefetch // group)
    ring = SlotRing(torch_device, depth + 2)
    description = f"batch_size={batch_size} device={torch_device} decode={decode!r} prefetch={prefetch}"
    if group > 1:
        description += f" group={group}"
    if length is not None:
        description += f" length={length}"
    feed: Callable[[], tuple[Slot, Any]]
    if decode == "device":
        from mmreplay.store.feeds import device_decoded_feed

        with ring.on_side():  # the decoder's memory belongs to the side stream, where it is used
            decoded = device_decoded_feed.open_feed(store, source, ring, generator, batch_size=batch_size, length=length,
                                                    sample_kwargs=sample_kwargs)
        return DeviceBatches(decoded, ring, depth=depth, description=f"{description} crc={decoded.crc_method}")
    template: NumpyRecord
    read: Callable[[Any], NumpyRecord]
    reader = source.background_reader()  # the thread's decode leaves the consumer's core alone
    if length is None:
        template = source.sample(1, np.random.default_rng(0), **sample_kwargs)  # bad arguments fail here
        read = lambda out: source.sample(batch_size, generator, out=out, replace_shared_out=False, reader=reader,
                                         count=group, **sample_kwargs)
    else:
        template = source.sample_sequences(1, length, np.random.default_rng(0), **sample_kwargs)
        read = lambda out: source.sample_sequences(batch_size, length, generator, out=out, reader=reader,
                                                   count=group, **sample_kwargs)
    n_step = int(sample_kwargs.get("n_step", 1))
    feed = HostDecodedFeed(store, ring, read, generator, template, batch_size=batch_size, n_step=n_step, group=group)
    return DeviceBatches(feed, ring, depth=depth, description=description)
