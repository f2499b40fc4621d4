"""A replay shard: the one writer of one store, run as a Ray actor on its node's local disk.

The class is plain Python (Ray wraps it with ``ray.remote`` when ``ShardedReplay.create`` starts it),
so everything but the transport is testable without Ray.

- **Restarts.** Ray restarts a dead shard (``max_restarts``); ``__init__`` then reopens its store, which
  holds exactly the last commit, and increments the shard's *epoch* (kept in the file ``epoch`` beside
  the store). A global id carries the epoch of the shard that sampled it, and priority updates of an
  older epoch are dropped: after a rollback the same step may be another transition.
- **Envs.** Each writer key gets its own envs of the shard's store (``register``), recorded in the file
  ``envs.json`` (replaced atomically), so a writer that reconnects with its key continues its envs.
- **Rate limiting.** Sends that the shard's ``RateLimit`` does not allow yet wait, in order, in the
  shard's queue and are written as sampling makes room; ``add`` answers with the queue's length so that
  the writer holds back while it is not empty.
"""

from __future__ import annotations

import json
import os
import socket
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mmreplay import EncodedBatch, EncodedFrames, EncodedSequenceBatch, ReplayStore, StoreNotFoundError
from mmreplay.ray.rate_limit import RateLimit
from mmreplay.sampling.samplers import PrioritizedSampler, sampler_from_config


@dataclass(frozen=True)
class ShardConfig:
    """How a shard's store is made: what ``ShardedReplay.create`` decided for each shard."""

    frame_shape: tuple[int, ...]
    capacity: int
    stack_size: int
    num_envs: int
    action_shape: tuple[int, ...]
    action_dtype: str
    sampler: dict[str, object] | None
    rate_limit: RateLimit | None
    commit_interval_s: float | None
    frame_encoding: str | None = None  # None: ReplayStore.create's default


@dataclass(frozen=True)
class Send:
    """One writer's send: T steps of one env, frames encoded (``ReplayStore.add_encoded``'s arguments)."""

    env_index: int
    frames: EncodedFrames
    obs: npt.NDArray[np.int64]
    action: npt.NDArray[Any]
    reward: npt.NDArray[np.float32]
    next_obs: npt.NDArray[np.int64]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]

    def __len__(self) -> int:
        return len(self.obs)

    def steps(self, start: int, stop: int) -> Send:
        """Steps ``[start, stop)`` of this send (the same frames)."""
        return Send(self.env_index, self.frames, self.obs[start:stop], self.action[start:stop],
                    self.reward[start:stop], self.next_obs[start:stop], self.terminated[start:stop],
                    self.truncated[start:stop])


class ReplayShard:
    """Owns the store ``<root>/shard-<k>`` (created on first start, reopened at its last commit after)."""

    def __init__(self, root: str, shard: int, config: ShardConfig) -> None:
        self.shard = shard
        self.directory = Path(root) / f"shard-{shard:04d}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config = config
        store_path = self.directory / "store.mmr"
        try:
            self.store = ReplayStore.open(store_path, "r+", commit_interval_s=config.commit_interval_s)
            self.reopened = True
        except StoreNotFoundError:
            sampler = None if config.sampler is None else sampler_from_config(config.sampler)
            self.store = ReplayStore.create(
                store_path, frame_shape=config.frame_shape, capacity=config.capacity, stack_size=config.stack_size,
                num_envs=config.num_envs, action_shape=config.action_shape, action_dtype=config.action_dtype,
                sampler=sampler, commit_interval_s=config.commit_interval_s, frame_encoding=config.frame_encoding,
            )
            self.reopened = False
        self.epoch = self._next_epoch()
        self.envs: dict[str, tuple[int, int]] = self._read_envs()  # writer key: (first env, env count)
        self.limit = None if config.rate_limit is None else config.rate_limit
        self.inserts = len(self.store)  # the rate limiter's counts start from what the store holds
        self.samples = 0
        self.queue: deque[Send] = deque()
        self.where = {"path": str(self.store.path), "node": socket.gethostname(), "pid": os.getpid(), "node_id": _node_id()}

    # -- files ---------------------------------------------------------------------------------

    def _next_epoch(self) -> int:
        path = self.directory / "epoch"
        epoch = (int(path.read_text()) + 1) % 256 if path.exists() else 0
        _replace_file(path, str(epoch))
        return epoch

    def _read_envs(self) -> dict[str, tuple[int, int]]:
        path = self.directory / "envs.json"
        return {key: (first, count) for key, (first, count) in json.loads(path.read_text()).items()} if path.exists() else {}

    # -- writing -------------------------------------------------------------------------------

    def register(self, key: str, num_envs: int) -> int:
        """The first of ``num_envs`` consecutive envs of the store for writer ``key`` (the same on every
        call with that key, also after a restart)."""
        if key in self.envs:
            first, count = self.envs[key]
            if count != num_envs:
                raise ValueError(f"writer {key!r} registered {count} envs on shard {self.shard}; got num_envs={num_envs}")
            return first
        used = sum(count for _, count in self.envs.values())
        if used + num_envs > self.config.num_envs:
            raise ValueError(
                f"shard {self.shard} has {self.config.num_envs - used} free envs; writer {key!r} asks for "
                f"{num_envs} (raise envs_per_shard in ShardedReplay.create)"
            )
        self.envs[key] = (used, num_envs)
        _replace_file(self.directory / "envs.json", json.dumps(self.envs))
        return used

    def add(self, send: Send) -> int:
        """Write a send's steps (those the rate limit allows now; the rest wait in the queue, in order).
        Returns how many sends wait in the queue."""
        self.queue.append(send)
        self._drain()
        return len(self.queue)

    def _drain(self) -> None:
        """Write queued sends, oldest first, as far as the rate limit allows: one store call per send (or
        per part of a send, when the limit lets only its first steps in)."""
        while self.queue:
            send = self.queue[0]
            allowed = len(send) if self.limit is None else self._insertable(len(send))
            if allowed == 0:
                return
            part = send if allowed == len(send) else send.steps(0, allowed)
            self.store.add_encoded(part.frames, part.obs, part.action, part.reward, part.next_obs,
                                   part.terminated, part.truncated, env_index=part.env_index)
            self.inserts += allowed
            if allowed == len(send):
                self.queue.popleft()
            else:
                self.queue[0] = send.steps(allowed, len(send))

    def _insertable(self, count: int) -> int:
        """How many of ``count`` steps the rate limit lets in now."""
        assert self.limit is not None
        return self.limit.insertable(count, inserts=self.inserts, samples=self.samples)

    def flush(self) -> bool:
        """Commit what was written; False (nothing committed) while sends wait in the queue."""
        if self.queue:
            return False
        self.store.flush()
        return True

    def queued(self) -> int:
        return len(self.queue)

    # -- sampling ------------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """The shard's state for a client that draws across shards: ``len``, ``mass`` (what it is drawn in
        proportion to: its length, or its priorities' sum), ``min_leaf`` (its smallest priority leaf),
        ``epoch``, the rate limiter's counts, and where it runs."""
        sampler = self.store.sampler
        mass, min_leaf = (float(len(self.store)), 1.0)
        if isinstance(sampler, PrioritizedSampler) and len(self.store):
            mass, min_leaf = sampler.mass
        return {
            "shard": self.shard, "epoch": self.epoch, "len": len(self.store),
            "transitions_added": self.store.transitions_added, "mass": mass, "min_leaf": min_leaf,
            "inserts": self.inserts, "samples": self.samples, "queued": len(self.queue),
            "reopened": self.reopened, **self.where,
        }

    def can_sample(self, count: int) -> bool:
        if count == 0:
            return True
        if self.limit is None:
            return len(self.store) > 0
        return self.limit.can_sample(count, inserts=self.inserts, samples=self.samples, size=len(self.store))

    def sample(
        self, count: int, seed: int, *, beta: float, n_step: int, gamma: float
    ) -> tuple[EncodedBatch, dict[str, Any]] | None:
        """``count`` transitions drawn by the store's sampler, encoded, with the shard's ``info`` after the
        draw; None when the rate limit does not allow it yet."""
        if not self.can_sample(count):
            return None
        batch = self.store.sample_encoded(count, np.random.default_rng(seed), beta=beta, n_step=n_step, gamma=gamma)
        self.samples += count
        self._drain()
        return batch, self.info()

    def sample_sequences(
        self, count: int, seed: int, *, length: int, beta: float
    ) -> tuple[EncodedSequenceBatch, dict[str, Any]] | None:
        """``count`` windows of ``length`` (``ReplayStore.sample_sequences_encoded``), with ``info``; None
        when the rate limit does not allow it yet."""
        if not self.can_sample(count):
            return None
        batch = self.store.sample_sequences_encoded(count, length, np.random.default_rng(seed), beta=beta)
        self.samples += count
        self._drain()
        return batch, self.info()

    def update_priorities(self, epoch: int, steps: npt.NDArray[np.int64], priorities: npt.NDArray[np.float64]) -> int:
        """Set priorities of steps sampled in ``epoch``; a stale epoch's are dropped. Returns how many applied."""
        if epoch != self.epoch:
            return 0
        known = steps < self.store.transitions_added
        self.store.update_priorities(steps[known], priorities[known])
        return int(known.sum())

    def ping(self) -> int:
        return self.epoch

    def close(self) -> None:
        self.store.close()


def _node_id() -> str | None:
    """The Ray node this runs on (None outside Ray)."""
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id())
    except Exception:  # noqa: BLE001 - outside a Ray worker there is no node
        return None


def _replace_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file, then ``os.replace``)."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)
