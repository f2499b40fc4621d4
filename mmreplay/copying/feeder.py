"""Transitions added to a new store in the order they were first added: what an import and a conversion
feed a store they build. Each transition arrives as (env, obs, action, reward, next_obs, terminated,
truncated, fields, fragment), its obs and next_obs whole stacks; the store rebuilds its episodes from
them as it would from an env (an obs that continues the env's episode adds one frame), so stacks come
back exactly as they were.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from mmreplay.store import ReplayStore


class Feeder:
    """Adds transitions in order; consecutive ones of increasing envs share one vector ``add``."""

    def __init__(self, store: ReplayStore) -> None:
        self.store = store
        self.pending: dict[int, tuple[Any, ...]] = {}

    def feed(self, transitions: Iterator[tuple[Any, ...]], bar: Any) -> None:
        for env, *fields, fragment in transitions:
            if self.store.num_envs == 1:
                self.store.add(*_reorder(fields[:-1]), fields=fields[-1] or None, fragment=fragment)
                bar.update(1)
                continue
            if fragment:  # one add marks every env it starts as a fragment: this env's goes alone
                bar.update(self._flush())
                self.pending[env] = tuple(fields)
                bar.update(self._flush(fragment=True))
                continue
            if self.pending and env <= max(self.pending):
                bar.update(self._flush())
            self.pending[env] = tuple(fields)
        bar.update(self._flush())

    def _flush(self, *, fragment: bool = False) -> int:
        if not self.pending:
            return 0
        store = self.store
        n, stack = store.num_envs, store.stack_size
        obs = np.zeros((n, stack, *store.frame_shape), store.frame_dtype)
        next_obs = np.zeros_like(obs)
        action = np.zeros((n, *store.action_shape), store.action_dtype)
        reward = np.zeros(n, np.float32)
        terminated, truncated, mask = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, bool)
        fields: dict[str, Any] = {name: np.zeros((n, *shape), dtype) for name, (shape, dtype) in store.fields.items()}
        for env, (o, a, r, o2, te, tr, values) in self.pending.items():
            obs[env], action[env], reward[env], next_obs[env] = o, a, r, o2
            terminated[env], truncated[env], mask[env] = te, tr, True
            for name, value in values.items():
                fields[name][env] = value
        store.add(obs, action, reward, next_obs, terminated, truncated, env_mask=mask, fields=fields or None,
                  fragment=fragment)
        count = len(self.pending)
        self.pending = {}
        return count


def _reorder(fields: list[Any]) -> tuple[Any, ...]:
    obs, action, reward, next_obs, terminated, truncated = fields
    return obs, action, reward, next_obs, terminated, truncated
