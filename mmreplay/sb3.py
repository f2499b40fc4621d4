"""A Stable-Baselines3 ``ReplayBuffer`` backed by a ``ReplayStore``: the same constructor, ``add`` and
``sample``, with each frame kept once, lz4-compressed, on disk.

    from mmreplay.sb3 import MmreplayBuffer
    model = DQN("CnnPolicy", VecFrameStack(env, n_stack=4),
                replay_buffer_class=MmreplayBuffer, replay_buffer_kwargs=dict(path="dqn.mmr"))

Vocabulary bridge. SB3 says *done* where mmreplay says terminated or truncated: a done env whose
``info["TimeLimit.truncated"]`` is true was truncated, any other done env terminated. Both flags are
stored as they happened; ``handle_timeout_termination`` only decides what ``sample`` returns as
``dones`` (SB3's rule: terminated only when True, terminated or truncated when False). SB3's
``buffer_size`` is the capacity in transitions, kept as ``buffer_size // n_envs`` rows of ``n_envs``.

Observations are channel-first frame stacks, as SB3 gives them after ``VecFrameStack`` and
``VecTransposeImage``: ``(n_stack * c, h, w)`` is ``n_stack`` frames of ``(c, h, w)`` (of ``(h, w)``
when c is 1). Stacks are stored as given, so ``VecFrameStack``'s zero padding at an episode's start
comes back exactly. Stable-Baselines3 and torch are imported by this module only.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import BaseBuffer, ReplayBuffer
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from stable_baselines3.common.vec_env import VecNormalize

from mmreplay.batch import Batch
from mmreplay.store import ReplayStore


class MmreplayBuffer(ReplayBuffer):
    """SB3's ``ReplayBuffer`` interface over a ``ReplayStore`` created at ``path``.

    A *position* is SB3's row index (``0 <= pos < buffer_size``): one row holds one transition of
    each of ``n_envs`` envs. Row r's transition of env e is the store's step ``r * n_envs + e``, so
    ``sample`` draws positions and envs with numpy's global generator exactly as SB3 does (seeded by
    ``set_random_seed``) and reads those steps from the store.

    ``stack_size`` is the number of frames per observation along its first axis; by default the
    first axis of a channel-first image (each channel one frame, as with grayscale
    ``VecFrameStack``), else 1 (the whole observation is one frame). For RGB frames stacked by
    ``VecFrameStack(n_stack=n)`` pass ``stack_size=n``.

    ``optimize_memory_usage`` is accepted for SB3's signature and ignored: frames are always
    stored once, and next observations stay correct at truncations.
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        path: str | os.PathLike[str],
        stack_size: int | None = None,
    ) -> None:
        if isinstance(n_envs, bool) or not isinstance(n_envs, int) or n_envs < 1:
            raise ValueError(f"n_envs must be a positive int; got {n_envs!r}")
        frame_shape, stack_size = _parse_observation_space(observation_space, stack_size)
        action_dtype = np.dtype(self._maybe_cast_dtype(action_space.dtype))
        # SB3's ReplayBuffer.__init__ would allocate its arrays: only the base class's attributes.
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self.buffer_size = max(buffer_size // n_envs, 1)
        self.optimize_memory_usage = False
        self.handle_timeout_termination = handle_timeout_termination
        self.store = ReplayStore.create(
            path,
            frame_shape=frame_shape,
            capacity=self.buffer_size * n_envs,
            stack_size=stack_size,
            num_envs=n_envs,
            action_shape=(self.action_dim,),
            action_dtype=action_dtype,
        )
        # One obs as the store sees it: (stack_size, *frame_shape); with n_envs > 1 an env axis first.
        self._store_obs_shape = (stack_size, *frame_shape) if n_envs == 1 else (n_envs, stack_size, *frame_shape)

    def add(
        self,
        obs: npt.NDArray[Any],
        next_obs: npt.NDArray[Any],
        action: npt.NDArray[Any],
        reward: npt.NDArray[Any],
        done: npt.NDArray[Any],
        infos: Sequence[Mapping[str, Any]] | Mapping[str, Any],
    ) -> None:
        """Record one row: a transition of each env. ``next_obs`` is the true next observation (SB3
        puts ``infos[i]["terminal_observation"]`` there for done envs)."""
        done = np.asarray(done).reshape(self.n_envs).astype(bool)
        truncated = done & self._timeouts(infos)
        one_env = self.n_envs == 1
        self.store.add(
            np.asarray(obs).reshape(self._store_obs_shape),
            np.asarray(action).reshape((self.n_envs, self.action_dim))[0 if one_env else slice(None)],
            np.asarray(reward, dtype=np.float32).reshape(self.n_envs)[0 if one_env else slice(None)],
            np.asarray(next_obs).reshape(self._store_obs_shape),
            (done & ~truncated)[0 if one_env else slice(None)],
            truncated[0 if one_env else slice(None)],
        )
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True
            self.pos = 0

    def _timeouts(self, infos: Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> npt.NDArray[np.bool_]:
        """Which envs SB3's ``TimeLimit.truncated`` marks. Gymnasium's dict of arrays (CleanRL passes
        it with ``handle_timeout_termination=False``) carries no such key: no timeouts."""
        if isinstance(infos, Mapping):
            if self.handle_timeout_termination:
                raise TypeError(
                    "infos must be a list of one dict per env (SB3's VecEnv infos) when "
                    "handle_timeout_termination=True; got a dict"
                )
            return np.zeros(self.n_envs, dtype=bool)
        if len(infos) != self.n_envs:
            raise ValueError(f"infos has {len(infos)} entries; expected {self.n_envs} for n_envs={self.n_envs}")
        return np.array([bool(info.get("TimeLimit.truncated", False)) for info in infos], dtype=bool)

    def sample(self, batch_size: int, env: VecNormalize | None = None) -> ReplayBufferSamples:
        """``batch_size`` transitions drawn uniformly with replacement, as SB3 draws them."""
        if self.size() == 0:
            raise ValueError("cannot sample from an empty buffer: add transitions first")
        return super().sample(batch_size, env=env)

    def _get_samples(self, batch_inds: npt.NDArray[np.integer], env: VecNormalize | None = None) -> ReplayBufferSamples:
        env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))
        return self.samples_at(batch_inds, env_indices, env=env)

    def samples_at(
        self,
        positions: npt.ArrayLike,
        env_indices: npt.ArrayLike,
        *,
        env: VecNormalize | None = None,
    ) -> ReplayBufferSamples:
        """The transitions at these positions and envs, as SB3's ``ReplayBuffer`` would return them
        from ``observations[positions, env_indices]`` and its other arrays."""
        return self.to_samples(self.store.read(self.steps_at(positions, env_indices)), env=env)

    def steps_at(self, positions: npt.ArrayLike, env_indices: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The store's steps of the transitions at these positions (SB3 row indices) and envs."""
        position_array = np.asarray(positions, dtype=np.int64)
        env_array = np.asarray(env_indices, dtype=np.int64)
        rows_added = self.store.transitions_added // self.n_envs
        if self.full:
            # The newest ``buffer_size`` rows; row r sits at position r % buffer_size.
            rows = rows_added - self.buffer_size + (position_array - rows_added) % self.buffer_size
        else:
            rows = position_array
        return rows * self.n_envs + env_array

    def to_samples(self, batch: Batch, env: VecNormalize | None = None) -> ReplayBufferSamples:
        """A store batch as SB3's ``ReplayBufferSamples`` on this buffer's device: observations in
        SB3's shape, actions (B, action_dim), dones and rewards (B, 1) float32."""
        size = len(batch)
        terminal = batch.terminated if self.handle_timeout_termination else batch.terminated | batch.truncated
        data = (
            self._normalize_obs(batch.obs.reshape(size, *self.obs_shape), env),
            batch.action.reshape(size, self.action_dim),
            self._normalize_obs(batch.next_obs.reshape(size, *self.obs_shape), env),
            terminal.astype(np.float32).reshape(-1, 1),
            self._normalize_reward(batch.reward.reshape(-1, 1), env),
        )
        # The batch's arrays are fresh: no copy on the CPU (obs and next_obs share frames: read only).
        # _normalize_obs is typed to return a dict too (for dict observation spaces, which this buffer refuses).
        return ReplayBufferSamples(*(self.to_torch(array, copy=False) for array in data))  # type: ignore[arg-type]

    def reset(self) -> None:
        raise NotImplementedError("an MmreplayBuffer cannot be emptied; create a new one at another path")

    def close(self) -> None:
        """Commit and close the store (its directory stays; ``ReplayStore.open`` reads it)."""
        self.store.close()

    def __getstate__(self) -> dict[str, Any]:
        """Pickling (SB3's ``save_replay_buffer``) commits the store and keeps only its path."""
        self.store.flush()
        state = self.__dict__.copy()
        state["store"] = str(self.store.path)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling reopens the store for appending (the writer that saved it must be closed)."""
        self.__dict__.update(state)
        self.store = ReplayStore.open(state["store"], "r+")


def _parse_observation_space(space: spaces.Space[Any], stack_size: int | None) -> tuple[tuple[int, ...], int]:
    """(frame_shape, stack_size) of a uint8 Box observation space."""
    if not isinstance(space, spaces.Box):
        raise TypeError(f"observation_space must be a gymnasium Box of images; got {space}")
    if space.dtype != np.uint8:
        raise TypeError(f"observation_space must have dtype uint8; got {space.dtype}")
    shape = tuple(space.shape)
    if stack_size is None:
        channel_first = len(shape) == 3 and shape[0] < min(shape[1:])
        stack_size = shape[0] if channel_first else 1
    if isinstance(stack_size, bool) or not isinstance(stack_size, int) or stack_size < 1:
        raise ValueError(f"stack_size must be a positive int; got {stack_size!r}")
    if stack_size == 1:
        return shape, 1
    if not shape or shape[0] % stack_size:
        raise ValueError(
            f"stack_size={stack_size} must divide the observation's first axis; observation_space has shape {shape}"
        )
    channels = shape[0] // stack_size
    frame_shape = (channels, *shape[1:]) if channels > 1 else shape[1:]
    if math.prod(frame_shape) == 0 or not frame_shape:
        raise ValueError(f"observation_space has shape {shape}; cannot split it into {stack_size} frames")
    return frame_shape, stack_size
