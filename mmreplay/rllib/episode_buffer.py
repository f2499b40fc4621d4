"""``MmreplayEpisodeReplayBuffer``: RLlib's replay buffer (new API stack, DQN) kept in an mmreplay store.

RLlib's own ``PrioritizedEpisodeReplayBuffer`` keeps episodes as Python objects with float32,
uncompressed observations in the Algorithm's process (about 106 GiB per million Atari steps); this one
keeps each frame once, lz4-compressed, on disk. Plug it in by its dotted name (RLlib 2.60 crashes on a
class object, ``algorithm.py:4475``)::

    config.training(replay_buffer_config={
        "type": "mmreplay.rllib.MmreplayEpisodeReplayBuffer", "path": "dqn.mmr",
        "capacity": 1_000_000, "alpha": 0.6, "beta": 0.4})

Vocabulary and rules:

- Observations are image frame stacks ``(H, W, stack_size)`` (what ``wrap_atari_for_new_api_stack(...,
  framestack=4)`` gives), as uint8 pixels or as RLlib's ``p / 128 - 1`` float32 encoding, which maps back
  to the pixel exactly; sampled observations come back bit for bit as they went in, in the dtype the
  episodes brought (uint8 end to end when the module takes uint8). Float32 values that are not that
  encoding, other dtypes and other observation spaces are refused: use RLlib's own buffers for them.
- A sample's episodes are what RLlib's constructor makes, built from a template at a tenth of its cost
  (``transition_episodes``); float32 observations are converted from the decoded pixels in one array
  per sample, each transition's frames once (5 for a 1-step sample, whose obs and next_obs share 3;
  ``normalized_images``). RLlib's own buffer hands back references to the float32 arrays it keeps;
  ``benchmarks/bench_ray.py`` compares the two.
- Each episode in progress gets an env of the store (``num_envs`` of them); chunks of one episode
  (RLlib sends 4-step chunks whose first observation is the previous chunk's last) continue it.
- n-step as DQN asks for it: a window cut by the episode's end sums the m < n rewards it has and
  reports ``n_step = m`` (the loss discounts by ``gamma ** n_step``), where RLlib's buffer draws again.
- ``batch_length_T > 0`` (a stateful module) is refused with an error: sequences are not served here.
- ``update_priorities`` is positional against the last ``sample``, as DQN calls it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import PrioritizedEpisodeReplayBuffer

from mmreplay import PrioritizedSampler, ReplayStore, UniformSampler, encode_stacks
from mmreplay.rllib.normalized_images import normalize_into, pixels_of
from mmreplay.rllib.transition_episodes import TransitionEpisodes


class MmreplayEpisodeReplayBuffer(PrioritizedEpisodeReplayBuffer):
    """An RLlib episode replay buffer whose transitions live in the mmreplay store at ``path``.

    It subclasses ``PrioritizedEpisodeReplayBuffer`` because DQN sends priorities only to such a buffer
    (``utils/replay_buffers/utils.py:41``), but skips its constructor (its trees are O(capacity) Python
    objects). ``prioritized=False`` samples uniformly (and ignores priorities).

    Args:
        capacity: the store's capacity in transitions.
        path: the store's directory, created at the first add (reopened by ``set_state``).
        alpha: the priority exponent.
        beta: the importance-weight exponent ``sample`` uses by default.
        epsilon: added to each priority.
        prioritized: False samples uniformly (and ignores priorities).
        num_envs: the store's envs: episodes recorded side by side, one env each.
        observation_buffers: 0 (the default): a sample's float32 observations are views into one new
            array, which no later sample writes into. k > 0 recycles k arrays in turn, one a sample: a
            sample's episodes then stay valid for the next k - 1 samples only (DQN's synchronous loop
            needs 1). New arrays were measured no slower: the allocator hands back the previous sample's
            freed memory.
        seed: the seed of the buffer's own generator, which draws the samples.
        metrics_num_episodes_for_smoothing: RLlib's ``EpisodeReplayBuffer`` argument.
        **kwargs: RLlib's other buffer arguments, ignored.
    """

    def __init__(
        self,
        capacity: int = 10000,
        *,
        path: str,
        alpha: float = 0.6,
        beta: float = 0.4,
        epsilon: float = 1e-6,
        prioritized: bool = True,
        num_envs: int = 64,
        observation_buffers: int = 0,
        seed: int | None = None,
        metrics_num_episodes_for_smoothing: int = 100,
        **kwargs: Any,
    ) -> None:
        EpisodeReplayBuffer.__init__(
            self, capacity=capacity, metrics_num_episodes_for_smoothing=metrics_num_episodes_for_smoothing
        )
        self.path = Path(path)
        self._alpha, self._beta, self._epsilon = alpha, beta, epsilon
        self._prioritized = prioritized
        self._num_envs = num_envs
        self._rng = np.random.default_rng(seed)
        self._store: ReplayStore | None = None
        self._float_obs: bool | None = None  # observations in RLlib's p/128 - 1 float32 encoding
        self._env_of: dict[str, int] = {}  # episode id: the store's env that records it
        self._last_step_of: dict[str, int] = {}  # episode id: its newest step, to free an env the longest idle
        self._last_index: npt.NDArray[np.int64] | None = None
        self._episodes_added = 0
        self._observation_buffers = observation_buffers
        self._buffers: list[npt.NDArray[np.float32]] = []
        self._turn = -1
        self._episodes = TransitionEpisodes()

    # -- adding --------------------------------------------------------------------------------

    def add(  # type: ignore[override]  # RLlib's own episode buffers narrow ``add`` the same way
        self, episodes: list[SingleAgentEpisode] | SingleAgentEpisode, weight: float | None = None
    ) -> None:
        """Record each episode chunk's transitions (o_t, a_t, r_t, o_{t+1}) in its episode's env.

        Args:
            episodes: one ``SingleAgentEpisode`` chunk or a list of them.
            weight: RLlib's argument (unused: new transitions get the largest priority seen).
        """
        for episode in episodes if isinstance(episodes, list) else [episodes]:
            observations = np.asarray(episode.get_observations())
            if len(observations) < 2:
                continue
            frames = self._to_frames(observations)
            store = self._open(frames.shape[2:], frames.shape[1])
            env = self._env_for(episode.id_)
            actions = np.asarray(episode.get_actions()).astype(store.action_dtype)
            rewards = np.asarray(episode.get_rewards(), np.float32)
            steps = len(actions)
            terminated, truncated = np.zeros(steps, bool), np.zeros(steps, bool)
            terminated[-1], truncated[-1] = episode.is_terminated, episode.is_truncated
            encoded, index = encode_stacks(frames)
            store.add_encoded(encoded, index[:-1], actions, rewards, index[1:], terminated, truncated, env_index=env)
            self._num_timesteps_added += steps
            self._last_step_of[episode.id_] = self._num_timesteps_added
            if episode.is_done:
                self._env_of.pop(episode.id_, None)
                self._last_step_of.pop(episode.id_, None)
                self._episodes_added += 1

    def _to_frames(self, observations: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        """(n, H, W, stack) observations as (n, stack, H, W) uint8 frames, exactly."""
        if observations.ndim != 4:
            raise ValueError(
                f"observations have shape {observations.shape[1:]}; expected image stacks (H, W, stack_size) "
                "(wrap_atari_for_new_api_stack with framestack=4); use RLlib's own buffers for other spaces"
            )
        if observations.dtype not in (np.uint8, np.float32):
            raise TypeError(
                f"observations are {observations.dtype}; expected uint8 pixels or float32 p / 128 - 1 "
                "(wrap_atari_for_new_api_stack)"
            )
        float_obs = observations.dtype == np.float32
        if self._float_obs is None:
            self._float_obs = float_obs
        elif float_obs != self._float_obs:
            raise TypeError(
                f"observations are {observations.dtype}; this buffer was given "
                f"{'float32' if self._float_obs else 'uint8'} ones first, and gives back the dtype it was given"
            )
        pixels = pixels_of(observations) if float_obs else observations
        return np.ascontiguousarray(pixels.transpose(0, 3, 1, 2))

    def _open(self, frame_shape: tuple[int, ...], stack_size: int) -> ReplayStore:
        if self._store is None:
            if (self.path / "header.json").exists():
                self._store = ReplayStore.open(self.path, "r+")
            else:
                sampler = PrioritizedSampler(self._alpha, self._epsilon) if self._prioritized else UniformSampler()
                self._store = ReplayStore.create(
                    self.path, frame_shape=tuple(frame_shape), capacity=self.capacity, stack_size=stack_size,
                    num_envs=self._num_envs, sampler=sampler,
                )
        return self._store

    def _env_for(self, episode_id: str) -> int:
        """The store's env recording this episode: its own while it runs; a free one for a new episode
        (the one idle longest when all are taken: an episode that stopped without ending)."""
        env = self._env_of.get(episode_id)
        if env is None:
            taken = set(self._env_of.values())
            free = [e for e in range(self._num_envs) if e not in taken]
            if free:
                env = free[0]
            else:
                idle = min(self._last_step_of, key=self._last_step_of.__getitem__)
                env = self._env_of.pop(idle)
                self._last_step_of.pop(idle)
            self._env_of[episode_id] = env
        return env

    # -- sampling ------------------------------------------------------------------------------

    def sample(  # type: ignore[override]  # returns episodes only, as DQN asks (sample_episodes=True)
        self,
        num_items: int | None = None,
        *,
        batch_size_B: int | None = None,
        batch_length_T: int | None = None,
        n_step: int | tuple[int, int] | None = None,
        beta: float | None = None,
        gamma: float = 0.99,
        **kwargs: Any,
    ) -> list[SingleAgentEpisode]:
        """Draw ``num_items`` length-1 episodes ``[o_t, o_{t+m}]`` with the m-step return, as DQN's loss reads them.

        Args:
            num_items: how many transitions (None: ``batch_size_B``, or the buffer's).
            batch_size_B: RLlib's other name for ``num_items``.
            batch_length_T: must be None or 0: the buffer serves stateless modules.
            n_step: m, or a (low, high) range m is drawn from per sample (None: 1).
            beta: the importance exponent (None: the buffer's).
            gamma: the discount of the m-step return.
            **kwargs: RLlib's other sample arguments, ignored.

        Returns:
            The episodes, with ``weights`` and ``n_step`` (= m) in ``extra_model_outputs``.

        Raises:
            ValueError: ``batch_length_T`` is set (a stateful module needs RLlib's own buffer), or
                nothing was added yet.
        """
        if batch_length_T:
            raise ValueError(
                f"batch_length_T is {batch_length_T}: MmreplayEpisodeReplayBuffer serves transitions for "
                "stateless modules (batch_length_T=0); a stateful module needs RLlib's own buffer"
            )
        if self._store is None or len(self._store) == 0:
            raise ValueError("cannot sample: nothing was added to the buffer yet")
        count = num_items or batch_size_B or self.batch_size_B
        if isinstance(n_step, (tuple, list)):
            n = int(self._rng.integers(n_step[0], n_step[1] + 1))
        else:
            n = int(n_step or 1)
        batch = self._store.sample(count, self._rng, beta=self._beta if beta is None else beta, n_step=n, gamma=gamma)
        self._last_index = batch.index
        self.sampled_timesteps += count
        obs, next_obs = self._observations(batch.obs, batch.next_obs)
        return self._episodes.build(
            obs, next_obs, action=batch.action, reward=batch.reward.tolist(), terminated=batch.terminated.tolist(),
            truncated=batch.truncated.tolist(), weight=batch.weight.tolist(),
            n_step=_steps_used(batch.discount, gamma, n).tolist(), t_started=batch.index.tolist(),
        )

    def _observations(
        self, obs: npt.NDArray[np.generic], next_obs: npt.NDArray[np.generic]
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """A batch's (B, stack, H, W) uint8 obs and next_obs as the episodes brought them: (B, H, W,
        stack) views, uint8 or p / 128 - 1 float32."""
        # Converted in the stored layout (a transposing copy, with its inner loop over stack_size items,
        # costs ~10x more), then handed out as channels-last views: RLlib's learner connectors stack the
        # items into a train batch at once, as fast from these views as from contiguous arrays.
        if self._float_obs:
            frames, first_next = _frames_of(obs, next_obs)
            converted = normalize_into(self._recycled(frames.shape), frames)
            obs, next_obs = converted[:, : obs.shape[1]], converted[:, first_next:]
        return obs.transpose(0, 2, 3, 1), next_obs.transpose(0, 2, 3, 1)

    def _recycled(self, shape: tuple[int, ...]) -> npt.NDArray[np.float32]:
        """A new float32 array, or the next of ``observation_buffers`` in turn (a new one if the shape changed)."""
        if self._observation_buffers == 0:
            return np.empty(shape, np.float32)
        self._turn = (self._turn + 1) % self._observation_buffers
        if len(self._buffers) <= self._turn:
            self._buffers.append(np.empty(shape, np.float32))
        if self._buffers[self._turn].shape != shape:
            self._buffers[self._turn] = np.empty(shape, np.float32)
        return self._buffers[self._turn]

    def update_priorities(self, priorities: npt.ArrayLike, module_id: str | None = None) -> None:
        """Set the priorities of the last ``sample``'s items, in its order (DQN's absolute TD errors).

        Args:
            priorities: one per item.
            module_id: RLlib's argument (unused: one module).
        """
        if not self._prioritized or self._last_index is None or self._store is None:
            return
        self._store.update_priorities(self._last_index, np.asarray(priorities, np.float64).reshape(-1))

    # -- counts and state ------------------------------------------------------------------------

    def get_num_timesteps(self, module_id: str | None = None) -> int:
        """The transitions stored.

        Args:
            module_id: RLlib's argument (unused).

        Returns:
            The store's length (0 before the first add).
        """
        return 0 if self._store is None else len(self._store)

    def get_num_episodes(self, module_id: str | None = None) -> int:
        """The episode chunks added.

        Args:
            module_id: RLlib's argument (unused).

        Returns:
            The count.
        """
        return self._episodes_added

    def get_state(self) -> dict[str, Any]:
        """The state is the store on disk: commit it, and name it.

        Returns:
            The store's path and the sampled timesteps.
        """
        if self._store is not None:
            self._store.flush()
        return {"path": str(self.path), "sampled_timesteps": self.sampled_timesteps}

    def set_state(self, state: dict[str, Any]) -> None:
        """Reopen the store ``state`` names, for appending.

        Args:
            state: what ``get_state`` returned.
        """
        if self._store is not None:
            self._store.close()
            self._store = None
        self.path = Path(state["path"])
        self.sampled_timesteps = state.get("sampled_timesteps", 0)
        if (self.path / "header.json").exists():
            self._store = ReplayStore.open(self.path, "r+")

    @property
    def store(self) -> ReplayStore | None:
        """The mmreplay store, None before the first add.

        Returns:
            The store or None.
        """
        return self._store


def _frames_of(
    obs: npt.NDArray[np.generic], next_obs: npt.NDArray[np.generic]
) -> tuple[npt.NDArray[np.uint8], int]:
    """A sample's obs and next_obs (B, stack, H, W) as one array of each transition's frames, which the
    caller may overwrite, and where next_obs starts in it. ``ReplayStore.sample`` returns both as views
    of one array of ``stack + 1`` frames per transition (they share ``stack - 1``: 5 frames to convert
    instead of 8) or ``2 * stack`` (n-step); that array is found from the two views' own memory layout,
    checked, and a copy of both is made when they are laid out any other way."""
    rows, stack = obs.shape[:2]
    frame = obs.strides[1]
    columns, rest = divmod(obs.strides[0], frame) if frame else (0, 1)
    start = obs.__array_interface__["data"][0]
    shifted = next_obs.__array_interface__["data"][0] - start
    if (
        obs.dtype == np.uint8 and next_obs.dtype == np.uint8 and obs.flags.writeable
        and obs.base is not None and obs.base is next_obs.base
        and obs.strides == next_obs.strides and rest == 0
        and frame == obs[0, 0].nbytes and obs[0, 0].flags.c_contiguous and stack < columns <= 2 * stack
        and shifted == (columns - stack) * frame
    ):  # fmt: skip
        frames = np.lib.stride_tricks.as_strided(obs, (rows, columns, *obs.shape[2:]), obs.strides, writeable=True)
        return frames, columns - stack
    return np.concatenate([obs, next_obs], axis=1).astype(np.uint8), stack


def _steps_used(discount: npt.NDArray[np.float32], gamma: float, n_step: int) -> npt.NDArray[np.int64]:
    """m of each window from its discount gamma^m; n_step where the window terminated (discount 0, and
    the loss does not bootstrap there, so m does not matter) or where gamma is 0 or 1."""
    if not 0 < gamma < 1:
        return np.full(len(discount), n_step, np.int64)
    with np.errstate(divide="ignore"):
        used = np.rint(np.log(discount.astype(np.float64)) / math.log(gamma))
    return np.where(discount > 0, used, n_step).astype(np.int64)
