"""``MmreplayReplayBuffer``: a d3rlpy replay buffer (``d3rlpy.dataset.ReplayBufferBase``) whose
transitions live in a ``ReplayStore``.

Everything d3rlpy's ``fit``, ``fit_online``, ``update``, evaluators and Decision Transformer call is
served from the store: ``dataset_info``, ``sample_transition(_batch)``, ``sample_trajectory(_batch)``
(returns to go, timesteps, masks), ``episodes`` (lazy views), ``transition_count``, ``append`` and
``clip_episode``, ``dump`` and ``load`` (d3rlpy's HDF5 file).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
from d3rlpy.constants import ActionSpace
from d3rlpy.dataset import DatasetInfo, Episode, PartialTrajectory, ReplayBufferBase, TrajectoryMiniBatch, Transition
from d3rlpy.dataset import TransitionMiniBatch
from d3rlpy.dataset.io import dump as dump_episodes
from d3rlpy.dataset.io import load as load_episodes

from mmreplay import Batch, ReplayStore
from mmreplay.d3rlpy import minibatches, opening
from mmreplay.d3rlpy.episode_views import EpisodeViews, StoreEpisode, suffix_sums
from mmreplay.d3rlpy.layout import layout_of
from mmreplay.d3rlpy.pickers import picker_for, slicer_for
from mmreplay.d3rlpy.transition_index import TransitionIndex
from mmreplay.d3rlpy.writing import OnlineWriter, check_episode, write_episode
from mmreplay.validation import parse_positive_int


class MmreplayReplayBuffer(ReplayBufferBase):  # type: ignore[misc]
    """A d3rlpy replay buffer over a store: what d3rlpy samples is read from the store's files.

    d3rlpy's semantics, where they differ from the store's: a terminal transition's next observation is
    zeros, and a truncated episode's last transition is dropped (d3rlpy never keeps the final
    observation); ``final_observation="stored"`` hands the stored final frame over instead (its
    truncated last transition then counts, not terminal). Departures from d3rlpy's own buffer, each
    for a reason: draws come from ``rng`` (numpy's global generator by default, as d3rlpy's, so that
    ``d3rlpy.seed`` gives the same transitions from the same episodes); a store's ``capacity`` counts
    stored transitions, a truncated episode's dropped one included; an episode of one step is its own
    episode (d3rlpy's writer ignores its ``clip_episode`` and joins it to the next one).

    Args:
        store: The store (mode ``"r"`` to sample, ``"r+"`` also to append). Stacks: ``stack_padding="zeros"``
            gives d3rlpy's ``FrameStackTransitionPicker`` arrays; ``"first"`` pads as the store does.
        final_observation: ``"zeros"`` (d3rlpy's) or ``"stored"`` (see above).
        action_size: The number of discrete actions, or the continuous action's size; None finds it
            (for discrete actions: the largest stored action plus one, as d3rlpy does, by one pass over
            the store).
        action_space: A ``d3rlpy.constants.ActionSpace``; None: discrete for scalar integer actions.
        rng: A numpy ``Generator``, ``RandomState``, an int (a new ``Generator``'s seed) or None.

    Raises:
        TypeError: ``store`` is not a ``ReplayStore``, or an argument has the wrong type.
        ValueError: ``final_observation`` or ``action_size`` is out of range, or the store's layout is not
            one d3rlpy can read.
    """

    def __init__(
        self,
        store: ReplayStore,
        *,
        final_observation: str = "zeros",
        action_size: int | None = None,
        action_space: ActionSpace | None = None,
        rng: np.random.Generator | np.random.RandomState | int | None = None,
    ) -> None:
        if not isinstance(store, ReplayStore):
            raise TypeError(f"store must be a ReplayStore; got {type(store).__name__}")
        self._keep_final = opening.parse_final_observation(final_observation)
        self._rng = opening.parse_buffer_rng(rng)
        self._layout = layout_of(store)
        self._action_space = opening.action_space_of(self._layout, action_space)
        self._action_size = None if action_size is None else parse_positive_int(action_size, "action_size")
        self._store = store
        self._index = self._read_index()
        self._synced = len(store) == 0
        self._writer = OnlineWriter(store, self._layout, self._note_add) if store.mode == "r+" else None
        self._rewards: dict[tuple[int, int], npt.NDArray[np.float32]] = {}

    # -- named constructors ----------------------------------------------------------------------

    @classmethod
    def from_store(cls, path: Any, mode: str = "r", **options: Any) -> MmreplayReplayBuffer:
        """The buffer over the store at ``path``, opened in ``mode``.

        Args:
            path: The store's directory.
            mode: ``"r"`` to sample, ``"r+"`` also to append.
            **options: As the class takes them (``final_observation``, ``action_size``, ``action_space``,
                ``rng``).

        Returns:
            The buffer.
        """
        return cls(ReplayStore.open(path, mode), **options)

    @classmethod
    def from_episodes(
        cls,
        path: Any,
        episodes: Sequence[Any],
        *,
        frame_stack: int = 1,
        capacity: int | None = None,
        action_size: int | None = None,
        action_space: ActionSpace | None = None,
        rng: np.random.Generator | np.random.RandomState | int | None = None,
        final_observation: str = "zeros",
    ) -> MmreplayReplayBuffer:
        """A new store at ``path`` holding d3rlpy episodes (``d3rlpy.datasets``' and ``Episode``s), and its buffer.

        Args:
            path: Where to create the store (a new directory).
            episodes: d3rlpy episodes, each with ``observations`` ``(N, *shape)``, ``actions``, ``rewards``
                and ``terminated``; one array of observations per step.
            frame_stack: The ``n_frames`` of the ``FrameStackTransitionPicker`` the episodes are meant for
                (1: none); ``(1, 84, 84)`` steps are stored as ``(84, 84)`` frames.
            capacity: The store's capacity; None: the episodes' steps (no room left: give a capacity to
                append afterwards without evicting them).
            action_size: As the class takes it; None: the episodes' largest action plus one (discrete) or
                the action's size.
            action_space: As the class takes it.
            rng: As the class takes it.
            final_observation: As the class takes it.

        Returns:
            The buffer, open for appending.

        Raises:
            TypeError, ValueError: episodes the store cannot hold, before the store is created.
        """
        stack = parse_positive_int(frame_stack, "frame_stack")
        opening.parse_final_observation(final_observation)
        opening.parse_buffer_rng(rng)
        layout = opening.episodes_layout(episodes, stack)
        for number, episode in enumerate(episodes):
            check_episode(episode, layout, number)
        steps = sum(len(episode.actions) for episode in episodes)
        space = opening.action_space_of(layout, action_space)
        if action_size is None:
            action_size = (int(max(np.max(episode.actions) for episode in episodes)) + 1 if space == ActionSpace.DISCRETE
                           else int(np.prod(layout.action_row)))
        store = opening.create_store(path, layout, steps if capacity is None else capacity, commit_interval_s=None)
        buffer = cls(store, final_observation=final_observation, action_size=action_size, action_space=space, rng=rng)
        for episode in episodes:
            write_episode(store, episode, layout, buffer._note_add)
        store.flush()
        return buffer

    @classmethod
    def create(
        cls,
        path: Any,
        *,
        env: Any,
        capacity: int,
        frame_stack: int = 1,
        rng: np.random.Generator | np.random.RandomState | int | None = None,
    ) -> MmreplayReplayBuffer:
        """A new, empty store at ``path`` for ``fit_online`` in ``env``, and its buffer.

        Args:
            path: Where to create the store (a new directory).
            env: A gymnasium-style env: its ``observation_space`` is what the agent sees (a stack of
                ``frame_stack`` steps along the first axis when stacked) and its ``action_space`` a
                ``Discrete`` or a ``Box``.
            capacity: The most transitions kept (first in, first out).
            frame_stack: Steps per observation: 4 for d3rlpy's ``Atari(..., num_stack=4)``.
            rng: As the class takes it.

        Returns:
            The buffer, open for appending.
        """
        layout, action_size = opening.env_layout(env, frame_stack)
        store = opening.create_store(path, layout, capacity)
        return cls(store, action_size=action_size, rng=rng)

    @classmethod
    def from_episode_generator(
        cls, episode_generator: Any, buffer: Any = None, transition_picker: Any = None, trajectory_slicer: Any = None,
        writer_preprocessor: Any = None, *, path: Any, frame_stack: int = 1, capacity: int | None = None,
    ) -> MmreplayReplayBuffer:
        """``from_episodes(path, episode_generator())``, as d3rlpy's ``ReplayBuffer.from_episode_generator``.

        Args:
            episode_generator: A callable returning the episodes.
            buffer: Must be None (the store is the buffer).
            transition_picker: Must be None (``frame_stack`` says what it would).
            trajectory_slicer: Must be None.
            writer_preprocessor: Must be None.
            path: Where to create the store (a new directory).
            frame_stack: As ``from_episodes`` takes it.
            capacity: As ``from_episodes`` takes it.

        Returns:
            The buffer, open for appending.

        Raises:
            ValueError: one of d3rlpy's components is given.
        """
        _refuse_components(buffer, transition_picker, trajectory_slicer, writer_preprocessor)
        return cls.from_episodes(path, episode_generator(), frame_stack=frame_stack, capacity=capacity)

    @classmethod
    def load(
        cls, f: BinaryIO, buffer: Any = None, episode_cls: type = Episode, transition_picker: Any = None,
        trajectory_slicer: Any = None, writer_preprocessor: Any = None, *, path: Any, frame_stack: int = 1,
        capacity: int | None = None,
    ) -> MmreplayReplayBuffer:
        """A new store at ``path`` holding the episodes of a d3rlpy HDF5 file (``dump``'s, or d3rlpy's own).

        Args:
            f: The open HDF5 file (binary).
            buffer: Must be None (the store is the buffer).
            episode_cls: The class d3rlpy's loader builds episodes of.
            transition_picker: Must be None (``frame_stack`` says what it would).
            trajectory_slicer: Must be None.
            writer_preprocessor: Must be None.
            path: Where to create the store (a new directory).
            frame_stack: As ``from_episodes`` takes it.
            capacity: As ``from_episodes`` takes it.

        Returns:
            The buffer, open for appending.

        Raises:
            ValueError: one of d3rlpy's components is given.
        """
        _refuse_components(buffer, transition_picker, trajectory_slicer, writer_preprocessor)
        return cls.from_episodes(path, load_episodes(episode_cls, f), frame_stack=frame_stack, capacity=capacity)

    def dump(self, f: BinaryIO) -> None:
        """Write the episodes as d3rlpy's HDF5 file (``d3rlpy.dataset.ReplayBuffer.load`` reads it).

        One episode is in memory at a time.

        Args:
            f: The file to write (binary).
        """
        dump_episodes(self.episodes, f)

    # -- adding ----------------------------------------------------------------------------------

    def append(self, observation: Any, action: Any, reward: Any) -> None:
        """Take one step of the episode in progress (``fit_online``'s call).

        Args:
            observation: What the agent saw.
            action: What it did.
            reward: What it got.
        """
        self._online("append").append(observation, action, reward)

    def clip_episode(self, terminated: bool) -> None:
        """End the episode in progress.

        Args:
            terminated: True where the episode ended in a terminal state; False for a time limit (its
                last step is then dropped, as d3rlpy drops it).
        """
        self._online("clip_episode").clip_episode(bool(terminated))

    def append_episode(self, episode: Any) -> None:
        """Add a whole d3rlpy episode after what is stored.

        Args:
            episode: A d3rlpy episode (``observations``, ``actions``, ``rewards``, ``terminated``).
        """
        self._online("append_episode")
        check_episode(episode, self._layout, 0)
        write_episode(self._store, episode, self._layout, self._note_add)

    def _online(self, call: str) -> OnlineWriter:
        if self._writer is None:
            raise ValueError(f"{call} needs a store open for appending (mode 'r+'); this one is {self._store.mode!r}")
        if self._store.num_envs != 1:
            raise ValueError(f"{call} appends to a store of one env; this one has num_envs={self._store.num_envs}")
        return self._writer

    def _note_add(self, step: int, starts_episode: bool, ending: int) -> None:
        # The first add to a store that already held transitions may continue its newest episode (the store
        # decides, by the obs): read the episodes again once; later adds follow from what was added.
        if not self._synced:
            self._index = self._read_index()
            self._synced = True
            return
        self._index.note_add(step, starts_episode=starts_episode, ending=ending)
        self._index.evict_before(self._store.stored_steps.start)

    def _read_index(self) -> TransitionIndex:
        return TransitionIndex.of_episodes(list(self._store.episodes()), num_envs=self._store.num_envs,
                                           keep_final=self._keep_final)

    def refresh(self) -> None:
        """Pick up what a writer in another process committed since (mode ``"r"``)."""
        self._store.refresh()
        self._index = self._read_index()

    # -- sampling --------------------------------------------------------------------------------

    def sample_transition(self) -> Transition:
        """One transition drawn as ``sample_transition_batch`` draws them.

        Returns:
            d3rlpy's ``Transition``.
        """
        return self.sample_transition_batch(1).transitions[0]

    def sample_transition_batch(self, batch_size: int) -> TransitionMiniBatch:
        """``batch_size`` transitions drawn uniformly, as d3rlpy's buffer draws them, in one store read.

        Args:
            batch_size: How many.

        Returns:
            d3rlpy's ``TransitionMiniBatch``.
        """
        numbers = opening.draw(self._rng, self.transition_count, parse_positive_int(batch_size, "batch_size"))
        located = self._index.locate(numbers)
        has_next = located.next_step >= 0
        rows = self._store.read(np.concatenate([located.step, located.next_step[has_next]]))
        main, following = _split(rows, len(numbers))
        next_actions = minibatches.next_action_rows(self._layout, following, has_next)

        def rewards_to_go(i: int) -> npt.NDArray[np.float32]:
            return self._episode_rewards(int(located.episode[i]))[int(located.position[i]):]

        return minibatches.transition_minibatch(self._layout, main, next_actions, located.terminal, rewards_to_go,
                                                zero_final=not self._keep_final)

    def sample_trajectory(self, length: int) -> PartialTrajectory:
        """One window of ``length`` steps, as ``sample_trajectory_batch`` draws them.

        Args:
            length: Steps in the window.

        Returns:
            d3rlpy's ``PartialTrajectory``.
        """
        return minibatches.partial_trajectory(self._trajectory_arrays(1, length), 0)

    def sample_trajectory_batch(self, batch_size: int, length: int) -> TrajectoryMiniBatch:
        """``batch_size`` windows of ``length`` steps, each ending at a transition drawn as d3rlpy draws it.

        Args:
            batch_size: How many windows.
            length: Steps in each.

        Returns:
            d3rlpy's ``TrajectoryMiniBatch``: returns to go, timesteps and masks included.
        """
        return minibatches.trajectory_minibatch(self._trajectory_arrays(batch_size, length))

    def _trajectory_arrays(self, batch_size: int, length: int) -> dict[str, npt.NDArray[np.generic]]:
        batch_size = parse_positive_int(batch_size, "batch_size")
        length = parse_positive_int(length, "length")
        located = self._index.locate(opening.draw(self._rng, self.transition_count, batch_size))
        positions, steps, valid = self._index.window(located.episode, located.position, length)
        rows = self._store.read(steps[valid])
        returns = np.zeros(positions.shape, dtype=np.float64)
        for e in np.unique(located.episode).tolist():  # each drawn episode's rewards, read once and kept
            mine = located.episode == e
            returns[mine] = suffix_sums(self._episode_rewards(e)[:, 0])[positions[mine]]
        return minibatches.trajectory_arrays(self._layout, rows, positions, valid, returns.astype(np.float32),
                                             located.terminal)

    def _episode_rewards(self, e: int) -> npt.NDArray[np.float32]:
        """Episode ``e``'s rewards as its view holds them, ``(size, 1)``, read once and kept (4 bytes a step)."""
        steps, _, _, size = self._index.episode(e)
        key = (int(steps[0]), size)
        if key not in self._rewards:
            rewards = self._store.read(steps).reward.astype(np.float32)
            padded = np.zeros((size, 1), dtype=np.float32)
            padded[: len(rewards), 0] = rewards
            self._rewards[key] = padded
        return self._rewards[key]

    # -- what d3rlpy reads -----------------------------------------------------------------------

    @property
    def episodes(self) -> EpisodeViews:
        """The stored episodes, oldest first, as lazy d3rlpy episodes (each indexing makes a view, read when
        first used and kept while it lives); those d3rlpy counts no transition of are not listed."""
        listed = self._index.listed()
        return EpisodeViews(len(listed), lambda e: self._view(int(listed[e])))

    def _view(self, e: int) -> StoreEpisode:
        steps, count, terminated, size = self._index.episode(e)
        return StoreEpisode(self._store.read, self._layout, steps, transition_count=count, terminated=terminated,
                            size=size, zero_final=not self._keep_final)

    def size(self) -> int:
        """The number of episodes listed.

        Returns:
            ``len(self.episodes)``.
        """
        return self._index.episode_count

    def locate(self, number: int) -> tuple[StoreEpisode, int]:
        """d3rlpy's transition ``number`` as (the view of its episode, its index there).

        Args:
            number: The transition's number, 0 to ``transition_count - 1``.

        Returns:
            The episode's view and the transition's index in it.
        """
        located = self._index.locate(np.array([number], dtype=np.int64))
        return self._view(int(located.episode[0])), int(located.position[0])

    @property
    def buffer(self) -> StoreTransitions:
        """The transitions as d3rlpy's buffer protocol indexes them (``append``, ``episodes``, ``[number]``)."""
        return StoreTransitions(self)

    @property
    def transition_count(self) -> int:
        """The transitions d3rlpy counts (a truncated episode's last one left out unless it is kept)."""
        return self._index.transition_count

    @property
    def transition_picker(self) -> Any:
        """A d3rlpy transition picker that reads the episode views (a frame stack's when stacked)."""
        return picker_for(self._layout.stack_size)

    @property
    def trajectory_slicer(self) -> Any:
        """A d3rlpy trajectory slicer that reads the episode views."""
        return slicer_for(self._layout.stack_size)

    @property
    def dataset_info(self) -> DatasetInfo:
        """d3rlpy's ``DatasetInfo``: the observation signature, the action space and its size."""
        if self._action_size is None:
            if self._action_space == ActionSpace.DISCRETE:
                largest = max((int(batch.action.max()) for batch in self._store.iterate(4096)), default=0)
                self._action_size = largest + 1
            else:
                self._action_size = int(np.prod(self._layout.action_row))
        return opening.dataset_info(self._layout, self._action_space, self._action_size)

    # -- the store -------------------------------------------------------------------------------

    @property
    def store(self) -> ReplayStore:
        """The store behind the buffer."""
        return self._store

    def close(self) -> None:
        """Close the store (which commits what was added)."""
        self._store.close()

    def __enter__(self) -> MmreplayReplayBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<MmreplayReplayBuffer {str(self._store.path)!r} episodes={self.size():,} "
                f"transitions={self.transition_count:,} observation_shape={self._layout.observation_shape}>")


class StoreTransitions:
    """The buffer's ``buffer`` (d3rlpy's ``BufferProtocol``): transition ``k`` as ``(episode view, index)``.

    Args:
        replay_buffer: The buffer whose store it reads.
    """

    def __init__(self, replay_buffer: MmreplayReplayBuffer) -> None:
        self._replay_buffer = replay_buffer

    def append(self, episode: Any, index: int) -> None:
        raise TypeError("a store's transitions are added in order, once: use MmreplayReplayBuffer.append_episode "
                        "or append and clip_episode")

    @property
    def episodes(self) -> EpisodeViews:
        return self._replay_buffer.episodes

    @property
    def transition_count(self) -> int:
        return self._replay_buffer.transition_count

    def __len__(self) -> int:
        return self.transition_count

    def __getitem__(self, number: int) -> tuple[StoreEpisode, int]:
        count = self.transition_count
        if not -count <= number < count:
            raise IndexError(f"transition {number} is not among the buffer's {count}")
        return self._replay_buffer.locate(number % count)


def _split(rows: Batch, count: int) -> tuple[Batch, Batch]:
    """The first ``count`` rows of a batch and the rest, as two batches."""
    names = ("obs", "action", "reward", "next_obs", "terminated", "truncated", "index", "env_index", "weight",
             "discount")
    head = Batch(**{name: getattr(rows, name)[:count] for name in names})
    tail = Batch(**{name: getattr(rows, name)[count:] for name in names})
    return head, tail


def _refuse_components(*components: Any) -> None:
    if any(component is not None for component in components):
        raise TypeError("the store is the buffer and stacks its frames itself: pass buffer, transition_picker, "
                        "trajectory_slicer and writer_preprocessor as None (frame_stack= and capacity= say what "
                        "they would)")

