"""A replay shard: the one writer of one store, run as a Ray actor on its node's local disk.

The class is plain Python (Ray wraps it with ``ray.remote`` when ``ShardedReplay.create`` starts it),
so everything but the transport is testable without Ray.

- **Restarts.** Ray restarts a dead shard (``max_restarts``); ``__init__`` then reopens its store, which
  holds exactly the last commit, and increments the shard's *epoch* (kept in the file ``epoch`` beside
  the store). A global id carries the epoch of the shard that sampled it, and priority updates of an
  older epoch are dropped: after a rollback the same step may be another transition.
- **Envs.** Each writer key gets its own envs of the shard's store (``register``), recorded in the file
  ``envs.json`` (replaced atomically), so a writer that reconnects with its key continues its envs.
- **Draws beside adds.** ``add`` only queues its send; the shard's write thread writes the queued sends,
  oldest first, one store call per send. Every other call runs on the actor's own thread, in the order
  Ray delivers it, and takes the store in turn with the write thread (``StoreTurns``): a draw waits for at
  most the one send being written, never for the sends queued behind it.
- **Rate limiting.** Sends that the shard's ``RateLimit`` does not allow yet wait, in order, in the
  shard's queue and are written as sampling makes room. ``add`` answers with the sends its writer should
  wait for (all queued ones while the limit holds the oldest back, or those beyond ``BACKLOG_SENDS``), so
  that the writer holds back while that is not 0.
- **Limiter counts across restarts.** The limiter's *inserts* are the store's ``transitions_added``
  (rolled back with it to the last commit), and its *samples* are written to the file ``limiter.json``
  beside the store each time the shard commits (the shard commits itself, every ``commit_interval_s``
  and on ``flush``): a restarted shard resumes within one commit interval's samples of where its
  limiter stood, instead of holding its writers back until the learner has drawn everything again.
- **Initial priorities.** A send may carry a priority per step (computed by the actor, as Ape-X does):
  its steps get them in the same call that writes them, before any sample can see them.
"""

from __future__ import annotations

import functools
import json
import math
import os
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np
import numpy.typing as npt

from mmreplay import EncodedBatch, EncodedFrames, EncodedSequenceBatch, ReplayStore, StoreNotFoundError
from mmreplay.ray.rate_limit import RateLimit
from mmreplay.ray.store_turns import StoreTurns
from mmreplay.sampling.samplers import PrioritizedSampler, sampler_from_config

BACKLOG_SENDS = 64  # sends queued beyond this many: their writers hold back until the write thread catches up
_SETTLE_POLL_S = 0.01  # how often ``flush`` and ``queued`` look again while the write thread writes
Method = TypeVar("Method", bound=Callable[..., Any])


def in_turn(method: Method) -> Method:
    """Run a shard method holding the store in its turn (``StoreTurns.call``): after the write under way."""

    @functools.wraps(method)
    def held(self: ReplayShard, *args: Any, **kwargs: Any) -> Any:
        with self.turns.call():
            return method(self, *args, **kwargs)

    return held  # type: ignore[return-value]


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
    priority: npt.NDArray[np.float64] | None = None  # each step's initial priority (None: the sampler's default)
    key: str = ""  # the writer's key: a send the store refuses is reported to that writer's next call

    def __len__(self) -> int:
        return len(self.obs)

    def steps(self, start: int, stop: int) -> Send:
        """Steps ``[start, stop)`` of this send (the same frames)."""
        return Send(self.env_index, self.frames, self.obs[start:stop], self.action[start:stop],
                    self.reward[start:stop], self.next_obs[start:stop], self.terminated[start:stop],
                    self.truncated[start:stop], None if self.priority is None else self.priority[start:stop],
                    self.key)


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
        self.turns = StoreTurns()
        self.write_errors: dict[str, Exception] = {}  # writer key: the error its refused send raised
        self.wake = threading.Condition()  # the write thread waits on it for a send or room under the limit
        self.poked = False
        self.stopping = False
        self.settled = threading.Condition()  # notified by the write thread after each write
        self.write_thread = threading.Thread(target=self._write_loop, name=f"mmreplay-shard-{shard}-writes", daemon=True)
        self.write_thread.start()

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

    @in_turn
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
        """Queue a send for the write thread (it writes the steps the rate limit allows, in order). Returns
        how many sends its writer should wait for (``waiting``).

        Raises:
            TypeError: the send carries priorities and this shard's store samples uniformly.
            Exception: the error the store raised for an earlier send of this writer (that send is dropped).
        """
        self._raise_write_error(send.key)
        if send.priority is not None and not self.prioritized:
            raise TypeError("writer.add(priority=) needs a replay created with sampler=PrioritizedSampler(...); "
                            f"shard {self.shard} samples uniformly")
        self.queue.append(send)  # deque: appended here while the write thread takes from the other end
        self._poke()
        return self._waiting()

    def waiting(self, key: str = "") -> int:
        """How many sends a writer should wait for now: every queued one while the rate limit holds the
        oldest back, else those beyond ``BACKLOG_SENDS``; 0 when it may send.

        Raises:
            Exception: the error the store raised for an earlier send of writer ``key``.
        """
        self._raise_write_error(key)
        return self._waiting()

    def _waiting(self) -> int:
        queued = len(self.queue)
        try:
            oldest = self.queue[0]
        except IndexError:  # the write thread took the last one meanwhile
            return 0
        if self.limit is not None and self._insertable(len(oldest)) == 0:
            return queued
        return max(0, queued - BACKLOG_SENDS)

    def _raise_write_error(self, key: str) -> None:
        error = self.write_errors.pop(key, None)
        if error is not None:
            raise error

    def _poke(self) -> None:
        """Wake the write thread: a send was queued, or a draw made room under the rate limit."""
        with self.wake:
            self.poked = True
            self.wake.notify()

    def _write_loop(self) -> None:
        """The write thread: write the oldest writable send, one at a time, in turns with the calls; wait
        for a poke when nothing is writable; end once ``stopping`` and nothing is writable."""
        while True:
            with self.turns.write():
                wrote = self._write_next()
            if wrote:
                with self.settled:
                    self.settled.notify_all()
                continue
            with self.wake:
                if self.stopping:
                    return
                self.wake.wait_for(lambda: self.poked or self.stopping, timeout=1.0)
                self.poked = False

    def _write_next(self) -> bool:
        """Write the oldest queued send, or its first steps the rate limit allows (one store call); False
        when there is none or the limit allows none of it."""
        if not self.queue:
            return False
        send = self.queue[0]
        allowed = len(send) if self.limit is None else self._insertable(len(send))
        if allowed == 0:
            return False
        part = send if allowed == len(send) else send.steps(0, allowed)
        try:
            first = self.store.transitions_added
            self.store.add_encoded(part.frames, part.obs, part.action, part.reward, part.next_obs,
                                   part.terminated, part.truncated, env_index=part.env_index)
            if part.priority is not None:  # one env's steps: consecutive, from the store's count before
                self.store.update_priorities(np.arange(first, first + allowed, dtype=np.int64), part.priority)
        except Exception as error:  # noqa: BLE001 - the writer's next call raises it
            self.write_errors[send.key] = error
            self.queue.popleft()
            self.inserts = self.store.transitions_added  # add_encoded keeps the steps before a bad one
            return True
        self.inserts += allowed
        self.last_insert = time.monotonic()
        if allowed == len(send):
            self.queue.popleft()
        else:
            self.queue[0] = send.steps(allowed, len(send))
        self._commit_if_due()
        return True

    def _writable(self) -> bool:
        """Whether the write thread has a send it may write now."""
        return bool(self.queue) and (self.limit is None or self._insertable(len(self.queue[0])) > 0)

    def _settle(self, timeout_s: float | None = None) -> None:
        """Wait until the write thread has written every send it may write now (at most ``timeout_s``)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.write_thread.is_alive():
            with self.turns.call():
                if not self._writable():
                    return
            if deadline is not None and time.monotonic() > deadline:
                return
            with self.settled:
                self.settled.wait(_SETTLE_POLL_S)

    def _insertable(self, count: int) -> int:
        """How many of ``count`` steps the rate limit lets in now."""
        assert self.limit is not None
        return self.limit.insertable(count, inserts=self.inserts, samples=self.samples)

    def flush(self, key: str = "") -> bool:
        """Once the write thread has written what the rate limit allows, commit it; False (nothing
        committed) while sends wait in the queue.

        Raises:
            Exception: the error the store raised for an earlier send of writer ``key``.
        """
        self._settle()
        self._raise_write_error(key)
        with self.turns.call():
            if self.queue:
                return False
            self._commit()
            return True

    def queued(self) -> int:
        """How many sends wait in the queue, once the write thread has written what the limit allows."""
        self._settle()
        return len(self.queue)

    # -- sampling ------------------------------------------------------------------------------

    @in_turn
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
            "idle_s": time.monotonic() - self.last_insert, "reopened": self.reopened, **self.where,
        }

    @in_turn
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

    @in_turn
    def can_sample(self, count: int) -> bool:
        if count == 0:
            return True
        if self.limit is None:
            return len(self.store) > 0
        return self.limit.can_sample(count, inserts=self.inserts, samples=self.samples, size=len(self.store))

    @in_turn
    def sample(
        self, count: int, seed: int, *, beta: float, n_step: int, gamma: float
    ) -> tuple[EncodedBatch | None, dict[str, Any]]:
        """``count`` transitions drawn by the store's sampler, encoded (None when the rate limit does not
        allow it yet), with the shard's ``info`` after the draw."""
        if not self.can_sample(count):
            return None, {**self.info(), "held_back": self.held_back(count)}
        batch = self.store.sample_encoded(count, np.random.default_rng(seed), beta=beta, n_step=n_step, gamma=gamma)
        self.samples += count
        if self.limit is not None:
            self._poke()  # room under the limit for queued sends
        self._commit_if_due()
        return batch, self.info()

    @in_turn
    def sample_sequences(
        self, count: int, seed: int, *, length: int, beta: float
    ) -> tuple[EncodedSequenceBatch | None, dict[str, Any]]:
        """``count`` windows of ``length`` (``ReplayStore.sample_sequences_encoded``; None when the rate
        limit does not allow it yet), with ``info``."""
        if not self.can_sample(count):
            return None, {**self.info(), "held_back": self.held_back(count)}
        batch = self.store.sample_sequences_encoded(count, length, np.random.default_rng(seed), beta=beta)
        self.samples += count
        if self.limit is not None:
            self._poke()  # room under the limit for queued sends
        self._commit_if_due()
        return batch, self.info()

    @in_turn
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
        """Let the write thread write what the limit allows and end, then commit (with the limiter's
        counts) and close the store; again, nothing."""
        with self.wake:
            self.stopping = True
            self.wake.notify()
        self.write_thread.join()
        with self.turns.call():
            if self.store.closed:
                return
            self._commit()
            self.store.close()


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
