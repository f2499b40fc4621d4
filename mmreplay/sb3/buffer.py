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

The store outlives the buffer: a buffer made at a path that holds a store reopens it (SB3 builds the
buffer again at ``DQN.load`` from the ``replay_buffer_kwargs`` saved in the zip), a pickled buffer is
the store's absolute path and the counters, and unpickling reopens it. See ``MmreplayBuffer``.
Stable-Baselines3 and torch are imported by this module only; ``mmreplay.sb3.observations`` maps
observation spaces onto frames and SB3's ``dones`` onto the store.
"""

from __future__ import annotations

import os
import shutil
import warnings
import weakref
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
from mmreplay.errors import StoreLockedError
from mmreplay.sb3.observations import DoneFlags, StackingCheck, StackMismatch, StoreLayout, check_layout, frame_layout
from mmreplay.store import ReplayStore
from mmreplay.validation import parse_number, parse_positive_int


class MmreplayBuffer(ReplayBuffer):
    """SB3's ``ReplayBuffer`` interface over a ``ReplayStore`` at ``path``.

    A *position* is SB3's row index (``0 <= pos < buffer_size``): one row holds one transition of
    each of ``n_envs`` envs. Row r's transition of env e is the store's step ``r * n_envs + e``, so
    ``sample`` draws positions and envs with numpy's global generator exactly as SB3 does (seeded by
    ``set_random_seed``) and reads those steps from the store.

    **The store at** ``path`` (made absolute against the working directory at construction). Absent:
    it is created, as SB3 would allocate an empty buffer (a relative ``path`` then warns: a
    ``DQN.load`` from another directory would create a new store, so give an absolute one). Present:
    it is reopened with the transitions it holds, for training or inference, when its layout (frame
    shape, stack size, envs, action shape and dtype, capacity) is the one these arguments make; else
    a ``ValueError`` names the field that differs. One writer appends to a store at a time: a buffer
    that cannot take the store's writer lock at construction (a deepcopy beside its original, a model
    loaded beside the one that trained it, another process writing) reads the store's last commit, and
    takes the lock at its first ``add``. Buffers of one process hand it over (the holder commits and
    reads from then on); a writer in another process, or a ``ReplayStore`` opened with ``"r+"`` by
    hand, keeps it, and that ``add`` raises ``StoreLockedError`` saying which.

    **Pickling** (``save_replay_buffer``, ``copy.deepcopy``, ``CheckpointCallback``) commits the store
    and keeps its absolute path and the counters, with the transitions added so far. Unpickling
    reopens the store as above; when the store has since gone on (an older checkpoint), the buffer
    adopts the store's newest transitions with a ``UserWarning`` (the older ones may be evicted); a
    store with fewer transitions than the pickle counts is not the one it was taken from: ``ValueError``.

    **Observations**: ``stack_size`` frames per observation along its first axis. By default it is
    inferred: ``(c, h, w)`` images (channel-first, as SB3's ``VecTransposeImage`` gives them) are
    ``c // 3`` RGB frames of ``(3, h, w)`` when 3 divides ``c`` (so an RGB image alone is one frame and
    ``VecFrameStack(n_stack=n)`` of RGB is ``n``), else ``c`` grayscale frames of ``(h, w)``
    (``VecFrameStack`` of Atari's grayscale frames); ``(n, h, w, c)`` is ``n`` frames; any other shape
    is one frame. An inferred stack is checked against the first adds of envs that go on (next_obs must
    be obs shifted by one frame): while the store is empty, a refuted split is replaced by the largest
    stack the data fit; later a ``ValueError`` says which ``stack_size`` values the data fit.

    **n-step returns**: ``n_steps``, ``gamma`` (what SB3 says to pass for a custom buffer) give SB3's
    ``NStepReplayBuffer`` samples: ``rewards`` sums ``gamma**k`` times the k-th reward of the sampled
    transition's env up to ``n_steps`` steps, stopping at (and including) the first that ended its
    episode, before the env's next transition that starts a new one, or at the newest; the next
    observation and ``dones`` are those of that last step and ``discounts`` is ``gamma**m`` for its m
    steps. With ``n_steps=1`` samples are ``ReplayBuffer``'s (``discounts`` None).

    ``optimize_memory_usage`` is accepted for SB3's signature and ignored: frames are always stored
    once, and next observations stay correct at truncations. ``dones`` is SB3's array of ended flags
    as a view of the store (see ``DoneFlags``): SB3's ``learn`` writes ``dones[pos] = True`` to end the
    newest transitions' episodes, which this buffer records as a truncation by the caller.
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
        self.optimize_memory_usage = False
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
        # Steps whose episode the caller ended by writing ``dones`` (kept outside the store's rows).
        self._cut_steps: set[int] = set()
        self._inferred = frames.inferred
        if self.path.exists():
            store = _open(self.path)
            try:
                self._layout = check_layout(store, self._layout, observation_space=observation_space, inferred=self._inferred)
            except BaseException:
                store.close()
                raise
            if (store.stack_size, store.frame_shape) != (frames.stack_size, frames.frame_shape):
                self._stacking = None  # the store's split was chosen from data, or by hand
        else:
            if not Path(path).is_absolute():
                warnings.warn(
                    f"MmreplayBuffer path {os.fspath(path)!r} is relative: the store is created at "
                    f"{str(self.path)!r}; a model saved with it and loaded from another directory would "
                    "create a new empty store there. Pass an absolute path.",
                    UserWarning,
                    stacklevel=2,
                )
            store = self._layout.create(self.path)
        self._attach(store)
        self._set_count(store.transitions_added)

    # -- the store behind the buffer ---------------------------------------------------------------

    def _attach(self, store: ReplayStore) -> None:
        """Use ``store``; it is closed (which commits) with this buffer, also when the buffer is dropped
        unclosed or the interpreter exits."""
        self.store = store
        self._finalizer = weakref.finalize(self, store.close)
        if store.mode == "r+":
            _WRITERS[str(self.path)] = self

    def _yield_writer(self) -> None:
        """Commit and hand the store's writer lock over to another buffer of this process: this one
        reads the store from now on (and takes the lock back at its next ``add``)."""
        self._finalizer()
        self._attach(ReplayStore.open(self.path, "r"))

    def _set_count(self, transitions: int) -> None:
        """Set the transitions this buffer holds (``pos`` and ``full`` follow from it)."""
        if transitions % self.n_envs:
            raise ValueError(
                f"the store at {str(self.path)!r} has {transitions} transitions, not whole rows of "
                f"n_envs={self.n_envs}: it was not written by an MmreplayBuffer with {self.n_envs} envs"
            )
        self._transitions = transitions
        rows = transitions // self.n_envs
        self.full = rows >= self.buffer_size
        self.pos = rows % self.buffer_size

    def _writer(self) -> ReplayStore:
        """The store, opened for appending if this buffer has so far only read it."""
        if self.store.mode == "r+":
            return self.store
        holder = _WRITERS.get(str(self.path))
        if holder is not None and holder is not self and not holder.store.closed and holder.store.mode == "r+":
            holder._yield_writer()
        try:
            writer = ReplayStore.open(self.path, "r+")
        except StoreLockedError as error:
            raise StoreLockedError(
                f"this MmreplayBuffer cannot add: {error}"
            ) from None
        try:
            transitions = _reconcile(writer, self._transitions)
        except BaseException:
            writer.close()
            raise
        self._finalizer()
        self._attach(writer)
        self._set_count(transitions)
        return writer

    def flush(self) -> None:
        """Commit the transitions added so far: a buffer reading the store (``DQN.load`` beside this
        model, a deepcopy) sees the store's last commit."""
        self.store.flush()

    def close(self) -> None:
        """Commit and close the store (its directory stays; ``ReplayStore.open`` reads it)."""
        self._finalizer()

    def __getstate__(self) -> dict[str, Any]:
        """Pickling commits the store and keeps its absolute path and the transitions added so far."""
        if not self.store.closed and self.store.mode == "r+":
            self.store.flush()
        state = {key: value for key, value in self.__dict__.items() if key not in ("store", "_finalizer")}
        state["path"] = str(self.path)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling reopens the store (see the class docstring for a store that has gone on since)."""
        if "_transitions" not in state:
            raise ValueError(
                "this MmreplayBuffer was pickled by an older mmreplay, without its transition count; "
                f"open its store with ReplayStore.open({state.get('store')!r}) or make a new buffer at its path"
            )
        self.__dict__.update(state)
        self.path = Path(state["path"])
        store = _open(self.path)
        try:
            self._layout = check_layout(store, self._layout, observation_space=self.observation_space, inferred=self._inferred)
            transitions = _reconcile(store, self._transitions)
        except BaseException:
            store.close()
            raise
        self._attach(store)
        self._set_count(transitions)

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
        """Record one row: a transition of each env. ``next_obs`` is the true next observation (SB3
        puts ``infos[i]["terminal_observation"]`` there for done envs). An env that is not done but whose
        ``TimeLimit.truncated`` is true was truncated too when ``handle_timeout_termination`` is True:
        SB3's buffer records its timeout, and its n-step windows stop there."""
        store = self._writer()
        done = np.asarray(done).reshape(self.n_envs).astype(bool)
        truncated = (done | self.handle_timeout_termination) & self._timeouts(infos)
        obs_array, next_obs_array = self._parse_obs(obs, "obs"), self._parse_obs(next_obs, "next_obs")
        going_on = ~done.reshape(-1)
        if self._stacking is not None and going_on.any():
            # A done env's next_obs may be anything (CleanRL passes the reset obs at termination).
            store = self._check_stacking(obs_array.reshape(self.n_envs, -1)[going_on], next_obs_array.reshape(self.n_envs, -1)[going_on])
        obs_shape = (self.n_envs, self._layout.stack_size, *self._layout.frame_shape)
        obs_array, next_obs_array = obs_array.reshape(obs_shape), next_obs_array.reshape(obs_shape)
        first = 0 if self.n_envs == 1 else slice(None)
        store.add(
            obs_array[first],
            # Cast as SB3's buffer casts when it stores (float64 actions of a float64 space to float32, GH#1145).
            np.asarray(action).reshape((self.n_envs, self.action_dim)).astype(self._layout.action_dtype)[first],
            np.asarray(reward, dtype=np.float32).reshape(self.n_envs)[first],
            next_obs_array[first],
            (done & ~truncated)[first],
            truncated[first],
        )
        self._set_count(self._transitions + self.n_envs)

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
            if self._transitions or self.store.transitions_added:
                raise
            frames = frame_layout(self.observation_space, error.fits[0])
            self._finalizer()
            shutil.rmtree(self.path)
            self._layout = self._layout.with_frames(frames)
            self._attach(self._layout.create(self.path))
            self._stacking = StackingCheck(frames) if frames.stack_size > 1 else None
            return self._check_stacking(obs, next_obs) if self._stacking is not None else self.store
        return self.store

    def _parse_obs(self, obs: npt.ArrayLike, name: str) -> npt.NDArray[Any]:
        """``obs`` as SB3 gives it: (n_envs, *obs_shape), or obs_shape alone with one env."""
        array = np.asarray(obs)
        if isinstance(self.observation_space, spaces.Discrete) and array.shape in ((self.n_envs,), ()):
            array = array.reshape(self.n_envs, 1)  # SB3's own buffer reshapes Discrete observations so
        if array.shape != (self.n_envs, *self.obs_shape) and (self.n_envs > 1 or array.shape != self.obs_shape):
            raise ValueError(
                f"{name} has shape {array.shape}; expected {(self.n_envs, *self.obs_shape)} "
                f"(n_envs={self.n_envs}, observation_space shape {self.obs_shape})"
            )
        return array

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

    # -- SB3's dones -------------------------------------------------------------------------------

    @property
    def dones(self) -> DoneFlags:  # type: ignore[override]  # SB3's is an array this buffer does not keep
        """SB3's ``dones`` array, (buffer_size, n_envs) float32, read from the store (see ``DoneFlags``)."""
        return DoneFlags(self)

    def ended_at(self, positions: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Whether each of these positions' transitions, one per env ((len, n_envs)), ended its episode
        (terminated, truncated or ended by a write to ``dones``); False at positions holding none."""
        filled = self.full | (positions < self.pos)
        ended = np.zeros((len(positions), self.n_envs), dtype=bool)
        if filled.any():
            rows = np.flatnonzero(filled)
            steps = self.steps_at(np.repeat(positions[rows], self.n_envs), np.tile(np.arange(self.n_envs), len(rows)))
            batch = self.store.read(steps)
            flags = batch.terminated | batch.truncated | self._cut(steps)
            ended[rows] = flags.reshape(len(rows), self.n_envs)
        return ended

    def end_episodes_at(self, positions: npt.NDArray[np.int64], envs: npt.NDArray[np.int64]) -> None:
        """Mark these transitions as ending their episodes (what ``dones[pos] = True`` does): samples
        treat each as truncated by the caller (its next observation is the true one)."""
        steps = self.steps_at(positions, envs)
        oldest = self._transitions - len(self.store)
        self._cut_steps = {step for step in self._cut_steps if step >= oldest} | set(steps.tolist())

    def _cut(self, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        if not self._cut_steps:
            return np.zeros(len(steps), dtype=bool)
        return np.isin(steps, np.fromiter(self._cut_steps, np.int64))

    # -- sampling ----------------------------------------------------------------------------------

    def sample(self, batch_size: int, env: VecNormalize | None = None) -> ReplayBufferSamples:
        """``batch_size`` transitions drawn uniformly with replacement, as SB3 draws them."""
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
        """The transitions at these positions and envs, as SB3's ``ReplayBuffer`` would return them
        from ``observations[positions, env_indices]`` and its other arrays."""
        steps = self.steps_at(positions, env_indices)
        batch = self.store.read(steps)
        return self._samples(batch, batch.next_obs, self._terminal(batch, steps), batch.reward.reshape(-1, 1), env=env)

    def n_step_samples_at(
        self,
        positions: npt.ArrayLike,
        env_indices: npt.ArrayLike,
        *,
        env: VecNormalize | None = None,
    ) -> ReplayBufferSamples:
        """The n-step samples (``n_steps``, ``gamma``) of the transitions at these positions and envs, as
        SB3's ``NStepReplayBuffer`` computes them (see the class docstring)."""
        first = self.steps_at(positions, env_indices)
        batch = self.store.read(first)
        size, n = len(first), self.n_steps
        rewards = np.zeros((size, n), dtype=np.float32)
        rewards[:, 0] = batch.reward
        next_obs = batch.next_obs.copy()
        terminal = self._terminal(batch, first)
        steps_used = np.ones(size, dtype=np.int64)
        going_on = ~(batch.terminated | batch.truncated | self._cut(first))
        for k in range(1, n):
            rows = np.flatnonzero(going_on & (first + k * self.n_envs < self._transitions))
            if not len(rows):
                break
            steps = first[rows] + k * self.n_envs
            step_batch = self.store.read(steps)
            # The env's next transition continues the episode only if its obs is this next_obs.
            continues = (step_batch.obs == next_obs[rows]).reshape(len(rows), -1).all(axis=1)
            step_terminal = self._terminal(step_batch, steps)[continues]
            step_ended = (step_batch.terminated | step_batch.truncated | self._cut(steps))[continues]
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
        """The store's steps of the transitions at these positions (SB3 row indices) and envs."""
        position_array = np.asarray(positions, dtype=np.int64)
        env_array = np.asarray(env_indices, dtype=np.int64)
        rows_added = self._transitions // self.n_envs
        if self.full:
            # The newest ``buffer_size`` rows; row r sits at position r % buffer_size.
            rows = rows_added - self.buffer_size + (position_array - rows_added) % self.buffer_size
        else:
            rows = position_array
        return rows * self.n_envs + env_array

    def _terminal(self, batch: Batch, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """SB3's sampled ``dones``: terminated only, or with ``handle_timeout_termination=False`` also
        truncated (and ended by the caller)."""
        if self.handle_timeout_termination:
            return batch.terminated.copy()
        return batch.terminated | batch.truncated | self._cut(steps)

    def to_samples(self, batch: Batch, env: VecNormalize | None = None) -> ReplayBufferSamples:
        """A store batch as SB3's ``ReplayBufferSamples`` on this buffer's device: observations in
        SB3's shape, actions (B, action_dim), dones and rewards (B, 1) float32."""
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
        raise NotImplementedError("an MmreplayBuffer cannot be emptied; create a new one at another path")


# The buffer of this process that holds each store's writer lock, by the store's absolute path. Buffers
# over one store in one process (a deepcopy, a loaded pickle or checkpoint beside the model that saved
# it) hand the lock to the one that adds: SB3 keeps replaced buffers alive (its callbacks hold the
# locals of its rollout loop), so waiting for the holder to be collected would fail such flows.
_WRITERS: weakref.WeakValueDictionary[str, MmreplayBuffer] = weakref.WeakValueDictionary()


def _open(path: Path) -> ReplayStore:
    """The store at ``path``, for appending, or read-only while another writer holds it (this process's
    or another's): the buffer reads the last commit until its first ``add`` takes the lock."""
    try:
        return ReplayStore.open(path, "r+")
    except StoreLockedError:
        return ReplayStore.open(path, "r")


def _reconcile(store: ReplayStore, pickled: int) -> int:
    """The transitions a buffer that holds ``pickled`` transitions (as pickled, or before it takes the
    writer lock) holds over ``store``'s commit: the store's, when it went on; never fewer."""
    committed = store.transitions_added
    if committed < pickled:
        raise ValueError(
            f"the store at {str(store.path)!r} has committed {committed} transitions, fewer than the "
            f"{pickled} this buffer was pickled with: it is not the store the buffer was saved from "
            "(or it lost commits), so the buffer's positions would point at other transitions"
        )
    if committed > pickled:
        warnings.warn(
            f"the store at {str(store.path)!r} has {committed} transitions, {committed - pickled} more than "
            "this buffer holds (it was pickled before they were added, or another buffer of the store "
            f"added them since): the buffer continues from the store's {committed}",
            UserWarning,
            stacklevel=3,
        )
    return committed
