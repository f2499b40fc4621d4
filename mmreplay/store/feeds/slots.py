"""The slots a device feed fills in turn: one read's staging blocks on the host and its mirror on the
device, with the events that order the copy into a slot after the consumer's use of it, and the side
stream the copies run on (``feeds.device_batches``, ``feeds.device_decoded_feed``)."""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

from mmreplay.batch import Batch, SequenceBatch
from mmreplay.gpu.staging import Staging
from mmreplay.gpu.tensor_batches import TensorBatch, TensorSequenceBatch

if TYPE_CHECKING:
    import torch

NumpyRecord = Batch | SequenceBatch
DeviceRecord = TensorBatch | TensorSequenceBatch


class Slot:
    """One batch's memory in the ring: staging blocks by pixel columns (made when first needed) and the
    events that order the copy into it after the consumer's use of it."""

    def __init__(self, device: torch.device) -> None:
        import torch

        self.stagings: dict[int, Staging] = {}
        self.records: dict[int, tuple[NumpyRecord, list[DeviceRecord]]] = {}
        cuda = device.type == "cuda"
        self.ready: torch.cuda.Event | None = torch.cuda.Event() if cuda else None  # type: ignore[no-untyped-call]
        self.released: torch.cuda.Event | None = torch.cuda.Event() if cuda else None  # type: ignore[no-untyped-call]
        self.device_blocks: tuple[torch.Tensor, ...] = ()  # what the batch now in the slot lives in
        self.recorded_on: set[int] = set()  # the consumer streams (handles) device_blocks were recorded on

    def hold(self, blocks: tuple[torch.Tensor, ...]) -> None:
        """Say that the batch now in the slot lives in ``blocks`` (the producer, before handing it over)."""
        if len(blocks) != len(self.device_blocks) or any(a is not b for a, b in zip(blocks, self.device_blocks)):
            self.device_blocks = blocks
            self.recorded_on = set()


class SlotRing:
    """``count`` slots used in turn by the producing thread, and the side stream its copies run on."""

    def __init__(self, device: torch.device, count: int) -> None:
        import torch

        self.device = device
        self.cuda = device.type == "cuda"
        self.side: torch.cuda.Stream | None = torch.cuda.Stream(device) if self.cuda else None  # type: ignore[no-untyped-call]
        self.slots = [Slot(device) for _ in range(count)]
        self._turn = 0
        self._side_thread: int | None = None  # the thread whose current stream is ``side`` (use_side)

    def on_side(self) -> contextlib.AbstractContextManager[object]:
        """The side stream made current (nothing on the CPU): the thread's copies run there, and memory it
        allocates belongs to it (the consumer's stream is recorded on what it is handed)."""
        import torch

        return torch.cuda.stream(self.side) if self.side is not None else contextlib.nullcontext()

    def use_side(self) -> None:
        """Make the side stream current in the calling thread for good (nothing on the CPU): the producing
        thread's own, so it is set once rather than entered and left around every batch (a CUDA stream is
        current per thread). The context's Python holds the GIL, which an eager learner, launching kernels
        from Python on the main thread, waits for."""
        if self.side is None or self._side_thread == threading.get_ident():
            return
        import torch

        torch.cuda.set_stream(self.side)
        self._side_thread = threading.get_ident()

    def take(self) -> Slot:
        """The next slot, once the copy out of its host memory (``count`` batches ago) has finished."""
        slot = self.slots[self._turn % len(self.slots)]
        self._turn += 1
        # query() keeps the GIL; synchronize() gives it up, and is needed only while the copy still runs.
        if slot.ready is not None and not slot.ready.query():  # type: ignore[no-untyped-call]
            slot.ready.synchronize()
        return slot

    def close(self) -> None:
        if self.side is not None:
            self.side.synchronize()
