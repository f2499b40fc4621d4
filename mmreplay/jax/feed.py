"""``batches``: an endless iterator of ``JaxBatch`` records, the store's ``batches()`` thread preparing the
next numpy batch while the learner runs."""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import Any, Protocol

import jax
import numpy as np

from mmreplay import Batch, ReplayStore
from mmreplay.jax.devices import parse_device
from mmreplay.jax.keys import generator_from_key
from mmreplay.jax.records import JaxBatch
from mmreplay.jax.transfer import to_jax


class _BatchStream(Protocol):
    """What ``store.batches(...)`` returns for numpy batches: an iterator that can be stopped."""

    def __next__(self) -> Batch: ...

    def close(self) -> None: ...


class JaxBatches:
    """An endless iterator of ``JaxBatch`` (``batches`` makes one): each the batch ``store.sample`` draws
    with the same generator, in order, as jax arrays on one device.

    The store's ``batches(reuse=True)`` thread decodes the next numpy batches into buffers it refills in
    turn while the learner runs; ``next()`` takes the oldest and sends it to the device (``to_jax``, copied
    as it is sent, so the buffer may be refilled). ``close()``, ``with``, garbage collection or closing the
    store stops the thread.

    Args:
        stream: the store's stream of numpy batches (``store.batches(reuse=True)``'s).
        device: the device the batches go to (None: JAX's default).
    """

    def __init__(self, stream: _BatchStream, device: jax.Device | None) -> None:
        """An iterator over ``stream``'s batches sent to ``device`` (``batches`` makes one)."""
        self._stream = stream
        self._device = device

    def __iter__(self) -> Iterator[JaxBatch]:
        return self

    def __next__(self) -> JaxBatch:
        return to_jax(next(self._stream), self._device, copy=True)

    def close(self) -> None:
        """Stop the thread and drop the batches it prepared; later ``next()`` calls end the iteration."""
        self._stream.close()

    def __enter__(self) -> JaxBatches:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def batches(
    store: ReplayStore,
    batch_size: int,
    *,
    key: jax.Array | None = None,
    seed: int | None = None,
    device: jax.Device | str | None = None,
    prefetch: int = 2,
    **sample_kwargs: Any,
) -> JaxBatches:
    """An endless iterator of ``store.sample(batch_size, rng, **sample_kwargs)`` batches as ``JaxBatch``
    records on ``device``, the next ones decoded ahead in the store's ``batches()`` thread.

    It yields exactly the batches successive ``store.sample`` calls would with the generator that ``key``
    (``generator_from_key``) or ``seed`` (``np.random.default_rng(seed)``) stands for, in order.

    Args:
        store: an open store.
        batch_size: transitions a batch.
        key: a jax PRNG key the draws follow (split it first: it is read, not consumed).
        seed: an int seed instead of ``key``; with neither, fresh OS entropy.
        device: where the batches go (``mmreplay.jax.devices.parse_device``); None: JAX's default device.
        prefetch: numpy batches the thread keeps ready (``store.batches``' own).
        **sample_kwargs: ``store.sample``'s ``beta``, ``n_step`` and ``gamma``.

    Returns:
        The iterator (``close()`` it, or use ``with``).

    Raises:
        TypeError: both ``key`` and ``seed``, a ``store`` that is no ``ReplayStore``, or arguments
            ``store.sample`` refuses, raised here, before the thread starts.
        ValueError: a ``device`` that is not here, or values ``store.sample`` refuses.
    """
    if not isinstance(store, ReplayStore):
        raise TypeError(f"store must be an mmreplay ReplayStore; got {type(store).__name__}")
    if key is not None and seed is not None:
        raise TypeError("batches takes key or seed, not both")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise TypeError(f"seed must be an int; got {type(seed).__name__}")
    if "length" in sample_kwargs or "device" in sample_kwargs or "reuse" in sample_kwargs:
        raise TypeError("mmreplay.jax.batches takes no length, device= of torch or reuse: it yields JaxBatch records")
    target = parse_device(device)
    generator = generator_from_key(key) if key is not None else np.random.default_rng(seed)
    stream = store.batches(batch_size, prefetch=prefetch, rng=generator, reuse=True, **sample_kwargs)
    return JaxBatches(stream, target)
