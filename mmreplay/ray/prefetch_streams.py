"""The endless iterators behind ``ShardedReplay.batches`` and ``sequence_batches``: requests of a group of
batches kept ``prefetch`` deep in flight, each answered group joined and yielded batch by batch; the one
``sample(prefetch=)`` keeps between calls (``KeptStream``); and the wait of ``sample``'s single draw
(``waited_parts``), redrawn while a rate limit refuses it."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from mmreplay import Batch, SequenceBatch
from mmreplay.ray.assembly import Part
from mmreplay.ray.draws import Draws
from mmreplay.ray.shard_states import ShardStates

WAIT_S = 0.002  # the first pause before a request a rate limit refused is drawn again (doubling to 0.1 s)


def transition_stream(
    draws: Draws, states: ShardStates, sample: Callable[[np.random.Generator], Batch], *, batch_size: int,
    prefetch: int, generator: np.random.Generator, beta: float | None, n_step: int, gamma: float,
    direct_read: bool, group: int,
) -> Iterator[Batch]:
    """``ShardedReplay.batches``' iterator, its arguments checked: a group a shard refused or lost is drawn
    again batch by batch by ``sample`` (given the batch's generator: ``default_rng([seed, g])``)."""
    draws.refresh()
    pending: deque[tuple[int, Any]] = deque()
    while True:
        states.collect()  # newer states, and the refusal of a priority update sent meanwhile
        while len(pending) < prefetch:
            seed = int(generator.integers(2**63))
            pending.append((seed, draws.request(batch_size, group, seed, beta, n_step, gamma, direct_read=direct_read)))
        seed, requests = pending.popleft()
        parts = draws.gather(requests)
        if parts is None:
            for g in range(group):
                yield sample(np.random.default_rng([seed, g]))
            continue
        batches = draws.group(parts, batch_size, beta)
        for g in range(group):
            yield batches.batch(g)


def sequence_stream(
    draws: Draws, states: ShardStates, *, batch_size: int, length: int, prefetch: int,
    generator: np.random.Generator, beta: float | None, group: int, timeout_s: float | None, direct_read: bool,
) -> Iterator[SequenceBatch]:
    """``ShardedReplay.sequence_batches``' iterator, its arguments checked: a group a shard refused or lost
    is dropped and a new one drawn after a pause, until ``timeout_s`` has passed without a group.

    Raises:
        TimeoutError: (from ``next``) no group within ``timeout_s``; the message says what each shard's
            limit waits for.
    """
    draws.refresh()
    pending: deque[Any] = deque()
    deadline, pause = None, WAIT_S
    while True:
        states.collect()
        while len(pending) < prefetch:
            seed = int(generator.integers(2**63))
            pending.append(draws.request_sequences(batch_size, length, group, seed, beta, direct_read=direct_read))
        parts = draws.gather(pending.popleft())
        if parts is None:  # refused or lost: the request is dropped, and a new one drawn after a pause
            now = time.monotonic()
            deadline = now + timeout_s if deadline is None and timeout_s is not None else deadline
            if deadline is not None and now > deadline:
                raise TimeoutError(states.held_back_message(batch_size, timeout_s))
            time.sleep(pause)
            pause = min(2 * pause, 0.1)
            continue
        deadline, pause = None, WAIT_S
        batches = draws.sequence_group(parts, batch_size, beta)
        for g in range(group):
            yield batches.batch(g)


class KeptStream:
    """A stream kept between calls: ``next(key, start)`` is the next batch of the stream ``start()`` made for
    ``key``, a new stream when ``key`` differs from the last call's or the last stream raised (it is over)."""

    def __init__(self) -> None:
        self.key: Any = None
        self.stream: Iterator[Batch] | None = None

    def next(self, key: Any, start: Callable[[], Iterator[Batch]]) -> Batch:
        """The next batch of the stream for ``key`` (``start()`` makes one where there is none for it)."""
        if self.stream is None or self.key != key:
            self.key, self.stream = key, start()
        try:
            return next(self.stream)
        except BaseException:
            self.stream = None
            raise

    def drop(self) -> None:
        """Forget the stream (and the groups it fetched ahead)."""
        self.stream = None


def waited_parts(
    draws: Draws, states: ShardStates, batch_size: int, seed: int, beta: float | None, n_step: int, gamma: float, *,
    direct_read: bool, timeout_s: float | None,
) -> list[Part]:
    """The shards' parts of one batch drawn from ``seed`` (``Draws.request`` with a group of one), drawn
    again after a pause while a shard's rate limit refuses it or a shard is lost.

    Raises:
        TimeoutError: no batch within ``timeout_s``; the message says what each shard's limit waits for.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pause = WAIT_S
    while True:
        states.collect()
        parts = draws.gather(draws.request(batch_size, 1, seed, beta, n_step, gamma, direct_read=direct_read))
        states.collect()  # the updates sent before: the shards ran them before this draw
        if parts is not None:
            return parts
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(states.held_back_message(batch_size, timeout_s))
        time.sleep(pause)
        pause = min(2 * pause, 0.1)
