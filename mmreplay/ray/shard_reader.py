"""Draws from a shard's last commit, outside its actor: ``direct_read=True``'s reads.

A shard actor runs its calls one at a time, so a draw sent to it waits behind every add queued before it.
A ``ShardReader`` opens the shard's store read-only (its last commit, as any reader behind a writer
does) and draws from it in another process: in the learner's own for a shard on the learner's node, in
a Ray actor of the learner's on the shard's node for any other (``start_reader``). Either way the
shard's adds never delay the draw, and the draw never takes the shard's CPU time. What such a draw
sees lags the shard by at most one commit (``commit_interval_s``); it passes outside the shard's rate
limiter, and ``max_times_sampled`` counts the reader's own draws.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from mmreplay import Batch, EncodedBatch, EncodedSequenceBatch, ReplayStore
from mmreplay.ray.shard import store_state


class ShardReader:
    """One shard's store opened read-only, drawn from as its actor would draw (``ReplayShard.sample``).

    Args:
        path: the shard's store (``info["path"]``).
        decode_threads: the opened store's cap on decode threads (None: the cores it may use).
    """

    def __init__(self, path: str, decode_threads: int | None = None) -> None:
        self.store = ReplayStore.open(Path(path), "r", decode_threads=decode_threads)

    def state(self) -> dict[str, Any]:
        """The shard's last commit as this reader sees it (``store_state``: ``len``, ``mass``, ``min_leaf``).

        Returns:
            A dict with those three keys, as ``ReplayShard.info`` reports them.
        """
        return store_state(self.store)

    def sample(
        self, count: int, seed: int, *, beta: float, n_step: int, gamma: float, decoded: bool = False
    ) -> tuple[EncodedBatch | Batch | None, dict[str, Any]]:
        """``count`` transitions drawn by the store's sampler from ``default_rng(seed)``, encoded (or
        ``decoded``: the same rows, as ``ReplayStore.sample`` gives them), with the reader's ``state`` after
        the draw.

        Args:
            count: how many transitions.
            seed: the draw's seed.
            beta: the importance exponent.
            n_step: as in ``ReplayStore.sample``.
            gamma: as in ``ReplayStore.sample``.
            decoded: decode the rows here.

        Returns:
            (the batch, or None when the last commit holds nothing left to draw; ``state``).
        """
        draw = self.store.sample if decoded else self.store.sample_encoded
        return self._answer(lambda rng: draw(count, rng, beta=beta, n_step=n_step, gamma=gamma), seed)

    def sample_sequences(
        self, count: int, seed: int, *, length: int, beta: float
    ) -> tuple[EncodedSequenceBatch | None, dict[str, Any]]:
        """``count`` windows of ``length`` drawn from ``default_rng(seed)``, encoded
        (``ReplayStore.sample_sequences_encoded``), with the reader's ``state`` after the draw.

        Args:
            count: how many windows.
            seed: the draw's seed.
            length: transitions per window.
            beta: the importance exponent.

        Returns:
            (the encoded windows, or None when the last commit holds nothing left to draw; ``state``).
        """
        return self._answer(lambda rng: self.store.sample_sequences_encoded(count, length, rng, beta=beta), seed)

    def _answer(self, draw: Callable[[np.random.Generator], Any], seed: int) -> tuple[Any, dict[str, Any]]:
        """``draw(default_rng(seed))`` (None when the last commit holds nothing left to draw), and ``state``."""
        before = self.state()
        if not before["mass"] > 0:
            return None, before
        return draw(np.random.default_rng(seed)), self.state()

    def close(self) -> None:
        """Close the store (again: nothing)."""
        self.store.close()


def start_reader(info: dict[str, Any]) -> Any:
    """Start a ``ShardReader`` actor on the node of the shard whose state is ``info`` (its ``node_id`` and
    ``path``), owned by this process (it ends with it, or with ``ray.kill``).

    Args:
        info: the shard's state as its actor reported it.

    Returns:
        The reader actor's handle.
    """
    strategy = NodeAffinitySchedulingStrategy(node_id=info["node_id"], soft=False)
    # decode_threads=1: it decodes nothing (a draw gathers the blocks; the learner decodes them)
    return ray.remote(ShardReader).options(num_cpus=0, max_restarts=0, scheduling_strategy=strategy).remote(
        info["path"], decode_threads=1)
