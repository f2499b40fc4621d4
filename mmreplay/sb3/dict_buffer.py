"""A Stable-Baselines3 ``DictReplayBuffer`` backed by a ``ReplayStore``, for ``MultiInputPolicy``
(camera and proprioception, a goal beside the observation) and, through ``MmreplayHerBuffer``, HER:

    from mmreplay.sb3 import MmreplayDictBuffer
    model = SAC("MultiInputPolicy", env, replay_buffer_class=MmreplayDictBuffer,
                replay_buffer_kwargs=dict(path="/data/sac.mmr"))

Image keys are one frame stream, each frame stored once, lz4-compressed; the other keys are fields of
the store (``dict_layout``). The store's life (``if_exists``, ``DQN.load``, pickles, one writer at a
time), the positions, SB3's arrays as views and the casts are ``MmreplayBuffer``'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import BaseBuffer, DictReplayBuffer, ReplayBuffer
from stable_baselines3.common.type_aliases import DictReplayBufferSamples
from stable_baselines3.common.vec_env import VecNormalize

from mmreplay.batch import Batch
from mmreplay.sb3.buffer import warn_if_relative
from mmreplay.sb3.buffer_store import BufferStore, open_or_create
from mmreplay.sb3.dict_layout import DictLayout, dict_layout
from mmreplay.sb3.observations import StackMismatch, StoreLayout, check_layout
from mmreplay.sb3.transitions import parse_row
from mmreplay.sb3.views import DoneFlags, StoredArray, TimeoutFlags, action_view, reward_view
from mmreplay.store import ReplayStore


@dataclass(frozen=True)
class StoreArguments:
    """The buffer's own arguments, after SB3's: where the store is and how observations are kept."""

    path: str | os.PathLike[str]
    if_exists: str = "error"
    frame_keys: tuple[str, ...] | None = None
    stack_size: int | None = None


class MmreplayDictBuffer(DictReplayBuffer):
    """SB3's ``DictReplayBuffer`` over a ``ReplayStore`` at ``path``, for ``MultiInputPolicy`` and HER.

    Image keys are one frame stream, each frame stored once; the other keys are fields of the store.
    Positions, envs, draws and samples are SB3's (``sample`` draws with numpy's global generator as
    SB3's ``DictReplayBuffer`` does: same seed, same batch); the store's life (``if_exists``,
    ``DQN.load``, pickles, one writer at a time) is ``MmreplayBuffer``'s. ``observations`` and
    ``next_observations`` are dicts of lazy read-only views, one per key.

    Args:
        buffer_size: the capacity in transitions, as in ``MmreplayBuffer``.
        observation_space: a gymnasium ``Dict`` space with string keys.
        action_space: the env's action space.
        device: where sampled tensors go, as in SB3.
        n_envs: envs per row.
        optimize_memory_usage: draws as ``MmreplayBuffer`` draws with it (SB3's ``DictReplayBuffer``
            refuses it).
        handle_timeout_termination: as in ``MmreplayBuffer``.
        path: the store's directory, as in ``MmreplayBuffer`` (required).
        if_exists: ``"error"``, ``"replace"`` or ``"reopen"``, as in ``MmreplayBuffer``.
        frame_keys: the keys kept as frames, which must share one dtype (None: the images, ``uint8``
            ``Box`` keys of two or more axes).
        stack_size: splits each frame key along its first axis (``VecFrameStack`` of channel-first
            images); None infers it per key as ``MmreplayBuffer`` does, checked against the first adds:
            whole observations are frames when the keys disagree, or when the data refute the split
            while the store is empty.

    Raises:
        TypeError: ``path`` is not given, ``observation_space`` is not a ``Dict`` of string keys, or
            ``frame_keys`` is not a sequence of key names.
        ValueError: ``n_envs`` is not a positive int, ``frame_keys`` names a key that is missing, not a
            ``Box``, or of another dtype than the others, ``if_exists`` is not one of the three, or a
            reopened store's layout is not the one these arguments make.
        StoreExistsError: a store is at ``path`` and ``if_exists="error"``.
        FileExistsError: ``path`` holds something that is not a store this buffer can use.
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Dict,
        action_space: spaces.Space[Any],
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        path: str | os.PathLike[str] | None = None,
        if_exists: str = "error",
        frame_keys: Sequence[str] | None = None,
        stack_size: int | None = None,
    ) -> None:
        arguments = self._arguments(path, if_exists, frame_keys, stack_size)
        if isinstance(n_envs, bool) or not isinstance(n_envs, int) or n_envs < 1:
            raise ValueError(f"n_envs must be a positive int; got {n_envs!r}")
        self._dict_layout = dict_layout(observation_space, frame_keys=arguments.frame_keys, stack_size=arguments.stack_size)
        action_dtype = np.dtype(ReplayBuffer._maybe_cast_dtype(action_space.dtype))
        # SB3's DictReplayBuffer.__init__ would allocate its arrays: only the base class's attributes.
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self.buffer_size = max(buffer_size // n_envs, 1)
        self.optimize_memory_usage = bool(optimize_memory_usage)
        self.handle_timeout_termination = handle_timeout_termination
        self.path = Path(os.path.abspath(arguments.path))
        self._frame_keys, self._stack_size = arguments.frame_keys, arguments.stack_size
        self._layout = self._store_layout(self._dict_layout, action_dtype)
        self._stacking = self._dict_layout.stacking_checks()
        owner = type(self).__name__
        warn_if_relative(arguments.path, self.path, owner)
        store, reopened = open_or_create(self.path, self._layout.create, if_exists=arguments.if_exists, owner=owner)
        if reopened:
            try:
                self._check_layout(store)
            except BaseException:
                store.close()
                raise
        self._rows = BufferStore(self.path, store, buffer_size=self.buffer_size, n_envs=n_envs, owner=owner)
        self._sync()

    def _arguments(
        self, path: str | os.PathLike[str] | None, if_exists: str, frame_keys: Sequence[str] | None, stack_size: int | None
    ) -> StoreArguments:
        """This buffer's own arguments. ``MmreplayHerBuffer`` hands them over as ``_store_arguments``:
        SB3's ``HerReplayBuffer.__init__`` builds this class with SB3's arguments only."""
        if path is None:
            handed: StoreArguments | None = self.__dict__.pop("_store_arguments", None)
            if handed is None:
                raise TypeError(
                    f"{type(self).__name__} needs path=, the store's directory "
                    "(replay_buffer_kwargs=dict(path='/abs/path/run.mmr'))"
                )
            return handed
        keys = None if frame_keys is None else (frame_keys,) if isinstance(frame_keys, str) else tuple(frame_keys)
        return StoreArguments(path, if_exists, keys, stack_size)

    def _store_layout(self, layout: DictLayout, action_dtype: np.dtype[Any]) -> StoreLayout:
        return StoreLayout(
            frame_shape=layout.frame_shape,
            stack_size=layout.stack_size,
            num_envs=self.n_envs,
            action_shape=(self.action_dim,),
            action_dtype=action_dtype,
            capacity=self.buffer_size * self.n_envs,
            frame_dtype=layout.frame_dtype,
            fields=layout.fields,
        )

    def _check_layout(self, store: ReplayStore) -> None:
        """A reopened store must have this buffer's layout, or (an inferred split that the data refuted
        when the store was made) the same with whole observations as frames."""
        if self._stack_size is None and store.stack_size == 1 and self._dict_layout.stack_size != 1:
            self._use_whole_observations()
        check_layout(store, self._layout, observation_space=self.observation_space, inferred=False, owner=type(self).__name__)

    def _use_whole_observations(self) -> None:
        self._dict_layout = dict_layout(self.observation_space, frame_keys=self._frame_keys, stack_size=1)
        self._layout = self._store_layout(self._dict_layout, self._layout.action_dtype)
        self._stacking = None

    # -- the store behind the buffer ---------------------------------------------------------------

    @property
    def store(self) -> ReplayStore:
        """The store this buffer reads (and, once it adds, writes).

        Returns:
            The open store.
        """
        return self._rows.store

    def _sync(self) -> None:
        self.pos, self.full = self._rows.pos, self._rows.full

    def flush(self) -> None:
        """Commit the transitions added so far."""
        self._rows.flush()

    def close(self) -> None:
        """Commit and close the store (its directory stays)."""
        self._rows.close()

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling reopens the store (``BufferStore``) and checks its layout against the buffer's."""
        self.__dict__.update(state)
        try:
            self._check_layout(self.store)
        except BaseException:
            self.close()
            raise
        self._sync()

    def reset(self) -> None:
        """Refuse: the buffer's store cannot be emptied through SB3's ``reset``.

        Raises:
            NotImplementedError: always; create a new buffer at another path.
        """
        raise NotImplementedError(f"an {type(self).__name__} cannot be emptied; create a new one at another path")

    # -- adding ------------------------------------------------------------------------------------

    def add(  # type: ignore[override]
        self,
        obs: Mapping[str, npt.NDArray[Any]],
        next_obs: Mapping[str, npt.NDArray[Any]],
        action: npt.NDArray[Any],
        reward: npt.NDArray[Any],
        done: npt.NDArray[Any],
        infos: Sequence[Mapping[str, Any]] | Mapping[str, Any],
    ) -> None:
        """Record one row: a transition of each env, as ``MmreplayBuffer.add`` does.

        Args:
            obs: each key's observations, (n_envs, *obs_shape) or obs_shape alone with one env.
            next_obs: the true next observations, by key, shaped as ``obs``.
            action: (n_envs, ...) actions.
            reward: (n_envs,) rewards.
            done: (n_envs,) SB3's done flags.
            infos: one dict per env, as in ``MmreplayBuffer.add``.

        Raises:
            ValueError: a key is missing or an array's shape does not fit ``n_envs`` and the spaces.
            StoreLockedError: another writer holds the store's writer lock.
        """
        store = self._rows.writer()
        row = parse_row(
            action, reward, done, infos, n_envs=self.n_envs, action_dim=self.action_dim,
            action_dtype=self._layout.action_dtype, handle_timeout_termination=self.handle_timeout_termination,
        )
        obs_arrays, next_arrays = self._parse_obs(obs, "obs"), self._parse_obs(next_obs, "next_obs")
        if self._stacking is not None and (~row.done).any():
            store = self._check_stacking(obs_arrays, next_arrays, ~row.done)
        layout = self._dict_layout
        frames, next_frames = layout.to_frames(obs_arrays, self.n_envs), layout.to_frames(next_arrays, self.n_envs)
        first = 0 if self.n_envs == 1 else slice(None)
        fields: dict[str, npt.ArrayLike] = {}
        for key, (obs_name, next_name) in layout.field_names.items():
            fields[obs_name], fields[next_name] = obs_arrays[key][first], next_arrays[key][first]
        store.add(
            frames[first], row.action[first], row.reward[first], next_frames[first], row.terminated[first],
            row.truncated[first], fields=fields or None,
        )
        self._rows.count(self._rows.transitions + self.n_envs)
        self._sync()

    def _parse_obs(self, obs: Mapping[str, npt.ArrayLike], name: str) -> dict[str, npt.NDArray[Any]]:
        """Each key's observations as (n_envs, *obs_shape) (or obs_shape alone with one env), cast to the
        key's dtype as SB3's buffer casts what it stores."""
        if not isinstance(obs, Mapping):
            raise TypeError(f"{name} must be a dict of observations by key; got {type(obs).__name__}")
        expected = list(self._dict_layout.obs_shapes)
        if sorted(obs) != sorted(expected):
            raise ValueError(f"{name} has keys {sorted(obs)}; expected {sorted(expected)}")
        arrays = {}
        for key, shape in self._dict_layout.obs_shapes.items():
            array = np.asarray(obs[key])
            if isinstance(self.observation_space[key], spaces.Discrete) and array.shape in ((self.n_envs,), ()):
                array = array.reshape(self.n_envs, 1)  # SB3's own buffer reshapes Discrete observations so
            if array.shape != (self.n_envs, *shape) and (self.n_envs > 1 or array.shape != shape):
                raise ValueError(
                    f"{name}[{key!r}] has shape {array.shape}; expected {(self.n_envs, *shape)} "
                    f"(n_envs={self.n_envs}, observation_space[{key!r}] shape {shape})"
                )
            arrays[key] = array.reshape(self.n_envs, *shape).astype(self._dict_layout.dtypes[key], copy=False)
        return arrays

    def _check_stacking(
        self, obs: dict[str, npt.NDArray[Any]], next_obs: dict[str, npt.NDArray[Any]], going_on: npt.NDArray[np.bool_]
    ) -> ReplayStore:
        """Check the inferred split of every frame key against the envs that go on; a refuted split
        makes the (empty) store again with whole observations as frames."""
        assert self._stacking is not None
        confirmed = True
        try:
            for key, check in self._stacking.items():
                shape = (int(going_on.sum()), self._dict_layout.stack_size, *check.layout.frame_shape)
                confirmed &= check.check(obs[key][going_on].reshape(shape), next_obs[key][going_on].reshape(shape))
        except StackMismatch as error:
            if self._rows.transitions or self.store.transitions_added:
                raise ValueError(f"{error} (for MmreplayDictBuffer: stack_size=1 keeps whole observations)") from None
            self._use_whole_observations()
            return self._rows.recreate(self._layout.create)
        if confirmed:
            self._stacking = None
        return self.store

    # -- SB3's arrays, as views of the store ----------------------------------------------------------

    @property
    def observations(self) -> dict[str, StoredArray]:  # type: ignore[override]
        """SB3's ``observations``, read from the store.

        Returns:
            One lazy read-only (buffer_size, n_envs, *obs_shape) view per key.
        """
        return self._views(next_obs=False)

    @property
    def next_observations(self) -> dict[str, StoredArray]:  # type: ignore[override]
        """SB3's ``next_observations``: the true next observation, also at truncations.

        Returns:
            One lazy read-only view per key.
        """
        return self._views(next_obs=True)

    def _views(self, *, next_obs: bool) -> dict[str, StoredArray]:
        layout = self._dict_layout
        name = "next_observations" if next_obs else "observations"

        def reader(key: str) -> Any:
            return lambda batch, steps: layout.key_of(batch, key, next_obs=next_obs)

        return {
            key: StoredArray(self._rows, name=f"{name}[{key!r}]", item_shape=shape, dtype=layout.dtypes[key], take=reader(key))
            for key, shape in layout.obs_shapes.items()
        }

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

    def sample(self, batch_size: int, env: VecNormalize | None = None) -> DictReplayBufferSamples:  # type: ignore[override]
        """Draw ``batch_size`` transitions uniformly with replacement, as SB3 draws them.

        Args:
            batch_size: how many transitions.
            env: SB3's ``VecNormalize`` to normalise observations and rewards with (None: as stored).

        Returns:
            SB3's ``DictReplayBufferSamples`` on this buffer's device: a dict of tensors per observation
            key in the space's dtypes, actions (B, action_dim), dones and rewards (B, 1) float32.

        Raises:
            ValueError: the buffer is empty.
        """
        if self.size() == 0:
            raise ValueError("cannot sample from an empty buffer: add transitions first")
        return ReplayBuffer.sample(self, batch_size, env=env)  # type: ignore[return-value]

    def _get_samples(  # type: ignore[override]
        self, batch_inds: npt.NDArray[np.integer], env: VecNormalize | None = None
    ) -> DictReplayBufferSamples:
        env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))
        return self.samples_at(batch_inds, env_indices, env=env)

    def samples_at(
        self, positions: npt.ArrayLike, env_indices: npt.ArrayLike, *, env: VecNormalize | None = None
    ) -> DictReplayBufferSamples:
        """The transitions at these positions and envs, as SB3's ``DictReplayBuffer`` reads its arrays there.

        Args:
            positions: SB3 row indices.
            env_indices: one env per position.
            env: SB3's ``VecNormalize`` to normalise observations and rewards with (None: as stored).

        Returns:
            SB3's ``DictReplayBufferSamples`` on this buffer's device: a dict of tensors per observation
            key in the space's dtypes, actions (B, action_dim), dones and rewards (B, 1) float32.
        """
        steps = self._rows.steps_at(positions, env_indices)
        batch = self._rows.read(steps)
        return self.to_samples(batch, steps, env=env)

    def to_samples(self, batch: Batch, steps: npt.NDArray[np.int64], env: VecNormalize | None = None) -> DictReplayBufferSamples:
        """A store batch as SB3's ``DictReplayBufferSamples`` on this buffer's device.

        Args:
            batch: a batch read from this buffer's store.
            steps: the batch's steps (its ``index``).
            env: SB3's ``VecNormalize`` to normalise observations and rewards with (None: as stored).

        Returns:
            SB3's ``DictReplayBufferSamples`` on this buffer's device: a dict of tensors per observation
            key in the space's dtypes, actions (B, action_dim), dones and rewards (B, 1) float32.
        """
        layout = self._dict_layout
        obs = self._normalize_obs({key: layout.key_of(batch, key, next_obs=False) for key in layout.obs_shapes}, env)
        next_obs = self._normalize_obs({key: layout.key_of(batch, key, next_obs=True) for key in layout.obs_shapes}, env)
        assert isinstance(obs, dict) and isinstance(next_obs, dict)
        # SB3's sampled dones: terminated only, or with handle_timeout_termination=False also truncated.
        terminal = batch.terminated.copy() if self.handle_timeout_termination else self._rows.ended(batch, steps)
        return DictReplayBufferSamples(
            observations={key: self.to_torch(array) for key, array in obs.items()},
            actions=self.to_torch(batch.action.reshape(len(batch), self.action_dim)),
            next_observations={key: self.to_torch(array) for key, array in next_obs.items()},
            dones=self.to_torch(terminal.astype(np.float32).reshape(-1, 1)),
            rewards=self.to_torch(self._normalize_reward(batch.reward.reshape(-1, 1), env)),
        )
