"""``mmreplay.d3rlpy.MmreplayReplayBuffer`` against d3rlpy's own ``ReplayBuffer`` as the reference model:
the same episodes and the same seed give the same mini-batches, trajectories, episodes and counts, and
d3rlpy's algorithms train on it (``fit``, ``fit_online``, Decision Transformer).

d3rlpy 2.8.1 pins gymnasium 1.0.0: these tests run in ``.venv-d3rlpy`` (scripts/test.sh's d3rlpy stage)
and are skipped where d3rlpy is not installed.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

d3rlpy = pytest.importorskip("d3rlpy", reason="d3rlpy is not installed here: scripts/test.sh's d3rlpy stage runs these")

from d3rlpy.dataset import (  # noqa: E402
    Episode,
    FIFOBuffer,
    FrameStackTrajectorySlicer,
    FrameStackTransitionPicker,
    InfiniteBuffer,
    MixedReplayBuffer,
    ReplayBuffer,
)

from mmreplay import ReplayStore  # noqa: E402
from mmreplay.d3rlpy import MmreplayReplayBuffer  # noqa: E402

TRANSITION_FIELDS = ("observations", "actions", "rewards", "next_observations", "next_actions", "terminals", "intervals")
TRAJECTORY_FIELDS = ("observations", "actions", "rewards", "returns_to_go", "terminals", "timesteps", "masks")


def image_episode(rng: np.random.Generator, length: int, terminated: bool, shape: tuple[int, ...] = (1, 5, 5)) -> Episode:
    """A d3rlpy episode whose frames encode their step (each frame filled with a distinct value)."""
    base = int(rng.integers(0, 200))
    frames = np.stack([np.full(shape, (base + i) % 251 + 1, np.uint8) for i in range(length)])
    return Episode(observations=frames, actions=rng.integers(0, 4, (length, 1)),
                   rewards=rng.random((length, 1)).astype(np.float32), terminated=terminated)


def reference(episodes: list[Episode], frame_stack: int) -> ReplayBuffer:
    """d3rlpy's own buffer over the same episodes, with the picker and slicer the store stands for."""
    if frame_stack == 1:
        return ReplayBuffer(InfiniteBuffer(), episodes=episodes)
    return ReplayBuffer(InfiniteBuffer(), episodes=episodes, transition_picker=FrameStackTransitionPicker(frame_stack),
                        trajectory_slicer=FrameStackTrajectorySlicer(frame_stack))


def assert_same_transition_batches(ours: Any, theirs: Any, batch_size: int, seed: int) -> None:
    np.random.seed(seed)
    mine = ours.sample_transition_batch(batch_size)
    np.random.seed(seed)
    expected = theirs.sample_transition_batch(batch_size)
    for name in TRANSITION_FIELDS:
        np.testing.assert_array_equal(getattr(mine, name), getattr(expected, name), err_msg=name)
    for a, b in zip(mine.transitions, expected.transitions):
        np.testing.assert_array_equal(a.rewards_to_go, b.rewards_to_go)
        np.testing.assert_array_equal(a.observation, b.observation)


def assert_same_trajectory_batches(ours: Any, theirs: Any, batch_size: int, length: int, seed: int) -> None:
    np.random.seed(seed)
    mine = ours.sample_trajectory_batch(batch_size, length)
    np.random.seed(seed)
    expected = theirs.sample_trajectory_batch(batch_size, length)
    for name in TRAJECTORY_FIELDS:
        np.testing.assert_allclose(getattr(mine, name), getattr(expected, name), rtol=1e-6, atol=1e-6, err_msg=name)


episode_specs = st.lists(st.tuples(st.integers(1, 12), st.booleans()), min_size=1, max_size=5)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=episode_specs, frame_stack=st.sampled_from([1, 3]), seed=st.integers(0, 2**31 - 1))
def test_batches_trajectories_and_episodes_equal_d3rlpys_own_buffer_seeded_alike(
    tmp_path_factory: pytest.TempPathFactory, specs: list[tuple[int, bool]], frame_stack: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    episodes = [image_episode(rng, length, terminated) for length, terminated in specs]
    theirs = reference(episodes, frame_stack)
    if theirs.transition_count == 0:
        return
    ours = MmreplayReplayBuffer.from_episodes(tmp_path_factory.mktemp("d3") / "s.mmr", episodes, frame_stack=frame_stack)
    assert ours.transition_count == theirs.transition_count and ours.size() == theirs.size()
    assert ours.dataset_info == theirs.dataset_info
    assert_same_transition_batches(ours, theirs, 32, seed)
    assert_same_trajectory_batches(ours, theirs, 8, 4, seed)
    for view, episode in zip(ours.episodes, theirs.episodes):
        np.testing.assert_array_equal(view.observations, episode.observations)
        np.testing.assert_array_equal(view.actions, episode.actions)
        np.testing.assert_array_equal(view.rewards, episode.rewards)
        assert (view.terminated, view.transition_count, view.size()) == (episode.terminated, episode.transition_count,
                                                                         episode.size())
        for index in range(view.transition_count):
            mine, expected = ours.transition_picker(view, index), theirs.transition_picker(episode, index)
            np.testing.assert_array_equal(mine.next_observation, expected.next_observation)
            np.testing.assert_array_equal(mine.next_action, expected.next_action)
    ours.close()


def test_a_truncated_episodes_last_transition_is_dropped_and_a_terminated_ones_next_observation_is_zeros(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(0)
    episodes = [image_episode(rng, 6, terminated=True), image_episode(rng, 6, terminated=False)]
    ours = MmreplayReplayBuffer.from_episodes(tmp_path / "s.mmr", episodes, frame_stack=3)
    assert ours.transition_count == 6 + 5
    assert [view.transition_count for view in ours.episodes] == [6, 5]
    terminal = ours.transition_picker(ours.episodes[0], 5)
    assert terminal.terminal == 1.0 and not terminal.next_observation.any() and not terminal.next_action.any()
    assert ours.store.episodes()[1].ended_by == "truncated" and ours.store.episodes()[1].length == 6


def recorded_store(path: Path, *, stack_size: int = 2) -> ReplayStore:
    """A store recorded as gymnasium loops record one (frames encode their step): a terminated episode of
    3 steps whose final frame is 103, a truncated one of 3 steps whose final frame is 203."""
    store = ReplayStore.create(path, frame_shape=(2, 2), capacity=100, stack_size=stack_size, stack_padding="zeros")
    for base, terminated in ((100, True), (200, False)):
        for i in range(3):
            last = i == 2
            store.add(np.full((2, 2), base + i, np.uint8), i, 1.0, np.full((2, 2), base + i + 1, np.uint8),
                      terminated and last, (not terminated) and last)
    store.flush()
    return store


def test_final_observation_stored_hands_over_the_true_final_frame_and_keeps_a_truncated_last_transition(
    tmp_path: Path,
) -> None:
    recorded_store(tmp_path / "s.mmr").close()
    zeros = MmreplayReplayBuffer.from_store(tmp_path / "s.mmr", action_size=3)
    stored = MmreplayReplayBuffer.from_store(tmp_path / "s.mmr", action_size=3, final_observation="stored")
    assert (zeros.transition_count, stored.transition_count) == (3 + 2, 3 + 3)
    terminal_zeros, terminal_stored = (buffer.transition_picker(buffer.episodes[0], 2) for buffer in (zeros, stored))
    assert not terminal_zeros.next_observation.any()
    assert terminal_stored.next_observation[:, 0, 0].tolist() == [102, 103] and terminal_stored.terminal == 1.0
    last = stored.transition_picker(stored.episodes[1], 2)
    assert last.terminal == 0.0 and last.next_observation[:, 0, 0].tolist() == [202, 203]
    assert stored.episodes[1].size() == 4 and stored.episodes[1].observations[-1, 0, 0, 0] == 203
    np.random.seed(1)
    batch = stored.sample_transition_batch(64)
    final = batch.next_observations[:, -1, 0, 0]
    assert set(final[batch.terminals[:, 0] == 1].tolist()) == {103.0}


def test_fit_online_steps_give_d3rlpys_counts_and_batches_with_eviction(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    episodes = [image_episode(rng, int(length), True, shape=(3, 5, 5)) for length in rng.integers(2, 9, 12)]
    theirs = ReplayBuffer(FIFOBuffer(30), episodes=episodes[:1])
    ours = MmreplayReplayBuffer.from_episodes(tmp_path / "s.mmr", episodes[:1], capacity=30)
    for episode in episodes[1:]:
        for buffer in (theirs, ours):
            for i in range(len(episode.actions)):
                buffer.append(episode.observations[i], episode.actions[i], float(episode.rewards[i, 0]))
            buffer.clip_episode(True)
        assert ours.transition_count == theirs.transition_count == min(30, ours.store.transitions_added)
    assert_same_transition_batches(ours, theirs, 16, seed=4)


def test_an_episode_of_one_step_is_its_own_episode(tmp_path: Path) -> None:
    # d3rlpy's own writer ignores a clip_episode after one step and joins that step to the next episode
    store_buffer = MmreplayReplayBuffer.from_episodes(tmp_path / "s.mmr", [image_episode(np.random.default_rng(0), 2, True)],
                                                      capacity=10)
    frame = np.full((1, 5, 5), 9, np.uint8)
    store_buffer.append(frame, 1, 1.0)
    store_buffer.clip_episode(True)
    assert store_buffer.size() == 2 and store_buffer.transition_count == 3
    assert store_buffer.episodes[1].transition_count == 1 and store_buffer.episodes[1].terminated


def test_episodes_are_views_read_from_the_store_on_first_use(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    ours = MmreplayReplayBuffer.from_episodes(tmp_path / "s.mmr", [image_episode(rng, 5, True) for _ in range(3)])
    reads: list[int] = []
    read = ours.store.read
    ours.store.read = lambda steps: reads.append(len(steps)) or read(steps)  # type: ignore[method-assign]
    views = ours.episodes
    assert len(views) == 3 and views[2].size() == 5 and views[2].transition_count == 5 and reads == []
    view = views[1]
    assert view.observations.shape == (5, 1, 5, 5) and reads == [5]
    assert view.compute_return() == pytest.approx(float(np.sum(view.rewards))) and reads == [5]


def test_dump_is_read_by_d3rlpys_own_load_and_load_builds_a_store_again(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    episodes = [image_episode(rng, 5, True), image_episode(rng, 4, False)]
    ours = MmreplayReplayBuffer.from_episodes(tmp_path / "s.mmr", episodes, frame_stack=3)
    dumped = io.BytesIO()
    ours.dump(dumped)
    dumped.seek(0)
    theirs = ReplayBuffer.load(dumped, InfiniteBuffer(), transition_picker=FrameStackTransitionPicker(3))
    assert theirs.transition_count == ours.transition_count == 5 + 3
    dumped.seek(0)
    again = MmreplayReplayBuffer.load(dumped, path=tmp_path / "again.mmr", frame_stack=3)
    assert_same_transition_batches(again, theirs, 16, seed=2)


def test_real_pong_frames_sample_as_d3rlpys_frame_stack_picker_does(tmp_path: Path) -> None:
    from ale_py.registration import register_v5_envs
    from atari_data import load_stream

    register_v5_envs()  # ale-py 0.12 registers its envs at import only with gymnasium >= 1.1 (d3rlpy pins 1.0)
    stream = load_stream("pong", ("frames", "action", "reward", "terminated", "episode_start"), 1500)
    starts = np.flatnonzero(stream["episode_start"]).tolist() + [len(stream["frames"])]
    episodes = []
    for start, stop in zip(starts[:-1], starts[1:]):
        taken = np.arange(start, stop)[stream["action"][start:stop] >= 0]
        if len(taken):
            terminated = bool(stream["terminated"][taken[-1]])
            episodes.append(Episode(observations=stream["frames"][taken][:, None], actions=stream["action"][taken, None].astype(np.int64),
                                    rewards=stream["reward"][taken, None], terminated=terminated))
    ours = MmreplayReplayBuffer.from_episodes(tmp_path / "pong.mmr", episodes, frame_stack=4, action_size=6)
    theirs = reference(episodes, 4)
    assert ours.transition_count == theirs.transition_count > 1000
    assert_same_transition_batches(ours, theirs, 64, seed=0)
    assert_same_trajectory_batches(ours, theirs, 4, 20, seed=0)


def test_bad_input_is_refused_with_what_was_expected_before_anything_is_written(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    tuple_episode = Episode(observations=[np.zeros((3, 4), np.float32), np.zeros((3, 2), np.float32)],
                            actions=np.zeros((3, 1), np.int64), rewards=np.zeros((3, 1), np.float32), terminated=True)
    with pytest.raises(TypeError, match=re.escape("episodes[0] has tuple observations (2 arrays); a store keeps one")):
        MmreplayReplayBuffer.from_episodes(tmp_path / "a.mmr", [tuple_episode])
    flat = Episode(observations=np.zeros((3, 5, 5), np.uint8), actions=np.zeros((3, 1), np.int64),
                   rewards=np.zeros((3, 1), np.float32), terminated=True)
    with pytest.raises(ValueError, match=re.escape("per-step shape (5, 5) need a channel axis: (1, *shape) per step")):
        MmreplayReplayBuffer.from_episodes(tmp_path / "b.mmr", [flat], frame_stack=4)
    mixed = [image_episode(rng, 3, True), image_episode(rng, 3, True, shape=(1, 6, 6))]
    with pytest.raises(ValueError, match=re.escape("episodes[1].observations has shape (3, 1, 6, 6); expected (N, *(1, 5, 5))")):
        MmreplayReplayBuffer.from_episodes(tmp_path / "c.mmr", mixed)
    with pytest.raises(ValueError, match="final_observation must be 'zeros' .d3rlpy's. or 'stored'; got 'last'"):
        MmreplayReplayBuffer.from_episodes(tmp_path / "d.mmr", [image_episode(rng, 3, True)], final_observation="last")
    assert sorted(path.name for path in tmp_path.iterdir()) == []
    recorded_store(tmp_path / "r.mmr").close()
    reader = MmreplayReplayBuffer.from_store(tmp_path / "r.mmr", action_size=3)
    with pytest.raises(ValueError, match=re.escape("append needs a store open for appending (mode 'r+'); this one is 'r'")):
        reader.append(np.zeros((2, 2), np.uint8), 0, 0.0)
    writer = MmreplayReplayBuffer.from_store(tmp_path / "r.mmr", "r+", action_size=3)
    with pytest.raises(TypeError, match=re.escape("observation has dtype float32; expected uint8, the store's frame dtype")):
        writer.append(np.zeros((2, 2), np.float32), 0, 0.0)
    with pytest.raises(ValueError, match=re.escape("observation has shape (3, 3); expected one of [(1, 2, 2), (2, 2), (2, 2, 2)]")):
        writer.append(np.zeros((3, 3), np.uint8), 0, 0.0)
    assert writer.store.transitions_added == 6
    with pytest.raises(ValueError, match="cannot sample from a buffer without transitions"):
        MmreplayReplayBuffer(ReplayStore.create(tmp_path / "e.mmr", frame_shape=(2,), capacity=4, stack_size=1),
                             action_size=2).sample_transition_batch(4)


def test_a_store_of_two_envs_gives_each_episode_its_own_transitions(tmp_path: Path) -> None:
    store = ReplayStore.create(tmp_path / "v.mmr", frame_shape=(2,), capacity=100, stack_size=1, num_envs=2,
                               frame_dtype=np.float32)
    for t in range(4):
        obs = np.array([[10 + t, 0], [20 + t, 0]], np.float32)
        store.add(obs, [t, t], [1.0, 2.0], obs + np.float32([[1, 0], [1, 0]]), [t == 3, False], [False, t == 3])
    ours = MmreplayReplayBuffer(store, action_size=4)
    assert [view.transition_count for view in ours.episodes] == [4, 3]
    np.testing.assert_array_equal(ours.episodes[1].observations[:, 0], [20, 21, 22, 23])
    np.random.seed(0)
    batch = ours.sample_transition_batch(200)
    values = batch.observations[:, 0]
    assert set(values.tolist()) == {10, 11, 12, 13, 20, 21, 22}
    nonterminal = batch.terminals[:, 0] == 0
    np.testing.assert_array_equal(batch.next_observations[nonterminal, 0], values[nonterminal] + 1)


def test_mixed_replay_buffer_mixes_a_store_with_d3rlpys_own_buffer(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    episodes = [image_episode(rng, 6, True)]
    mixed = MixedReplayBuffer(MmreplayReplayBuffer.from_episodes(tmp_path / "s.mmr", episodes, frame_stack=3),
                              reference(episodes, 3), 0.5)
    assert len(mixed.sample_transition_batch(8)) == 8 and mixed.transition_count == 12


def vector_episodes(rng: np.random.Generator, count: int) -> list[Episode]:
    return [Episode(observations=rng.random((20, 4)).astype(np.float32), actions=rng.integers(0, 2, (20, 1)),
                    rewards=rng.random((20, 1)).astype(np.float32), terminated=bool(i % 2)) for i in range(count)]


def test_dqn_and_discrete_cql_fit_with_the_losses_of_d3rlpys_own_buffer(tmp_path: Path) -> None:
    episodes = vector_episodes(np.random.default_rng(0), 6)
    losses = {}
    for name, make in (("dqn", d3rlpy.algos.DQNConfig), ("cql", d3rlpy.algos.DiscreteCQLConfig)):
        for kind in ("store", "d3rlpy"):
            dataset = (MmreplayReplayBuffer.from_episodes(tmp_path / f"{name}.mmr", episodes, action_size=2)
                       if kind == "store" else reference(episodes, 1))
            d3rlpy.seed(7)
            algo = make(batch_size=16).create(device="cpu:0")
            result = algo.fit(dataset, n_steps=30, n_steps_per_epoch=30, show_progress=False, save_interval=10**6,
                              experiment_name=f"{name}_{kind}", logger_adapter=d3rlpy.logging.NoopAdapterFactory())
            losses[(name, kind)] = result[-1][1]["loss"]
    assert losses[("dqn", "store")] == losses[("dqn", "d3rlpy")]
    assert losses[("cql", "store")] == losses[("cql", "d3rlpy")]


def test_fit_online_records_into_the_store_and_trains(tmp_path: Path) -> None:
    import gymnasium

    env = gymnasium.make("CartPole-v1", max_episode_steps=40)
    buffer = MmreplayReplayBuffer.create(tmp_path / "online.mmr", env=env, capacity=1000)
    algo = d3rlpy.algos.DQNConfig(batch_size=8).create(device="cpu:0")
    losses = MetricsAdapterFactory()
    algo.fit_online(env, buffer, n_steps=120, n_steps_per_epoch=120, update_start_step=60, show_progress=False,
                    logger_adapter=losses)
    views = list(buffer.episodes)
    assert buffer.store.transitions_added == 120 and np.isfinite(losses.metrics["loss"][-1])
    assert sum(view.transition_count for view in views) == buffer.transition_count
    # each episode ended by termination or by the time limit (its 40 steps kept; d3rlpy counts 39)
    assert all(view.terminated or (view.size(), view.transition_count) == (40, 39) for view in views[:-1])


def test_discrete_decision_transformer_trains_on_trajectories_from_a_store(tmp_path: Path) -> None:
    episodes = vector_episodes(np.random.default_rng(1), 4)
    dataset = MmreplayReplayBuffer.from_episodes(tmp_path / "dt.mmr", episodes, action_size=2)
    d3rlpy.seed(0)
    dt = d3rlpy.algos.DiscreteDecisionTransformerConfig(batch_size=4, context_size=5, num_heads=1, max_timestep=30,
                                                       num_layers=1).create(device="cpu:0")
    losses = MetricsAdapterFactory()
    dt.fit(dataset, n_steps=10, n_steps_per_epoch=10, show_progress=False, save_interval=10**6, logger_adapter=losses)
    assert len(losses.metrics["loss"]) == 1 and np.isfinite(losses.metrics["loss"][0])


class MetricsAdapterFactory(d3rlpy.logging.NoopAdapterFactory):  # type: ignore[misc]
    """d3rlpy's no-op logger that keeps the metrics it is given (``metrics[name]``: one value an epoch)."""

    def __init__(self) -> None:
        self.metrics: dict[str, list[float]] = {}

    def create(self, *args: Any, **kwargs: Any) -> Any:
        factory = self

        class Adapter(d3rlpy.logging.NoopAdapter):  # type: ignore[misc]
            def write_metric(self, epoch: int, step: int, name: str, value: float) -> None:
                factory.metrics.setdefault(name, []).append(value)

        return Adapter()
