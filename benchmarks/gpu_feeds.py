"""The feeds ``bench_gpu_feed.py`` measures: each hands the learner (obs, action, reward, next_obs, discount)
as tensors on the device, one batch per ``next()``.

- ``Resident``: one batch, already on the device, every time: the learner's own limit.
- ``RingInline``: the numpy ring (Dopamine's layout: frames once in RAM, a batch is ``frames[idx5]``, one
  fancy-index gather of 5 frames a row), sampled, pinned (``pin_memory()``) and copied
  (``.to(device, non_blocking=True)``) on the learner's thread.
- ``RingThreads``: the same in a Python-thread pipeline, the usual way to hide it: ``threads`` workers
  sample into reused page-locked buffers, copy on their own side stream and record an event; the
  learner's stream waits on it (``record_stream`` for the caching allocator); a queue of 3.
- ``MmreplayInline``: ``store.sample(B, out=...)`` (obs and next_obs one array of 5 frames a row), pinned
  and copied on the learner's thread.
- ``MmreplayDevice``: ``store.batches(B, device=..., decode="host" | "device")``, at its default depth or
  ``prefetch=``, from the store or from a reader of it opened with its own ``decode_threads``; with
  ``idle=True`` its thread and the decode pool's helpers run at ``SCHED_IDLE`` while it is open
  (``IdleThreads``): they then never take a core from the learner's thread, only cores left idle.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator

import numpy as np
import torch

from peers import NumpyFrameRing

GAMMA = 0.99
Tensors = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def ring_batch(ring: NumpyFrameRing, batch_size: int, rng: np.random.Generator, out: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A uniform batch of the ring as Dopamine gathers it: frames (B, stack + 1, 84, 84) in one
    ``take`` (into ``out`` when given), action, reward, discount (gamma, 0 where terminated)."""
    oldest = max(0, ring.frames_written - ring.capacity)
    chosen = np.empty(0, np.int64)
    while len(chosen) < batch_size:
        steps = rng.integers(oldest, ring.frames_written - 1, size=batch_size + batch_size // 4 + 4)
        slots = steps % ring.capacity
        first = ring.episode_first[slots]
        ok = ring.has_action[slots] & (np.maximum(steps - ring.stack_size + 1, first) >= oldest)
        chosen = np.concatenate([chosen, steps[ok]])
    steps = chosen[:batch_size]
    slots = steps % ring.capacity
    window = np.maximum(steps[:, None] + ring._offsets, ring.episode_first[slots][:, None]) % ring.capacity
    frames = np.take(ring.frames, window, axis=0, out=out)
    discount = np.where(ring.terminated[slots], 0.0, GAMMA).astype(np.float32)
    return frames, ring.action[slots], ring.reward[slots], discount


def _split(frames: torch.Tensor, action: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor,
           stack_size: int) -> Tensors:
    return frames[:, :stack_size], action, reward, frames[:, -stack_size:], discount


class Resident:
    """The same device batch every time."""

    def __init__(self, batch: Tensors) -> None:
        self.batch = batch

    def __next__(self) -> Tensors:
        return self.batch

    def close(self) -> None:
        pass


class RingInline:
    def __init__(self, ring: NumpyFrameRing, batch_size: int, device: torch.device, seed: int) -> None:
        self.ring, self.batch_size, self.device = ring, batch_size, device
        self.rng = np.random.default_rng(seed)
        self.pin = device.type == "cuda"

    def __next__(self) -> Tensors:
        arrays = ring_batch(self.ring, self.batch_size, self.rng)
        tensors = [torch.from_numpy(a) for a in arrays]
        if self.pin:
            tensors = [t.pin_memory() for t in tensors]
        moved = [t.to(self.device, non_blocking=self.pin) for t in tensors]
        return _split(*moved, self.ring.stack_size)

    def close(self) -> None:
        pass


class RingThreads:
    """``threads`` workers: sample into a page-locked buffer of their own (one of 4, reused once its copy
    is done), copy it on their side stream, hand over (tensors, event); ``next()`` makes the current
    stream wait on the event."""

    def __init__(self, ring: NumpyFrameRing, batch_size: int, device: torch.device, seed: int, *,
                 threads: int = 2, depth: int = 3) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.queue: queue.Queue[tuple[Tensors, torch.cuda.Event | None] | BaseException] = queue.Queue(depth)
        self.stop = threading.Event()
        self.workers = [
            threading.Thread(target=self._work, args=(ring, batch_size, seed + i), daemon=True, name=f"ring-feed-{i}")
            for i in range(threads)
        ]
        for worker in self.workers:
            worker.start()

    def _work(self, ring: NumpyFrameRing, batch_size: int, seed: int) -> None:
        try:
            rng = np.random.default_rng(seed)
            stream = torch.cuda.Stream(self.device) if self.cuda else None
            shape = (batch_size, ring.stack_size + 1, *ring.frames.shape[1:])
            buffers = [torch.empty(shape, dtype=torch.uint8, pin_memory=self.cuda) for _ in range(4)]
            copied: list[torch.cuda.Event | None] = [None] * 4
            turn = 0
            while not self.stop.is_set():
                k = turn % 4
                turn += 1
                if copied[k] is not None:
                    copied[k].synchronize()
                frames, action, reward, discount = ring_batch(ring, batch_size, rng, out=buffers[k].numpy())
                small = [torch.from_numpy(a) for a in (action, reward, discount)]
                if stream is None:
                    item: tuple[Tensors, torch.cuda.Event | None] = (_split(buffers[k].clone(), *small, ring.stack_size), None)
                else:
                    with torch.cuda.stream(stream):
                        moved = [buffers[k].to(self.device, non_blocking=True)]
                        moved += [t.pin_memory().to(self.device, non_blocking=True) for t in small]
                        event = torch.cuda.Event()
                        event.record(stream)
                    copied[k] = event
                    item = (_split(*moved, ring.stack_size), event)
                while not self.stop.is_set():
                    try:
                        self.queue.put(item, timeout=0.05)
                        break
                    except queue.Full:
                        continue
        except BaseException as error:  # handed to the consumer
            self.queue.put(error)

    def __next__(self) -> Tensors:
        item = self.queue.get()
        if isinstance(item, BaseException):
            raise item
        tensors, event = item
        if event is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(event)
            for tensor in tensors:
                tensor.record_stream(current)
        return tensors

    def close(self) -> None:
        self.stop.set()
        for worker in self.workers:
            while worker.is_alive():
                try:
                    self.queue.get_nowait()
                except queue.Empty:
                    pass
                worker.join(0.05)


class MmreplayInline:
    def __init__(self, store, batch_size: int, device: torch.device, seed: int) -> None:  # noqa: ANN001
        self.store, self.batch_size, self.device = store, batch_size, device
        self.rng = np.random.default_rng(seed)
        self.pin = device.type == "cuda"
        self.last = None

    def __next__(self) -> Tensors:
        batch = self.store.sample(self.batch_size, self.rng, out=self.last)
        self.last = batch
        pixels = batch.obs.base if np.shares_memory(batch.obs, batch.next_obs) else None
        arrays = [pixels if pixels is not None else np.concatenate([batch.obs, batch.next_obs[:, -1:]], axis=1),
                  batch.action, batch.reward, batch.discount]
        tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
        if self.pin:
            tensors = [t.pin_memory() for t in tensors]
        moved = [t.to(self.device, non_blocking=self.pin) for t in tensors]
        return _split(*moved, self.store.stack_size)

    def close(self) -> None:
        pass


class IdleThreads:
    """Threads of this process at ``SCHED_IDLE`` until ``restore()``: the Linux scheduler runs them only on
    cores nothing else wants, and never lets one preempt a normal thread (the learner's), which a decode
    helper woken on the learner's core otherwise may. ``threads``: native thread ids; the decode pool's
    helpers are the threads named ``mmreplay-pool``. A benchmark's experiment, not the library's policy."""

    def __init__(self, threads: list[int]) -> None:
        self.changed: list[int] = []
        for tid in threads:
            try:
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
                self.changed.append(tid)
            except OSError:  # a thread that ended meanwhile
                pass

    @staticmethod
    def pool_helpers() -> list[int]:
        found = []
        for name in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{name}/comm") as comm:
                    if comm.read().strip() == "mmreplay-pool":
                        found.append(int(name))
            except OSError:
                pass
        return found

    def restore(self) -> None:
        for tid in self.changed:
            try:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            except OSError:
                pass
        self.changed = []


class MmreplayDevice:
    def __init__(self, store, batch_size: int, device: torch.device, seed: int, *, decode: str,  # noqa: ANN001
                 prefetch: int | None = None, owned: bool = False, group: int | None = None,
                 idle: bool = False) -> None:
        more: dict[str, int] = {} if prefetch is None else {"prefetch": prefetch}
        if group is not None:
            more["group"] = group
        self.store = store if owned else None  # a reader opened for this feed, closed with it
        self.batches: Iterator = store.batches(batch_size, device=device, decode=decode, rng=seed, **more)
        self.idle: IdleThreads | None = None
        if idle:  # the batches' thread and the pool's helpers (started by its first read) at SCHED_IDLE
            next(self.batches)
            thread = self.batches.prefetcher._thread.native_id  # type: ignore[attr-defined]
            self.idle = IdleThreads([thread, *IdleThreads.pool_helpers()])

    def __next__(self) -> Tensors:
        batch = next(self.batches)
        return batch.obs, batch.action, batch.reward, batch.next_obs, batch.discount

    def close(self) -> None:
        self.batches.close()
        if self.idle is not None:
            self.idle.restore()
        if self.store is not None:
            self.store.close()
