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
- **Limiter counts across restarts.** The limiter's *inserts* are the store's ``transitions_added``
  (rolled back with it to the last commit), and its *samples* are written to the file ``limiter.json``
  beside the store each time the shard commits (the shard commits itself, every ``commit_interval_s``
  and on ``flush``): a restarted shard resumes within one commit interval's samples of where its
  limiter stood, instead of holding its writers back until the learner has drawn everything again.
- **Initial priorities.** A send may carry a priority per step (computed by the actor, as Ape-X does):
  its steps get them in the same call that writes them, before any sample can see them.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
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
    fields: tuple[tuple[str, tuple[int, ...], str], ...] = ()  # the user fields: (name, shape, dtype) each


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
    priority: npt.NDArray[np.float64] | None = None  # each step's initial priority (None: the sampler's default)
    fields: dict[str, npt.NDArray[Any]] | None = None  # each user field's values, (T, *shape) (None: no fields)

    def __len__(self) -> int:
        return len(self.obs)

    def steps(self, start: int, stop: int) -> Send:
        """Steps ``[start, stop)`` of this send (the same frames)."""
        return Send(self.env_index, self.frames, self.obs[start:stop], self.action[start:stop],
                    self.reward[start:stop], self.next_obs[start:stop], self.terminated[start:stop],
                    self.truncated[start:stop], None if self.priority is None else self.priority[start:stop],
                    None if self.fields is None else {name: values[start:stop] for name, values in self.fields.items()})


class ReplayShard:
    """Owns the store ``<root>/shard-<k>`` (created on first start, reopened at its last commit after)."""

    def __init__(self, root: str, shard: int, config: ShardConfig) -> None:
        self.shard = shard
        self.directory = Path(root) / f"shard-{shard:04d}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config = config
        store_path = self.directory / "store.mmr"
        # The shard commits by itself (``_commit``), so that the limiter's counts go with each commit.
        try:
            self.store = ReplayStore.open(store_path, "r+", commit_interval_s=None)
            self.reopened = True
        except StoreNotFoundError:
            sampler = None if config.sampler is None else sampler_from_config(config.sampler)
            self.store = ReplayStore.create(
                store_path, frame_shape=config.frame_shape, capacity=config.capacity, stack_size=config.stack_size,
                num_envs=config.num_envs, action_shape=config.action_shape, action_dtype=config.action_dtype,
                sampler=sampler, commit_interval_s=None, frame_encoding=config.frame_encoding,
                fields={name: (shape, dtype) for name, shape, dtype in config.fields} or None,
            )
            self.reopened = False
        self.epoch = self._next_epoch()
        self.envs: dict[str, tuple[int, int]] = self._read_envs()  # writer key: (first env, env count)
        self.limit = None if config.rate_limit is None else config.rate_limit
        self.prioritized = isinstance(self.store.sampler, PrioritizedSampler)
        self.inserts = self.store.transitions_added  # every step added, rolled back with the store's commit
        self.samples = self._read_samples()
        self.queue: deque[Send] = deque()
        self.interval = math.inf if config.commit_interval_s is None else config.commit_interval_s
        self.commit_due = time.monotonic() + self.interval
        self.last_insert = time.monotonic()  # when a step was last written (or the shard started)
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

    def _read_samples(self) -> int:
        """The limiter's samples as the last commit recorded them. Without a record (a shard of an older
        version, or a damaged file), the count that puts the limiter's diff at the middle of its window,
        where neither side waits."""
        path = self.directory / "limiter.json"
        try:
            samples = json.loads(path.read_text())["samples"]
            if isinstance(samples, int) and samples >= 0:
                return samples
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if self.limit is None:
            return 0
        middle = self.limit.min_size_to_sample * self.limit.samples_per_insert  # the diff the window centres on
        return max(0, math.floor(self.limit.diff(self.inserts, 0) - middle))

    def _commit(self) -> None:
        """Commit the store, then record the limiter's samples beside it (a crash between the two keeps the
        previous record: the limiter then resumes at most one commit interval's samples behind)."""
        self.store.flush()
        _replace_file(self.directory / "limiter.json",
                      json.dumps({"samples": self.samples, "transitions_added": self.store.transitions_added}))
        self.commit_due = time.monotonic() + self.interval

    def _commit_if_due(self) -> None:
        if time.monotonic() >= self.commit_due:
            self._commit()

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
        Returns how many sends wait in the queue.

        Raises:
            TypeError: the send carries priorities and this shard's store samples uniformly.
        """
        if send.priority is not None and not self.prioritized:
            raise TypeError("writer.add(priority=) needs a replay created with sampler=PrioritizedSampler(...); "
                            f"shard {self.shard} samples uniformly")
        self.queue.append(send)
        self._drain()
        self._commit_if_due()
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
            first = self.store.transitions_added
            self.store.add_encoded(part.frames, part.obs, part.action, part.reward, part.next_obs,
                                   part.terminated, part.truncated, env_index=part.env_index, fields=part.fields)
            if part.priority is not None:  # one env's steps: consecutive, from the store's count before
                self.store.update_priorities(np.arange(first, first + allowed, dtype=np.int64), part.priority)
            self.inserts += allowed
            self.last_insert = time.monotonic()
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
        self._commit()
        return True

    def queued(self) -> int:
        return len(self.queue)

    # -- sampling ------------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """The shard's state for a client that draws across shards: ``len``, ``mass`` (what it is drawn in
        proportion to: its length, or its priorities' sum), ``min_leaf`` (its smallest priority leaf),
        ``epoch``, the rate limiter's counts, and where it runs."""
        return {
            "shard": self.shard, "epoch": self.epoch, **store_state(self.store),
            "transitions_added": self.store.transitions_added,
            "inserts": self.inserts, "samples": self.samples, "queued": len(self.queue),
            "idle_s": time.monotonic() - self.last_insert, "reopened": self.reopened, **self.where,
        }

    def held_back(self, count: int) -> str | None:
        """Why a sample of ``count`` is not allowed now, in words (None when it is)."""
        if self.can_sample(count):
            return None
        size = len(self.store)
        if self.limit is None:
            return f"shard {self.shard} holds no transition"
        if size < self.limit.min_size_to_sample:
            return f"shard {self.shard} holds {size} transitions; its limit samples from {self.limit.min_size_to_sample}"
        needed = math.ceil((self.limit.min_diff + count - self.limit.diff(self.inserts, self.samples))
                           / self.limit.samples_per_insert)
        return (f"shard {self.shard} needs {needed} more inserts before its limit allows a sample of {count} "
                f"(samples_per_insert {self.limit.samples_per_insert}: {self.samples} samples of {self.inserts} inserts)")

    def can_sample(self, count: int) -> bool:
        if count == 0:
            return True
        if self.limit is None:
            return len(self.store) > 0
        return self.limit.can_sample(count, inserts=self.inserts, samples=self.samples, size=len(self.store))

    def sample(
        self, count: int, seed: int, *, beta: float, n_step: int, gamma: float
    ) -> tuple[EncodedBatch | None, dict[str, Any]]:
        """``count`` transitions drawn by the store's sampler, encoded (None when the rate limit does not
        allow it yet), with the shard's ``info`` after the draw."""
        if not self.can_sample(count):
            return None, {**self.info(), "held_back": self.held_back(count)}
        batch = self.store.sample_encoded(count, np.random.default_rng(seed), beta=beta, n_step=n_step, gamma=gamma)
        self.samples += count
        self._drain()
        self._commit_if_due()
        return batch, self.info()

    def sample_sequences(
        self, count: int, seed: int, *, length: int, beta: float
    ) -> tuple[EncodedSequenceBatch | None, dict[str, Any]]:
        """``count`` windows of ``length`` (``ReplayStore.sample_sequences_encoded``; None when the rate
        limit does not allow it yet), with ``info``."""
        if not self.can_sample(count):
            return None, {**self.info(), "held_back": self.held_back(count)}
        batch = self.store.sample_sequences_encoded(count, length, np.random.default_rng(seed), beta=beta)
        self.samples += count
        self._drain()
        self._commit_if_due()
        return batch, self.info()

    def update_priorities(
        self, epoch: int, steps: npt.NDArray[np.int64], priorities: npt.NDArray[np.float64]
    ) -> tuple[int, dict[str, Any]]:
        """Set priorities of steps sampled in ``epoch``; a stale epoch's are dropped. Returns how many
        applied, and ``info`` after the update (its new mass)."""
        if epoch != self.epoch:
            return 0, self.info()
        known = steps < self.store.transitions_added
        self.store.update_priorities(steps[known], priorities[known])
        return int(known.sum()), self.info()

    def ping(self) -> int:
        return self.epoch

    def close(self) -> None:
        """Commit (with the limiter's counts) and close the store; again, nothing."""
        if self.store.closed:
            return
        self._commit()
        self.store.close()


def store_state(store: ReplayStore) -> dict[str, Any]:
    """What a draw over shards needs of one shard's store: ``len``, ``mass`` (what it is drawn in proportion
    to: its length, its priorities' sum, or under ``max_times_sampled`` what is left to draw) and
    ``min_leaf`` (its smallest priority leaf; 1 under uniform sampling).

    Args:
        store: the shard's store (its writer's, or a reader's of its last commit).

    Returns:
        A dict with those three keys.
    """
    sampler = store.sampler
    size = len(store)
    mass, min_leaf = float(size), 1.0
    if isinstance(sampler, PrioritizedSampler) and size:
        mass, min_leaf = sampler.mass
    elif getattr(sampler, "remaining", None) is not None:  # max_times_sampled: what is left to draw
        mass = float(sampler.remaining)
    return {"len": size, "mass": mass, "min_leaf": min_leaf}


def _node_id() -> str | None:
    """The Ray node this runs on (None outside Ray: asking the runtime context there would start Ray)."""
    try:
        import ray

        if not ray.is_initialized():
            return None
        return str(ray.get_runtime_context().get_node_id())
    except Exception:  # noqa: BLE001 - outside a Ray worker there is no node
        return None


def _replace_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file, then ``os.replace``)."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)
