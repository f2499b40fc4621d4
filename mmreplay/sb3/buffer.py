"""A Stable-Baselines3 ``ReplayBuffer`` backed by a ``ReplayStore``: the same constructor, ``add`` and
``sample``, with each frame kept once, lz4-compressed, on disk.

    from mmreplay.sb3 import MmreplayBuffer
    model = DQN("CnnPolicy", VecFrameStack(env, n_stack=4),
                replay_buffer_class=MmreplayBuffer, replay_buffer_kwargs=dict(path="/data/dqn.mmr"))

Vocabulary bridge. SB3 says *done* where mmreplay says terminated or truncated: a done env whose
``info["TimeLimit.truncated"]`` is true was truncated, any other done env terminated. Both flags are
stored as they happened; ``handle_timeout_termination`` decides what ``sample`` returns as ``dones``
(SB3's rule: terminated only when True, terminated or truncated when False), and, when True, that an
env marked ``TimeLimit.truncated`` but not done was truncated too (SB3's buffer records that timeout
then, and its n-step windows stop there; VecEnvs never send it, a caller's own ``add`` may). SB3's
``buffer_size`` is the capacity in transitions, kept as ``buffer_size // n_envs`` rows of ``n_envs``.

The store outlives the buffer: ``DQN.load`` reopens it (SB3 builds the buffer again from the
``replay_buffer_kwargs`` saved in the zip), a pickled buffer is the store's absolute path and the
counters, and unpickling reopens it; a new training run never adopts a store left at its path
(``if_exists``). See ``MmreplayBuffer``; ``buffer_store`` maps SB3's positions onto the store,
``observations`` observation spaces onto frames, and ``views`` SB3's arrays onto the store.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import BaseBuffer, ReplayBuffer
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from stable_baselines3.common.vec_env import VecNormalize

from mmreplay.batch import Batch
from mmreplay.sb3.buffer_store import BufferStore, open_or_create
from mmreplay.sb3.observations import (
    StackingCheck,
    StackMismatch,
    StoreLayout,
    check_layout,
    frame_layout,
)
from mmreplay.sb3.transitions import parse_row
from mmreplay.sb3.views import (
    DoneFlags,
    StoredArray,
    TimeoutFlags,
    action_view,
    reward_view,
)
from mmreplay.store import ReplayStore
from mmreplay.validation import parse_number, parse_positive_int


class MmreplayBuffer(ReplayBuffer):
    """SB3's ``ReplayBuffer`` over a ``ReplayStore`` at ``path``: the same constructor, ``add`` and ``sample``.

    A *position* is SB3's row index (``0 <= pos < buffer_size``): one row holds one transition of each of
    ``n_envs`` envs, and row r's transition of env e is the store's step ``r * n_envs + e``. ``sample``
    draws positions and envs with numpy's global generator exactly as SB3 does. SB3's arrays
    (``observations``, ``dones``, ...) are lazy, read-only views of the store, zeros where no add wrote;
    ``dones[pos] = True`` (SB3's ``learn``) records a truncation by the caller. Observations, actions and
    rewards are cast as SB3's buffer casts what it stores.

    One writer appends to a store at a time: a buffer that cannot take the store's writer lock at
    construction (a deepcopy, a model loaded beside the one that trained it) reads the store's last commit
    and takes the lock at its first ``add``; buffers of one process hand it over. A pickle
    (``save_replay_buffer``, ``deepcopy``, ``CheckpointCallback``) commits the store and keeps its absolute
    path and counters; unpickling reopens it, adopting with a ``UserWarning`` the newest transitions of a
    store that has gone on since. The guide's Stable-Baselines3 page has the details.

    Args:
        buffer_size: the capacity in transitions, kept as ``buffer_size // n_envs`` rows of ``n_envs``.
        observation_space: the env's observation space, split into frames (see ``stack_size``).
        action_space: the env's action space.
        device: where sampled tensors go, as in SB3.
        n_envs: envs per row.
        optimize_memory_usage: True draws positions as SB3's memory-saving buffer does once full
            (``(randint(1, buffer_size) + pos) % buffer_size``: never the oldest row), so that a run stays
            bit-identical to SB3's and CleanRL's after the ring wraps. Frames are stored once, and next
            observations stay correct at truncations, either way.
        handle_timeout_termination: the sampled ``dones``: True, terminated only; False, terminated or
            truncated. A done env whose ``info["TimeLimit.truncated"]`` is true was truncated, any other
            terminated; with True, an env so marked but not done was truncated too, as SB3 records it.
        path: the store's directory, made absolute now; created if absent (a relative path then warns:
            ``DQN.load`` from another directory would create a new store).
        if_exists: what a new buffer does with a store already at ``path``: ``"error"`` refuses it (a
            re-run would otherwise train on the earlier run's data), ``"replace"`` deletes it and starts
            empty, ``"reopen"`` goes on with its transitions. A buffer that SB3's ``load`` builds always
            reopens.
        stack_size: frames per observation along its first axis. None infers it: ``(c, h, w)`` is
            ``c // 3`` RGB frames when 3 divides ``c``, else ``c`` grayscale frames; ``(n, h, w, c)`` is
            ``n`` frames; any other shape one frame. An inferred split is checked against the first adds
            (next_obs must be obs shifted by one frame) and, while the store is empty, replaced by the
            largest stack the data fit.
        n_steps: n-step returns as SB3's ``NStepReplayBuffer`` gives them: ``rewards`` sums ``gamma**k``
            times the env's k-th reward over up to ``n_steps`` steps, stopping at (and including) the
            first that ended its episode, at the env's newest, or before one that starts another
            episode; next observation and ``dones`` are the last step's and ``discounts`` is ``gamma**m``
            for its m steps. With 1, samples are ``ReplayBuffer``'s (``discounts`` None).
        gamma: the discount of n-step returns, 0 to 1.

    Raises:
        TypeError: the observation space is not a numeric ``Box``, ``Discrete``, ``MultiDiscrete`` or
            ``MultiBinary``, or ``n_steps`` or ``gamma`` is not a number.
        ValueError: a number is out of range, ``stack_size`` does not divide the observation's first
            axis, ``if_exists`` is not one of the three, or a reopened store's layout is not the one these
            arguments make (the message names the field).
        StoreExistsError: a store is at ``path`` and ``if_exists="error"``; the message says what was
            found and the choices.
        FileExistsError: ``path`` holds something that is not a store this buffer can use.
        StoreLockedError: ``if_exists="replace"`` while another buffer writes the store.
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
        if_exists: str = "error",
        stack_size: int | None = None,
        n_steps: int = 1,
        gamma: float = 0.99,
    ) -> None:
        if isinstance(n_envs, bool) or not isinstance(n_envs, int) or n_envs < 1:
            raise ValueError(f"n_envs must be a positive int; got {n_envs!r}")
        frames = frame_layout(observation_space, stack_size)
        self.n_steps = parse_positive_int(n_steps, "n_steps")
        self.gamma = parse_number(gamma, "gamma", low=0.0, high=1.0)
        action_dtype = np.dtype(self._maybe_cast_dtype(action_space.dtype))
        # SB3's ReplayBuffer.__init__ would allocate its arrays: only the base class's attributes.
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self.buffer_size = max(buffer_size // n_envs, 1)
        self.optimize_memory_usage = bool(optimize_memory_usage)
        self.handle_timeout_termination = handle_timeout_termination
        self.path = Path(os.path.abspath(path))
        self._layout = StoreLayout(
            frame_shape=frames.frame_shape,
            stack_size=frames.stack_size,
            num_envs=n_envs,
            action_shape=(self.action_dim,),
            action_dtype=action_dtype,
            capacity=self.buffer_size * n_envs,
            frame_dtype=np.dtype(observation_space.dtype).newbyteorder("<"),
        )
        self._stacking = StackingCheck(frames) if frames.inferred and frames.stack_size > 1 else None
        self._inferred = frames.inferred
        warn_if_relative(path, self.path, type(self).__name__)
        store, reopened = open_or_create(self.path, self._layout.create, if_exists=if_exists, owner=type(self).__name__)
        if reopened:
            try:
                self._layout = check_layout(store, self._layout, observation_space=observation_space, inferred=self._inferred)
            except BaseException:
                store.close()
                raise
            if (store.stack_size, store.frame_shape) != (frames.stack_size, frames.frame_shape):
                self._stacking = None  # the store's split was chosen from data, or by hand
        self._rows = BufferStore(self.path, store, buffer_size=self.buffer_size, n_envs=n_envs, owner=type(self).__name__)
        self._sync()

    # -- the store behind the buffer ---------------------------------------------------------------

    @property
    def store(self) -> ReplayStore:
        """The store this buffer reads (and, once it adds, writes).

        Returns:
            The open store.
        """
        return self._rows.store

    def _sync(self) -> None:
        """SB3's ``pos`` and ``full`` from the transitions the buffer holds."""
        self.pos, self.full = self._rows.pos, self._rows.full

    def flush(self) -> None:
        """Commit the transitions added so far: a buffer reading the store (``DQN.load`` beside this
        model, a deepcopy) sees the store's last commit."""
        self._rows.flush()

    def close(self) -> None:
        """Commit and close the store (its directory stays; ``ReplayStore.open`` reads it)."""
        self._rows.close()

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling reopens the store (``BufferStore``) and checks its layout against the buffer's. A
        pickle of an earlier mmreplay (the counts in the buffer itself) is read too."""
        if "_rows" not in state:
            state = _earlier_pickle(state)
        self.__dict__.update(state)
        try:
            self._layout = check_layout(self.store, self._layout, observation_space=self.observation_space, inferred=self._inferred)
        except BaseException:
            self.close()
            raise
        self._sync()

    # -- adding ------------------------------------------------------------------------------------

    def add(
        self,
        obs: npt.NDArray[Any],
        next_obs: npt.NDArray[Any],
        action: npt.NDArray[Any],
        reward: npt.NDArray[Any],
        done: npt.NDArray[Any],
        infos: Sequence[Mapping[str, Any]] | Mapping[str, Any],
    ) -> None:
        """Record one row: a transition of each env.

        Args:
            obs: (n_envs, *obs_shape), or obs_shape alone with one env.
            next_obs: the true next observation, shaped as ``obs`` (SB3 puts
                ``infos[i]["terminal_observation"]`` there for done envs).
            action: (n_envs, ...) actions.
            reward: (n_envs,) rewards.
            done: (n_envs,) SB3's done flags: terminated, or truncated where
                ``infos[i]["TimeLimit.truncated"]`` is true.
            infos: one dict per env. An env that is not done but whose ``TimeLimit.truncated`` is true
                was truncated too when ``handle_timeout_termination`` is True: SB3's buffer records its
                timeout, and its n-step windows stop there.

        Raises:
            ValueError: an argument's shape or values do not fit ``n_envs`` and the spaces, or an
                inferred stack is refuted by the data once the store holds transitions (the message says
                which ``stack_size`` values the data fit).
            StoreLockedError: another process, or a ``ReplayStore`` opened with ``"r+"`` by hand, holds
                the store's writer lock.
        """
        store = self._rows.writer()
        row = parse_row(
            action, reward, done, infos, n_envs=self.n_envs, action_dim=self.action_dim,
            action_dtype=self._layout.action_dtype, handle_timeout_termination=self.handle_timeout_termination,
        )
        obs_array, next_obs_array = self._parse_obs(obs, "obs"), self._parse_obs(next_obs, "next_obs")
        going_on = ~row.done
        if self._stacking is not None and going_on.any():
            # A done env's next_obs may be anything (CleanRL passes the reset obs at termination).
            store = self._check_stacking(obs_array.reshape(self.n_envs, -1)[going_on], next_obs_array.reshape(self.n_envs, -1)[going_on])
        obs_shape = (self.n_envs, self._layout.stack_size, *self._layout.frame_shape)
        obs_array, next_obs_array = obs_array.reshape(obs_shape), next_obs_array.reshape(obs_shape)
        first = 0 if self.n_envs == 1 else slice(None)
        store.add(
            obs_array[first], row.action[first], row.reward[first], next_obs_array[first], row.terminated[first], row.truncated[first]
        )
        self._rows.count(self._rows.transitions + self.n_envs)
        self._sync()

    def _check_stacking(self, obs: npt.NDArray[Any], next_obs: npt.NDArray[Any]) -> ReplayStore:
        """Check the inferred stack against the observations of this add's envs that go on (one row
        each; see ``StackingCheck``). While the store is empty,
        a refuted split is replaced: the store is made again with the largest stack the data fit
        (SB3's ``FakeImageEnv`` has 2 channel-first channels that are no frame stack)."""
        assert self._stacking is not None
        shape = (len(obs), self._layout.stack_size, *self._layout.frame_shape)
        try:
            if self._stacking.check(obs.reshape(shape), next_obs.reshape(shape)):
                self._stacking = None
        except StackMismatch as error:
            if self._rows.transitions or self.store.transitions_added:
                raise
            frames = frame_layout(self.observation_space, error.fits[0])
            self._layout = self._layout.with_frames(frames)
            self._rows.recreate(self._layout.create)
            self._stacking = StackingCheck(frames) if frames.stack_size > 1 else None
            return self._check_stacking(obs, next_obs) if self._stacking is not None else self.store
        return self.store

    def _parse_obs(self, obs: npt.ArrayLike, name: str) -> npt.NDArray[Any]:
        """``obs`` as SB3 gives it: (n_envs, *obs_shape), or obs_shape alone with one env; cast to the
        observation space's dtype as SB3's buffer casts what it stores (``observations[pos] = obs``)."""
        array = np.asarray(obs)
        if isinstance(self.observation_space, spaces.Discrete) and array.shape in ((self.n_envs,), ()):
            array = array.reshape(self.n_envs, 1)  # SB3's own buffer reshapes Discrete observations so
        if array.shape != (self.n_envs, *self.obs_shape) and (self.n_envs > 1 or array.shape != self.obs_shape):
            raise ValueError(
                f"{name} has shape {array.shape}; expected {(self.n_envs, *self.obs_shape)} "
                f"(n_envs={self.n_envs}, observation_space shape {self.obs_shape})"
            )
        return array.astype(self._layout.frame_dtype, copy=False)

    # -- SB3's arrays, as views of the store ----------------------------------------------------------

    @property
    def observations(self) -> StoredArray:  # type: ignore[override]  # SB3's is an array this buffer does not keep
        """SB3's ``observations``, read from the store.

        Returns:
            A lazy (buffer_size, n_envs, *obs_shape) view.
        """
        return StoredArray(self._rows, name="observations", item_shape=self.obs_shape, dtype=self._layout.frame_dtype,
                           take=lambda batch, steps: batch.obs)

    @property
    def next_observations(self) -> StoredArray:  # type: ignore[override]
        """SB3's ``next_observations``: the true next observation, also at truncations.

        Returns:
            A lazy (buffer_size, n_envs, *obs_shape) view.
        """
        return StoredArray(self._rows, name="next_observations", item_shape=self.obs_shape,
                           dtype=self._layout.frame_dtype, take=lambda batch, steps: batch.next_obs)

    @property
    def actions(self) -> StoredArray:  # type: ignore[override]
        """SB3's ``actions``, read from the store.

        Returns:
            A lazy (buffer_size, n_envs, action_dim) view in the stored action dtype.
        """
        return action_view(self._rows, action_dim=self.action_dim, dtype=self._layout.action_dtype)

    @property
    def rewards(self) -> StoredArray:  # type: ignore[override]
        """SB3's ``rewards``, read from the store.

        Returns:
            A lazy (buffer_size, n_envs) float32 view.
        """
        return reward_view(self._rows)

    @property
    def dones(self) -> DoneFlags:  # type: ignore[override]
        """SB3's ``dones`` array, read from the store.

        Returns:
            A lazy (buffer_size, n_envs) float32 view; writing True records a truncation by the caller.
        """
        return DoneFlags(self._rows)

    @property
    def timeouts(self) -> TimeoutFlags:  # type: ignore[override]
        """SB3's ``timeouts``, read from the store.

        Returns:
            A lazy (buffer_size, n_envs) float32 view.
        """
        return TimeoutFlags(self._rows, handle_timeout_termination=self.handle_timeout_termination)

    # -- sampling ----------------------------------------------------------------------------------

    def sample(self, batch_size: int, env: VecNormalize | None = None) -> ReplayBufferSamples:
        """Draw ``batch_size`` transitions uniformly with replacement, as SB3 draws them.

        Args:
            batch_size: how many transitions.
            env: SB3's ``VecNormalize`` to normalise observations and rewards with (None: as stored).

        Returns:
            SB3's ``ReplayBufferSamples`` on this buffer's device: observations in SB3's shape, actions
            (B, action_dim), dones and rewards (B, 1) float32.

        Raises:
            ValueError: the buffer is empty.
        """
        if self.size() == 0:
            raise ValueError("cannot sample from an empty buffer: add transitions first")
        return super().sample(batch_size, env=env)

    def _get_samples(self, batch_inds: npt.NDArray[np.integer], env: VecNormalize | None = None) -> ReplayBufferSamples:
        env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))
        if self.n_steps > 1:
            return self.n_step_samples_at(batch_inds, env_indices, env=env)
        return self.samples_at(batch_inds, env_indices, env=env)

    def samples_at(
        self,
        positions: npt.ArrayLike,
        env_indices: npt.ArrayLike,
        *,
        env: VecNormalize | None = None,
    ) -> ReplayBufferSamples:
        """The transitions at these positions and envs, as SB3's ``ReplayBuffer`` reads its arrays there.

        Args:
            positions: SB3 row indices.
            env_indices: one env per position.
            env: SB3's ``VecNormalize`` to normalise observations and rewards with (None: as stored).

        Returns:
            SB3's ``ReplayBufferSamples`` on this buffer's device: observations in SB3's shape, actions
            (B, action_dim), dones and rewards (B, 1) float32.
        """
        steps = self.steps_at(positions, env_indices)
        batch = self._rows.read(steps)
        return self._samples(batch, batch.next_obs, self._terminal(batch, steps), batch.reward.reshape(-1, 1), env=env)

    def n_step_samples_at(
        self,
        positions: npt.ArrayLike,
        env_indices: npt.ArrayLike,
        *,
        env: VecNormalize | None = None,
    ) -> ReplayBufferSamples:
        """The n-step samples of the transitions at these positions and envs, as SB3's ``NStepReplayBuffer``.

        ``n_steps`` and ``gamma`` are the buffer's (see the class docstring), the arithmetic SB3's.

        Args:
            positions: SB3 row indices.
            env_indices: one env per position.
            env: SB3's ``VecNormalize`` to normalise observations and rewards with (None: as stored).

        Returns:
            SB3's ``ReplayBufferSamples`` on this buffer's device: observations in SB3's shape, actions
            (B, action_dim), dones and rewards (B, 1) float32. Its ``discounts`` is (B, 1) ``gamma**m``.
        """
        first = self.steps_at(positions, env_indices)
        batch = self._rows.read(first)
        size, n = len(first), self.n_steps
        rewards = np.zeros((size, n), dtype=np.float32)
        rewards[:, 0] = batch.reward
        next_obs = batch.next_obs.copy()
        terminal = self._terminal(batch, first)
        steps_used = np.ones(size, dtype=np.int64)
        going_on = ~self._rows.ended(batch, first) & self._rows.held(first)
        for k in range(1, n):
            rows = np.flatnonzero(going_on & (first + k * self.n_envs < self._rows.transitions))
            if not len(rows):
                break
            steps = first[rows] + k * self.n_envs
            step_batch = self._rows.read(steps)
            # The env's next transition continues the episode only if its obs is this next_obs.
            continues = (step_batch.obs == next_obs[rows]).reshape(len(rows), -1).all(axis=1)
            step_terminal = self._terminal(step_batch, steps)[continues]
            step_ended = self._rows.ended(step_batch, steps)[continues]
            going_on[:] = False
            rows = rows[continues]
            rewards[rows, k] = step_batch.reward[continues]
            next_obs[rows] = step_batch.next_obs[continues]
            terminal[rows] = step_terminal
            steps_used[rows] = k + 1
            going_on[rows] = ~step_ended
        # SB3's arithmetic, in its order and float32, so that the sums are the same to the bit.
        mask = np.arange(n).reshape(1, -1) < steps_used[:, None]
        discounted = self._normalize_reward(rewards, env) * (self.gamma ** np.arange(n, dtype=np.float32).reshape(1, -1)) * mask
        returns = discounted.sum(axis=1, keepdims=True)
        discounts = self.gamma ** mask.sum(axis=1, keepdims=True).astype(np.float32)
        return self._samples(batch, next_obs, terminal, returns, env=env, discounts=discounts)

    def steps_at(self, positions: npt.ArrayLike, env_indices: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The store's steps of the transitions at these positions and envs.

        Args:
            positions: SB3 row indices.
            env_indices: one env per position.

        Returns:
            int64 steps, row r's transition of env e being step ``r * n_envs + e`` (once the ring is
            full, position p is the newest row at p); a position that holds no transition yet maps to a
            step the buffer does not hold.
        """
        return self._rows.steps_at(positions, env_indices)

    def _terminal(self, batch: Batch, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """SB3's sampled ``dones``: terminated only, or with ``handle_timeout_termination=False`` also
        truncated (and ended by the caller)."""
        if self.handle_timeout_termination:
            return batch.terminated.copy()
        return self._rows.ended(batch, steps)

    def to_samples(self, batch: Batch, env: VecNormalize | None = None) -> ReplayBufferSamples:
        """A store batch as SB3's ``ReplayBufferSamples`` on this buffer's device.

        Args:
            batch: a batch read from this buffer's store.
            env: SB3's ``VecNormalize`` to normalise observations and rewards with (None: as stored).

        Returns:
            SB3's ``ReplayBufferSamples`` on this buffer's device: observations in SB3's shape, actions
            (B, action_dim), dones and rewards (B, 1) float32.
        """
        return self._samples(batch, batch.next_obs, self._terminal(batch, batch.index), batch.reward.reshape(-1, 1), env=env)

    def _samples(
        self,
        batch: Batch,
        next_obs: npt.NDArray[Any],
        terminal: npt.NDArray[np.bool_],
        rewards: npt.NDArray[np.float32],
        *,
        env: VecNormalize | None,
        discounts: npt.NDArray[np.float32] | None = None,
    ) -> ReplayBufferSamples:
        size = len(batch)
        # A batch's obs and next_obs are views of one array: next_obs gets its own copy, so that an
        # in-place change of one tensor leaves the other alone (as with SB3's buffer).
        own_next_obs = next_obs.copy() if np.may_share_memory(next_obs, batch.obs) else next_obs
        data = (
            self._normalize_obs(batch.obs.reshape(size, *self.obs_shape), env),
            batch.action.reshape(size, self.action_dim),
            self._normalize_obs(own_next_obs.reshape(size, *self.obs_shape), env),
            terminal.astype(np.float32).reshape(-1, 1),
            self._normalize_reward(rewards, env),
        )
        # The arrays are fresh: no copy on the CPU. _normalize_obs is typed to return a dict too (for
        # dict observation spaces, which this buffer refuses).
        tensors = [self.to_torch(array, copy=False) for array in data]  # type: ignore[arg-type]
        if discounts is not None:
            tensors.append(self.to_torch(discounts, copy=False))
        return ReplayBufferSamples(*tensors)

    def reset(self) -> None:
        """Refuse: the buffer's store cannot be emptied through SB3's ``reset``.

        Raises:
            NotImplementedError: always; create a new buffer at another path.
        """
        raise NotImplementedError("an MmreplayBuffer cannot be emptied; create a new one at another path")


def _earlier_pickle(state: dict[str, Any]) -> dict[str, Any]:
    """The state of a buffer pickled before ``BufferStore`` (its path and counts in the buffer itself)."""
    if "_transitions" not in state:
        raise ValueError(
            "this MmreplayBuffer was pickled by an older mmreplay, without its transition count; open its "
            f"store with ReplayStore.open({str(state.get('path'))!r}), or make a new buffer with if_exists='reopen'"
        )
    rows = BufferStore.__new__(BufferStore)
    rows.__setstate__({
        "path": str(state["path"]), "buffer_size": state["buffer_size"], "n_envs": state["n_envs"],
        "owner": "MmreplayBuffer", "cut_steps": set(state.get("_cut_steps", ())), "transitions": state["_transitions"],
    })
    earlier = {key: value for key, value in state.items() if key not in ("_transitions", "_cut_steps", "store")}
    layout = StoreLayout(**vars(state["_layout"]))  # pickled before StoreLayout had fields
    return earlier | {"_rows": rows, "path": Path(state["path"]), "_layout": layout}


def warn_if_relative(given: str | os.PathLike[str], path: Path, owner: str) -> None:
    """A relative ``path`` for a store about to be created warns: a model saved with it and loaded
    from another directory would look for its store there."""
    if not Path(given).is_absolute() and not path.exists():
        warnings.warn(
            f"{owner} path {os.fspath(given)!r} is relative: the store is created at {str(path)!r}; a "
            "model saved with it and loaded from another directory would create a new empty store there. "
            "Pass an absolute path.",
            UserWarning,
            stacklevel=3,
        )
