"""The acting side: ``ShardWriter`` sends one acting process's env steps to its shard, compressed.

A writer is sticky: its key picks one shard for good, so an env's episode never spans shards (stacks,
n-step windows and sequences stay within one store). It compresses each new frame once, with the
store's own codec (``mmreplay.encode_frames``: the bytes the shard writes as they come), keeps up to
``steps_per_send`` steps per env before sending them in one call, and keeps at most ``max_in_flight``
sends unanswered: the next send waits for the oldest answer. While the shard's rate limiter holds its
sends back, the writer waits before sending more.

If the shard dies, the writer reconnects by itself: the ``add`` or ``flush`` that finds a send lost
waits (up to ``reconnect_timeout_s``) until Ray has restarted the shard, registers its key again (the
same envs), counts the restart in ``reconnects`` and carries on. The restarted shard holds what it had
committed before (every ``flush``, and every commit interval); the steps sent after that commit are
lost with the shard, as a crash of a local store loses what was not committed, and never sent twice.
The writer's next steps start a new episode there (each send carries its obs stacks).
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
from mmreplay.ray.shard_states import LOST

_WAIT_S = 0.002  # first pause of a writer held back by its shard's rate limiter (doubling up to 0.1 s)


@dataclass
class _Pending:
    """One env's steps not sent yet: its distinct frames (pixels) and each step's frame indices."""

    frames: list[npt.NDArray[np.uint8]] = field(default_factory=list)
    obs: list[list[int]] = field(default_factory=list)
    next_obs: list[list[int]] = field(default_factory=list)
    columns: list[tuple[Any, ...]] = field(default_factory=list)
    priorities: list[float] | None = None  # each step's initial priority, when the steps came with one
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
        key: the acting process's name (its registration with the shard, again after a restart).
        prioritized: whether the replay samples by priority (``add(priority=)`` needs it; None:
            unknown, checked by the shard).
        reconnect_timeout_s: the longest wait for a restarted shard before ``add`` raises.
    """

    def __init__(
        self,
        shard: Any,
        *,
        key: str,
        shard_index: int,
        first_env: int,
        num_envs: int,
        stack_size: int,
        frame_shape: tuple[int, ...],
        steps_per_send: int,
        max_in_flight: int,
        prioritized: bool | None = None,
        reconnect_timeout_s: float = 60.0,
    ) -> None:
        self._shard = shard
        self.key = key
        self.shard_index = shard_index
        self.first_env = first_env
        self.num_envs = num_envs
        self._prioritized = prioritized  # None: not known here (the shard checks)
        self._reconnect_timeout_s = reconnect_timeout_s
        self.reconnects = 0  # how many times the shard was found restarted (the writer carried on)
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
        *,
        priority: npt.ArrayLike | None = None,
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
            priority: each env's step's initial priority (a number for one env, one per env otherwise),
                as Ape-X's actors compute it from their own TD errors; None: the sampler's default (the
                largest priority so far). The shard sets it in the call that writes the step, so no
                sample sees the step without it.

        Raises:
            TypeError: ``priority`` given for a replay that samples uniformly, or not numbers.
            ValueError: a shape that is not this writer's, or a priority that is negative or not finite
                (nothing of the call is kept).
        """
        priorities = None if priority is None else self._parse_priority(priority)
        obs_a, next_a = np.asarray(obs, np.uint8), np.asarray(next_obs, np.uint8)
        frame_dims = len(self._frame_shape)
        if self.num_envs == 1:  # the common case, without the env axis: no per-step arrays to build
            if obs_a.shape[-frame_dims:] != self._frame_shape or next_a.shape[-frame_dims:] != self._frame_shape:
                raise ValueError(
                    f"obs has shape {np.shape(obs)}; expected frames or stacks of {self._frame_shape} for 1 env"
                )
            if env_mask is None or bool(np.asarray(env_mask).reshape(-1)[0]):
                self._add_step(0, obs_a, next_a, (action, reward, terminated, truncated),
                               None if priorities is None else float(priorities[0]))
            return
        columns = [np.asarray(value) for value in (action, reward, terminated, truncated)]
        if obs_a.shape[0] != self.num_envs or obs_a.shape[-frame_dims:] != self._frame_shape:
            raise ValueError(
                f"obs has shape {np.shape(obs)}; expected frames or stacks of {self._frame_shape} "
                f"for {self.num_envs} envs"
            )
        envs = range(self.num_envs) if env_mask is None else np.flatnonzero(np.asarray(env_mask, bool).reshape(self.num_envs)).tolist()
        for env in envs:
            self._add_step(env, obs_a[env], next_a[env], tuple(column[env] for column in columns),
                           None if priorities is None else float(priorities[env]))

    def _parse_priority(self, priority: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """``add``'s ``priority``: one finite number >= 0 per env."""
        if self._prioritized is False:
            raise TypeError("priority needs a replay created with sampler=PrioritizedSampler(...); this one "
                            "samples uniformly")
        array = np.asarray(priority)
        if array.dtype.kind not in "iuf":
            raise TypeError(f"priority must be real numbers; got dtype {array.dtype}")
        expected = (() if self.num_envs == 1 else (self.num_envs,))
        if array.shape not in (expected, (self.num_envs,)):
            raise ValueError(f"priority has shape {array.shape}; expected {expected}, one per env, "
                             f"for num_envs={self.num_envs}")
        values = array.astype(np.float64).reshape(self.num_envs)
        bad = ~np.isfinite(values) | (values < 0)
        if bad.any():
            raise ValueError(f"priority must be finite and >= 0; got {float(values[bad][0])!r}")
        return values

    def _add_step(
        self, env: int, obs: npt.NDArray[np.uint8], next_obs: npt.NDArray[np.uint8], columns: tuple[Any, ...],
        priority: float | None,
    ) -> None:
        pending = self._pending[env]
        stack = obs.reshape(-1, *self._frame_shape)
        following = next_obs.reshape(-1, *self._frame_shape)
        if pending.obs and (
            len(pending.obs[-1]) != len(stack)  # frames and stacks never mix in a send
            or (pending.priorities is None) != (priority is None)  # nor steps with priorities and without
        ):
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
        if priority is not None:
            pending.priorities = (pending.priorities or []) + [priority]
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
        priorities = None if pending.priorities is None else np.array(pending.priorities, np.float64)
        obs_index, next_index = np.array(pending.obs, np.int64), np.array(pending.next_obs, np.int64)
        if obs_index.shape[1] == 1:
            obs_index, next_index = obs_index[:, 0], next_index[:, 0]
        send = Send(
            env_index=self.first_env + env, frames=frames, obs=obs_index, action=action,
            reward=reward.astype(np.float32), next_obs=next_index, terminated=terminated.astype(bool),
            truncated=truncated.astype(bool), priority=priorities,
        )
        self.bytes_sent += frames.nbytes + action.nbytes + reward.nbytes + 2 * send.obs.nbytes
        self._in_flight.append(self._shard.add.remote(send))
        # The next send starts afresh; the env's last next_obs is all it keeps.
        self._pending[env] = _Pending()

    def _answer(self, call: Any) -> Any:
        """The answer of a call to the shard; None when the shard was lost meanwhile (the writer has then
        reconnected to its restarted incarnation: ``_reconnect``)."""
        try:
            return ray.get(call)
        except LOST as error:
            self._reconnect(error)
            return None

    def _reconnect(self, error: BaseException) -> None:
        """Wait until the restarted shard answers, register this writer's key again and forget the sends
        that were in flight (lost with the shard, or written by it: never sent again).

        Raises:
            ray.exceptions.RayActorError: (``error`` itself) the shard did not answer within
                ``reconnect_timeout_s`` (it is gone for good, or Ray has not restarted it).
        """
        self._in_flight.clear()
        self._held_back = False
        deadline = time.monotonic() + self._reconnect_timeout_s
        pause = _WAIT_S
        while True:
            try:
                first_env = ray.get(self._shard.register.remote(self.key, self.num_envs),
                                    timeout=max(0.1, deadline - time.monotonic()))
                break
            except (*LOST, ray.exceptions.GetTimeoutError):
                if time.monotonic() > deadline:
                    raise error from None
                time.sleep(pause)
                pause = min(2 * pause, 0.5)
        assert first_env == self.first_env, "a shard keeps each writer key's envs across restarts (envs.json)"
        self.reconnects += 1

    def _wait_for_room(self) -> None:
        """Hold the next send while ``max_in_flight`` are unanswered or the shard's queue is not empty."""
        while len(self._in_flight) >= self._max_in_flight:
            queued = self._answer(self._in_flight.popleft())
            self._held_back = queued is not None and queued > 0
        pause = _WAIT_S
        while self._held_back:
            queued = self._answer(self._shard.queued.remote())
            self._held_back = queued is not None and queued > 0
            if self._held_back:
                time.sleep(pause)
                pause = min(2 * pause, 0.1)

    def flush(self, timeout_s: float | None = None) -> None:
        """Send every step kept back and return once the shard has committed them.

        A shard that restarted meanwhile commits what it holds since (``reconnects`` counts it): the steps
        it lost are gone.

        Args:
            timeout_s: the longest wait while the shard's rate limiter holds them back (None: no limit).

        Raises:
            TimeoutError: the shard still holds sends back after ``timeout_s``.
        """
        for env in range(self.num_envs):
            self._send(env)
        while self._in_flight:
            self._answer(self._in_flight.popleft())
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pause = _WAIT_S
        while not self._answer(self._shard.flush.remote()):
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"shard {self.shard_index} still holds sends back after {timeout_s} s")
            time.sleep(pause)
            pause = min(2 * pause, 0.1)

    def __repr__(self) -> str:
        return f"<ShardWriter shard={self.shard_index} envs={self.first_env}..{self.first_env + self.num_envs - 1}>"
