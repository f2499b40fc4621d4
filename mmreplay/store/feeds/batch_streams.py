"""The iterators ``ReplayStore.batches`` returns: ``sample`` batches (or ``sample_sequences`` windows)
prepared ahead in a background thread, refilled in place with ``reuse=True``, or handed over as torch
tensors on a device (``feeds.device_batches``). They read through the ``BatchSource`` the store gives them."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from mmreplay.batch import Batch, SequenceBatch
from mmreplay.store.batch_source import BatchSource
from mmreplay.store.feeds import device_batches
from mmreplay.store.feeds.device_batches import DeviceBatches, sample_into
from mmreplay.store.feeds.prefetch import Prefetcher, recycling

if TYPE_CHECKING:
    import torch

    from mmreplay.store.store_layout import StoreLayout


def open_batches(
    store: StoreLayout,
    source: BatchSource,
    batch_size: int,
    *,
    prefetch: int,
    generator: np.random.Generator,
    reuse: bool,
    device: str | torch.device | None,
    decode: str,
    length: int | None,
    sample_kwargs: dict[str, Any],
    group: object = None,
) -> tuple[Prefetcher[Batch] | Prefetcher[SequenceBatch] | DeviceBatches[Any], Prefetcher[Any]]:
    """The iterator ``store.batches`` returns for these checked arguments, and the thread's ``Prefetcher``
    behind it, which the store stops when it closes or clears.

    Args:
        store: the store's layout (its frame shape, stack size, sampler, ...).
        source: what the batches are read through.
        batch_size, prefetch, generator, reuse, device, decode, length, sample_kwargs: ``batches``' own,
            checked.
        group: device batches only (``device_batches.parse_group``).

    Returns:
        The iterator, and the thread's ``Prefetcher`` behind it.

    Raises:
        TypeError: ``group`` without ``device``.
        ValueError, TypeError: ``sample_kwargs`` that ``sample`` refuses, raised here, before the thread starts.
    """
    if device is not None:
        on_device = device_batches.open_device_batches(store, source, batch_size, prefetch=prefetch, generator=generator,
                                                       device=device, decode=decode, length=length,
                                                       sample_kwargs=sample_kwargs, group=group)
        return on_device, on_device.prefetcher
    if group is not None:
        raise TypeError("group needs device=: numpy batches are read one at a time")
    if length is not None:
        windows = Prefetcher(sequence_producer(
            source, batch_size, length, generator, buffers=prefetch + 2 if reuse else 0, sample_kwargs=sample_kwargs,
        ), depth=prefetch)
        return windows, windows
    source.sample(1, np.random.default_rng(0), **sample_kwargs)  # invalid arguments fail here, not later
    reader = source.background_reader()  # the thread's decode leaves the consumer's core alone
    produce: Callable[[], Batch]
    if reuse:
        # The caller holds one batch, ``prefetch`` wait in the queue and the thread fills one more:
        # the batch filled prefetch + 2 calls ago has been released by the caller's next().
        produce = recycling(
            lambda out: source.sample(batch_size, generator, out=out, replace_shared_out=True, reader=reader,
                                      **sample_kwargs),
            buffers=prefetch + 2,
        )
    else:
        produce = functools.partial(source.sample, batch_size, generator, out=None, replace_shared_out=False,
                                    reader=reader, **sample_kwargs)
    prefetcher = Prefetcher(produce, depth=prefetch)
    return prefetcher, prefetcher


def sequence_producer(source: BatchSource, batch_size: int, length: int, generator: np.random.Generator, *,
                      buffers: int, sample_kwargs: dict[str, Any]) -> Callable[[], SequenceBatch]:
    """What ``store.batches(batch_size, length=length)`` calls in its thread: ``sample_sequences`` windows,
    refilled in place in ``buffers`` batches used in turn (none: new arrays each call). Bad arguments fail
    here, in the caller."""
    source.sample_sequences(1, length, np.random.default_rng(0), **sample_kwargs)
    reader = source.background_reader()

    def windows(out: SequenceBatch | None) -> SequenceBatch:
        return sample_into(lambda held: source.sample_sequences(batch_size, length, generator, out=held, reader=reader,
                                                                 **sample_kwargs), out, generator)

    return recycling(windows, buffers=buffers) if buffers else lambda: windows(None)
