"""Ordered passes and whole episodes over a store, read through its public API (``read``, ``episodes``):
``ReplayStore.iterate`` and ``ReplayStore.sample_episodes``, for offline RL's epochs and episode-level
training."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from mmreplay.batch import Batch
from mmreplay.errors import ClosedStoreError, StepsEvictedError
from mmreplay.validation import parse_positive_int, parse_rng

if TYPE_CHECKING:
    from mmreplay.store import ReplayStore


def ordered_pass(
    store: ReplayStore, batch_size: object, *, start: object, stop: object, epoch: Callable[[], object]
) -> Iterator[Batch]:
    """``ReplayStore.iterate``: the steps stored now (or ``[start, stop)`` within them), in batches.
    ``epoch()`` names the store's contents (it changes at every ``clear()``): a pass that began before a
    clear is refused after it, never continued over the new store's transitions."""
    batch_size = parse_positive_int(batch_size, "batch_size")
    snapshot = store.stored_steps
    first = snapshot.start if start is None else _parse_step(start, "start")
    last = snapshot.stop if stop is None else _parse_step(stop, "stop")
    if not snapshot.start <= first <= last <= snapshot.stop:
        raise ValueError(
            f"start and stop must satisfy {snapshot.start} <= start <= stop <= {snapshot.stop} (the stored "
            f"steps); got start={first}, stop={last}"
        )
    return _batches_in_order(store, batch_size, first, last, epoch)


def _batches_in_order(
    store: ReplayStore, batch_size: int, start: int, stop: int, epoch: Callable[[], object]
) -> Iterator[Batch]:
    began = epoch()
    for first in range(start, stop, batch_size):
        steps = np.arange(first, min(stop, first + batch_size), dtype=np.int64)
        if epoch() is not began:
            raise ClosedStoreError(
                f"iterate: the store was cleared (clear()) since this pass began; its steps [{first}, {stop}) "
                "are gone: start a new pass"
            )
        try:
            yield store.read(steps)
        except StepsEvictedError:
            stored = store.stored_steps
            lost = list(range(first, min(stored.start, stop)))
            raise StepsEvictedError(
                f"iterate: steps [{first}, {min(stored.start, stop)}) of the pass over [{start}, {stop}) were "
                f"evicted by the writer's adds before the pass reached them (stored steps are now "
                f"[{stored.start}, {stored.stop}))",
                steps=lost,
            ) from None


def sample_episodes(store: ReplayStore, n: object, rng: np.random.Generator | int | None, *, weighting: str) -> list[Batch]:
    """``ReplayStore.sample_episodes``: ``n`` complete, ended episodes, each read whole."""
    n = parse_positive_int(n, "n")
    if weighting not in ("uniform", "length"):
        raise ValueError(f"weighting must be 'uniform' or 'length'; got {weighting!r}")
    generator = parse_rng(rng)
    whole = [episode for episode in store.episodes() if episode.complete and episode.ended_by != "in progress"]
    if not whole:
        raise ValueError("cannot sample episodes: no stored episode is complete and ended")
    lengths = np.array([len(episode.steps) for episode in whole], np.float64)
    chosen = generator.choice(len(whole), size=n, p=None if weighting == "uniform" else lengths / lengths.sum())
    return [store.read(whole[i].steps) for i in chosen.tolist()]


def _parse_step(value: object, name: str) -> int:
    """A step bound of ``iterate``: an int (or a numpy integer)."""
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int step; got {type(value).__name__} {value!r}") from None
