"""TorchRL samplers that draw from what an ``MmreplayStorage``'s store knows itself.

``MmreplayPrioritizedSampler`` maps TorchRL's prioritized replay onto mmreplay's own ``PrioritizedSampler``
(the store's sum tree, committed with the store, on disk): TorchRL's ``PrioritizedSampler`` works with
the storage too (it keeps its own tree of slots), but it needs TorchRL's C++ extension, which a TorchRL
wheel built for another torch lacks. ``MmreplaySliceSampler`` is TorchRL's ``SliceSampler`` with the
trajectories taken from the store's episodes (one pass over its columns) instead of reading every stored
transition, frames included, at each sample as ``SliceSampler`` does to find them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torchrl.data.replay_buffers.samplers import Sampler, SliceSampler
from torchrl.data.replay_buffers.storages import Storage

from mmreplay import PrioritizedSampler
from mmreplay.torchrl.storage import MmreplayStorage
from mmreplay.validation import parse_number


class MmreplayPrioritizedSampler(Sampler):
    """TorchRL's prioritized replay from the store's own sum tree, committed with the store.

    P(i) = (p_i + eps)^alpha / sum, new transitions at the largest priority seen, and
    ``info["priority_weight"]`` = (p_i / p_min)^-beta. Indices are TorchRL's slots. Draws come from the
    buffer's torch generator (``ReplayBuffer(generator=...)``, else torch's global one).

    Args:
        storage: the buffer's storage, which it tells to create its store with
            ``mmreplay.PrioritizedSampler(alpha, eps)`` (before the first write).
        alpha: how much priorities count (0: uniform).
        beta: the exponent of the importance weights.
        eps: added to each priority.

    Raises:
        TypeError: ``storage`` is not an ``MmreplayStorage``.
        ValueError: ``beta``, ``alpha`` or ``eps`` is not a finite number >= 0, or the storage's store
            exists and samples uniformly.
    """

    def __init__(self, storage: MmreplayStorage, *, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6) -> None:
        if not isinstance(storage, MmreplayStorage):
            raise TypeError(f"storage must be the buffer's MmreplayStorage; got {type(storage).__name__}")
        self.beta = parse_number(beta, "beta", low=0.0)
        self._storage = storage
        storage.use_priorities(PrioritizedSampler(alpha=alpha, epsilon=eps))

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """Draw slots by priority, as TorchRL's buffer asks.

        Args:
            storage: the buffer's storage, the one this sampler was made with.
            batch_size: how many slots.

        Returns:
            The slots and ``{"priority_weight": weights}``.

        Raises:
            ValueError: ``storage`` is another storage than this sampler's.
            RuntimeError: the storage is empty.
        """
        if storage is not self._storage:
            raise ValueError("this MmreplayPrioritizedSampler belongs to another storage than the buffer's")
        if len(storage) == 0:
            raise RuntimeError("Cannot sample from an empty storage.")
        store = self._storage.store
        # One torch draw seeds the numpy generator the store's sampler takes: the buffer's seed decides.
        seed = int(torch.randint(0, 2**62, (), generator=self._rng))
        steps = store.sampler.sample(batch_size, stored=store.stored_steps, rng=np.random.default_rng(seed))
        weights = store.sampler.weights(steps, beta=self.beta)
        return torch.from_numpy(self._storage.slots_of_steps(steps)), {"priority_weight": torch.from_numpy(weights)}

    def update_priority(
        self, index: int | torch.Tensor, priority: float | torch.Tensor, *, storage: Storage | None = None
    ) -> None:
        """Set the priorities of sampled slots (``TensorDictReplayBuffer``'s ``priority_key``, ``rb.update_priority``).

        Args:
            index: slots.
            priority: one priority per slot, or one for all.
            storage: TorchRL's argument (unused: the sampler knows its storage).

        Raises:
            ValueError: a priority is not finite and >= 0 (a slot whose transition was evicted since
                is skipped).
        """
        steps = self._storage.steps_of_slots(index)
        values = priority.detach().cpu().numpy() if isinstance(priority, torch.Tensor) else np.asarray(priority)
        values = np.broadcast_to(values.reshape(-1) if values.size != 1 else values.reshape(()), steps.shape)
        self._storage.store.update_priorities(steps, values.astype(np.float64))

    @property
    def default_priority(self) -> float:
        """The priority a new transition gets: the largest seen so far.

        Returns:
            The store's sampler's largest priority (1 for a store that samples uniformly).
        """
        sampler = self._storage.store.sampler
        return float(sampler.max_priority) if isinstance(sampler, PrioritizedSampler) else 1.0

    def state_dict(self) -> dict[str, Any]:
        """The sampler's own state; the priorities live in the store, committed with it.

        Returns:
            ``{"beta": beta}``.
        """
        return {"beta": self.beta}  # the priorities live in the store, committed with it

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take ``beta`` from a ``state_dict()``.

        Args:
            state_dict: what ``state_dict()`` returned.
        """
        self.beta = parse_number(state_dict["beta"], "beta", low=0.0)

    def _empty(self) -> None:
        pass  # the store's clear empties its sum tree

    def dumps(self, path: object) -> None:
        """Write nothing: the storage's ``dumps`` carries the priorities.

        Args:
            path: the dump's directory (unused).
        """

    def loads(self, path: object) -> None:
        """Read nothing: the storage's ``loads`` brings the priorities back.

        Args:
            path: the dump's directory (unused).
        """

    def __repr__(self) -> str:
        return f"MmreplayPrioritizedSampler(beta={self.beta}, storage={str(self._storage.path)!r})"


class MmreplaySliceSampler(SliceSampler):
    """TorchRL's ``SliceSampler`` whose trajectories are the store's episodes, on an ``MmreplayStorage``.

    The same arguments and draws as ``SliceSampler``; a slice never crosses a reset, nor a trajectory
    that was cut (a lane taken over). The trajectories come from the store's episodes instead of
    reading every stored transition at each sample. Other storages get ``SliceSampler``'s own.
    """

    def _get_stop_and_length(self, storage: Storage, fallback: bool = True) -> Any:
        if not isinstance(storage, MmreplayStorage):
            return super()._get_stop_and_length(storage, fallback)
        if self.cache_values and "static-stop-and-length" in self._cache:
            return self._cache["static-stop-and-length"]
        return self._find_start_stop_traj(
            trajectory=storage.trajectory_ids(),
            at_capacity=storage._is_full,
            cursor=storage._last_cursor_index,
            storage=storage,
            source=("trajectory", "mmreplay episodes"),
        )
