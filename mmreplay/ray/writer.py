"""The acting side: ``ShardWriter`` sends one acting process's env steps to its shard, compressed.

A writer is sticky: its key picks one shard for good, so an env's episode never spans shards (stacks,
n-step windows and sequences stay within one store). It compresses each new frame once, with the
store's own codec (``mmreplay.encode_frames``: the bytes the shard writes as they come), keeps up to
``steps_per_send`` steps per env before sending them in one call, and keeps at most ``max_in_flight``
sends unanswered: the next send waits for the oldest answer. While the shard's rate limiter holds its
sends back, the writer waits before sending more. If the shard dies, Ray's error comes out of the
``add`` or ``flush`` that waits for a lost send; the restarted shard holds what was flushed before, and
the writer's next steps start a new episode there (each send carries its obs stacks).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import ray

from mmreplay import encode_frames
from mmreplay.ray.shard import Send

_WAIT_S = 0.002  # first pause of a writer held back by its shard's rate limiter (doubling up to 0.1 s)


@dataclass
class _Pending:
    """One env's steps not sent yet: its distinct frames (pixels) and each step's frame indices."""

    frames: list[npt.NDArray[np.uint8]] = field(default_factory=list)
    obs: list[list[int]] = field(default_factory=list)
    next_obs: list[list[int]] = field(default_factory=list)
    columns: list[tuple[Any, ...]] = field(default_factory=list)
    last: tuple[bytes, list[int]] | None = None  # the previous step's next_obs: pixels and indices

    def index(self, frames: npt.NDArray[np.uint8]) -> list[int]:
        """Keep a copy of these frames (the caller may reuse its arrays before the send, as a vector
        env that writes its observations in place does); their indices among the kept frames."""
        first = len(self.frames)
        self.frames.extend(np.array(frames, np.uint8))
        return list(range(first, first + len(frames)))


class ShardWriter:
    """Adds one acting process's transitions to its shard; ``ShardedReplay.writer(key)`` makes one.

    Args:
        shard: the shard's actor handle.
        shard_index: the shard's index.
        first_env: the first of the shard store's envs this writer owns.
        num_envs: the envs it writes.
        stack_size: the replay's frames per obs.
        frame_shape: the replay's frame shape.
        steps_per_send: steps buffered per env before they are sent.
        max_in_flight: sends not yet acknowledged before ``add`` waits.
    """

    def __init__(
        self,
        shard: Any,
        *,
        shard_index: int,
        first_env: int,
        num_envs: int,
        stack_size: int,
        frame_shape: tuple[int, ...],
        steps_per_send: int,
        max_in_flight: int,
    ) -> None:
        self._shard = shard
        self.shard_index = shard_index
        self.first_env = first_env
        self.num_envs = num_envs
        self._stack_size = stack_size
        self._frame_shape = frame_shape
        self._steps_per_send = steps_per_send
        self._max_in_flight = max_in_flight
        self._pending = [_Pending() for _ in range(num_envs)]
        self._in_flight: deque[Any] = deque()
        self._held_back = False
        self.bytes_sent = 0

    def add(
        self,
        obs: npt.ArrayLike,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        next_obs: npt.ArrayLike,
        terminated: npt.ArrayLike,
        truncated: npt.ArrayLike,
        env_mask: npt.ArrayLike | None = None,
    ) -> None:
        """Record one step of each env, as ``ReplayStore.add`` takes it; the shard checks it by ``add``'s rules.

        Args:
            obs: frames or stacks, with a leading env axis when ``num_envs > 1``.
            action: as in ``ReplayStore.add``.
            reward: as in ``ReplayStore.add``.
            next_obs: as in ``ReplayStore.add``.
            terminated: as in ``ReplayStore.add``.
            truncated: as in ``ReplayStore.add``.
            env_mask: as in ``ReplayStore.add``: only the envs marked True are recorded.

        Raises:
            ValueError: ``obs`` is not frames or stacks of the replay's frame shape for ``num_envs``.
        """
        obs_a, next_a = np.asarray(obs, np.uint8), np.asarray(next_obs, np.uint8)
        frame_dims = len(self._frame_shape)
        if self.num_envs == 1:  # the common case, without the env axis: no per-step arrays to build
            if obs_a.shape[-frame_dims:] != self._frame_shape or next_a.shape[-frame_dims:] != self._frame_shape:
                raise ValueError(
                    f"obs has shape {np.shape(obs)}; expected frames or stacks of {self._frame_shape} for 1 env"
                )
            if env_mask is None or bool(np.asarray(env_mask).reshape(-1)[0]):
                self._add_step(0, obs_a, next_a, (action, reward, terminated, truncated))
            return
        columns = [np.asarray(value) for value in (action, reward, terminated, truncated)]
        if obs_a.shape[0] != self.num_envs or obs_a.shape[-frame_dims:] != self._frame_shape:
            raise ValueError(
                f"obs has shape {np.shape(obs)}; expected frames or stacks of {self._frame_shape} "
                f"for {self.num_envs} envs"
            )
        envs = range(self.num_envs) if env_mask is None else np.flatnonzero(np.asarray(env_mask, bool).reshape(self.num_envs)).tolist()
        for env in envs:
            self._add_step(env, obs_a[env], next_a[env], tuple(column[env] for column in columns))

    def _add_step(
        self, env: int, obs: npt.NDArray[np.uint8], next_obs: npt.NDArray[np.uint8], columns: tuple[Any, ...]
    ) -> None:
        pending = self._pending[env]
        stack = obs.reshape(-1, *self._frame_shape)
        following = next_obs.reshape(-1, *self._frame_shape)
        if pending.obs and len(pending.obs[-1]) != len(stack):  # frames and stacks never mix in a send
            self._send(env)
            pending = self._pending[env]
        if pending.last is not None and pending.last[0] == stack.tobytes():
            obs_index = pending.last[1]
        else:
            obs_index = pending.index(stack)
        if len(stack) > 1 and np.array_equal(following[:-1], stack[1:]):
            next_index = obs_index[1:] + pending.index(following[-1:])
        else:
            next_index = pending.index(following)
        pending.obs.append(obs_index)
        pending.next_obs.append(next_index)
        pending.columns.append(columns)
        pending.last = (following.tobytes(), next_index)
        if len(pending.obs) >= self._steps_per_send:
            self._send(env)

    def _send(self, env: int) -> None:
        pending = self._pending[env]
        if not pending.obs:
            return
        self._wait_for_room()
        action, reward, terminated, truncated = (np.array(column) for column in zip(*pending.columns))
        frames = encode_frames(np.stack(pending.frames))
        send = Send(
            env_index=self.first_env + env, frames=frames, obs=np.array(pending.obs, np.int64),
            action=action, reward=reward.astype(np.float32), next_obs=np.array(pending.next_obs, np.int64),
            terminated=terminated.astype(bool), truncated=truncated.astype(bool),
        )
        if send.obs.shape[1] == 1:
            send = Send(send.env_index, frames, send.obs[:, 0], action, send.reward, send.next_obs[:, 0],
                        send.terminated, send.truncated)
        self.bytes_sent += frames.nbytes + action.nbytes + reward.nbytes + 2 * send.obs.nbytes
        self._in_flight.append(self._shard.add.remote(send))
        # The next send starts afresh; the env's last next_obs is all it keeps.
        self._pending[env] = _Pending()

    def _wait_for_room(self) -> None:
        """Hold the next send while ``max_in_flight`` are unanswered or the shard's queue is not empty."""
        while len(self._in_flight) >= self._max_in_flight:
            self._held_back = ray.get(self._in_flight.popleft()) > 0
        pause = _WAIT_S
        while self._held_back:
            self._held_back = ray.get(self._shard.queued.remote()) > 0
            if self._held_back:
                time.sleep(pause)
                pause = min(2 * pause, 0.1)

    def flush(self, timeout_s: float | None = None) -> None:
        """Send every step kept back and return once the shard has committed them.

        Args:
            timeout_s: the longest wait while the shard's rate limiter holds them back (None: no limit).

        Raises:
            TimeoutError: the shard still holds sends back after ``timeout_s``.
        """
        for env in range(self.num_envs):
            self._send(env)
        while self._in_flight:
            ray.get(self._in_flight.popleft())
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pause = _WAIT_S
        while not ray.get(self._shard.flush.remote()):
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"shard {self.shard_index} still holds sends back after {timeout_s} s")
            time.sleep(pause)
            pause = min(2 * pause, 0.1)

    def __repr__(self) -> str:
        return f"<ShardWriter shard={self.shard_index} envs={self.first_env}..{self.first_env + self.num_envs - 1}>"
