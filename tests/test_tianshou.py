"""mmreplay.tianshou: Tianshou's vector buffers with their frames in stores, checked against Tianshou's own
``VectorReplayBuffer`` and ``PrioritizedVectorReplayBuffer`` (the reference: the same adds must read,
link, sample and weigh alike), with frames that carry their own step."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tianshou")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tianshou.data import (  # noqa: E402
    Batch,
    Collector,
    PrioritizedVectorReplayBuffer,
    ReplayBuffer,
    ReplayBufferManager,
    VectorReplayBuffer,
)

from mmreplay import StoreExistsError  # noqa: E402
from mmreplay.tianshou import (  # noqa: E402
    MmreplayPrioritizedVectorReplayBuffer,
    MmreplayVectorReplayBuffer,
)

FRAME = (3, 4)
STACK = 4
KEYS = ("obs", "obs_next", "act", "rew", "terminated", "truncated", "done")


class Envs:
    """``num_envs`` envs whose frames are filled with a running frame number (never 0), each stacking
    ``STACK`` of them as ``FrameStackObservation`` does (an episode starts with its first frame repeated)."""

    def __init__(self, num_envs: int) -> None:
        self.counter = 0
        self.obs = [self._reset() for _ in range(num_envs)]

    def _frame(self) -> np.ndarray:
        self.counter += 1
        return np.full(FRAME, self.counter % 251 + 1, np.uint8)

    def _reset(self) -> np.ndarray:
        return np.stack([self._frame()] * STACK)

    def step(self, ids: list[int], ends: list[int]) -> Batch:
        """One row per env in ``ids``; ``ends[i]`` 0 goes on, 1 terminates, 2 truncates."""
        obs = np.stack([self.obs[i] for i in ids])
        obs_next = np.stack([np.concatenate([self.obs[i][1:], self._frame()[None]]) for i in ids])
        ends_array = np.asarray(ends)
        for row, env in enumerate(ids):
            self.obs[env] = self._reset() if ends[row] else obs_next[row]
        return Batch(
            obs=obs, obs_next=obs_next, act=np.asarray(ids, np.int64) + 1, rew=np.arange(len(ids), dtype=float) + 0.5,
            terminated=ends_array == 1, truncated=ends_array == 2, info={"frame": obs_next[:, -1, 0, 0].astype(np.int64)},
        )


def same_reads(reference: ReplayBufferManager, mine: ReplayBufferManager, indices: np.ndarray) -> None:
    expected, got = reference[indices], mine[indices]
    for key in KEYS:
        np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(expected[key]), err_msg=key)
    np.testing.assert_array_equal(got.info.frame, expected.info.frame)


# Each add: which envs step (a non-empty subset, in order) and how each one's transition ends.
adds = st.lists(
    st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0, 0, 0, 0, 1, 2])), min_size=1, max_size=3).map(
        lambda rows: sorted(dict(rows).items())
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(adds=adds, total_size=st.integers(3, 14), seed=st.integers(0, 2**16))
def test_every_slot_reads_links_and_samples_as_in_tianshous_own_buffer(
    tmp_path_factory: pytest.TempPathFactory, adds: list[list[tuple[int, int]]], total_size: int, seed: int
) -> None:
    path = tmp_path_factory.mktemp("buffer") / "stores"
    reference = VectorReplayBuffer(total_size, 3, random_seed=seed)
    mine = MmreplayVectorReplayBuffer(total_size, 3, path=path, stack_size=STACK, random_seed=seed)
    envs = Envs(3)
    for rows in adds:
        ids = [env for env, _ in rows]
        batch = envs.step(ids, [end for _, end in rows])
        for expected, got in zip(reference.add(batch, buffer_ids=ids), mine.add(batch, buffer_ids=ids), strict=True):
            np.testing.assert_array_equal(got, expected)
    slots = np.arange(reference.maxsize)
    assert len(mine) == len(reference)
    same_reads(reference, mine, reference.sample_indices(0))
    np.testing.assert_array_equal(mine.prev(slots), reference.prev(slots))
    np.testing.assert_array_equal(mine.next(slots), reference.next(slots))
    np.testing.assert_array_equal(mine.unfinished_index(), reference.unfinished_index())
    for key in ("done", "terminated", "truncated", "rew", "act"):
        np.testing.assert_array_equal(getattr(mine, key), getattr(reference, key))
    for _ in range(3):
        drawn = reference.sample_indices(8)
        np.testing.assert_array_equal(mine.sample_indices(8), drawn)
    batch, drawn = mine.sample(5)
    expected, expected_drawn = reference.sample(5)
    np.testing.assert_array_equal(drawn, expected_drawn)
    np.testing.assert_array_equal(batch.obs_next, expected.obs_next)


def test_next_obs_at_an_episode_end_is_the_final_frame(tmp_path: Path) -> None:
    buffer = MmreplayVectorReplayBuffer(20, 2, path=tmp_path / "stores", stack_size=STACK)
    envs = Envs(2)
    for ends in ([0, 0], [0, 1], [2, 0], [0, 0]):
        batch = envs.step([0, 1], ends)
        slots, *_ = buffer.add(batch, buffer_ids=[0, 1])
        np.testing.assert_array_equal(buffer[slots].obs_next, batch.obs_next)
    ended = np.flatnonzero(buffer.done)
    assert len(ended) == 2
    # The final frame (the newest of obs_next) is the one the env returned, not the last obs again.
    read = buffer[ended]
    assert (read.obs_next[:, -1] != read.obs[:, -1]).all()
    np.testing.assert_array_equal(read.obs_next[:, :-1], read.obs[:, 1:])


def test_each_sub_buffer_evicts_only_its_own_oldest_transitions(tmp_path: Path) -> None:
    buffer = MmreplayVectorReplayBuffer(8, 2, path=tmp_path / "stores", stack_size=STACK)
    reference = VectorReplayBuffer(8, 2)
    envs = Envs(2)
    first = envs.step([1], [0])
    buffer.add(first, buffer_ids=[1])
    reference.add(first, buffer_ids=[1])
    for _ in range(30):  # env 0 goes round its ring many times; env 1's one transition must stay
        batch = envs.step([0], [0])
        buffer.add(batch, buffer_ids=[0])
        reference.add(batch, buffer_ids=[0])
    np.testing.assert_array_equal(buffer[4].obs, first.obs[0])
    same_reads(reference, buffer, reference.sample_indices(0))
    assert [len(store) for store in buffer.stores] == [4, 1]


def test_prioritized_buffer_weighs_and_samples_as_tianshous_own(tmp_path: Path) -> None:
    reference = PrioritizedVectorReplayBuffer(12, 3, alpha=0.6, beta=0.4)
    mine = MmreplayPrioritizedVectorReplayBuffer(12, 3, alpha=0.6, beta=0.4, path=tmp_path / "stores", stack_size=STACK)
    envs = Envs(3)
    for t in range(9):
        batch = envs.step([0, 1, 2], [int(t % 4 == 3), 0, 0])
        reference.add(batch, buffer_ids=[0, 1, 2])
        mine.add(batch, buffer_ids=[0, 1, 2])
    np.random.seed(7)
    expected, drawn = reference.sample(6)
    np.random.seed(7)
    got, got_drawn = mine.sample(6)
    np.testing.assert_array_equal(got_drawn, drawn)
    np.testing.assert_allclose(got.weight, expected.weight)
    np.testing.assert_array_equal(got.obs_next, expected.obs_next)
    new = np.linspace(0.1, 3.0, len(drawn))
    reference.update_weight(drawn, new)
    mine.update_weight(drawn, new)
    reference.set_beta(0.9)
    mine.set_beta(0.9)
    slots = np.arange(12)
    np.testing.assert_allclose(mine[slots].weight, reference[slots].weight)


def test_hasnull_counts_the_rows_holding_nan_without_reading_a_frame(tmp_path: Path) -> None:
    buffer = MmreplayVectorReplayBuffer(4, 1, path=tmp_path / "stores")
    reference = VectorReplayBuffer(4, 1)
    obs = np.zeros((1, 2), np.float32)
    for t in range(6):
        batch = Batch(obs=obs + t, obs_next=obs + t + 1, act=[0], rew=[1.0], terminated=[False], truncated=[False],
                      info={"x": [np.nan if t == 1 else 0.0]})
        buffer.add(batch, buffer_ids=[0])
        reference.add(batch, buffer_ids=[0])
        assert buffer.hasnull() == reference.hasnull(), t
    assert not buffer.hasnull()  # the NaN row was overwritten at t=5
    buffer.set_array_at_key(np.array([np.nan]), "rew", index=np.array([2]))
    reference.set_array_at_key(np.array([np.nan]), "rew", index=np.array([2]))
    assert buffer.hasnull() and reference.hasnull()
    mine_masks, masks = buffer.isnull(), reference.isnull()
    for key in ("obs", "obs_next", "rew", "act"):
        np.testing.assert_array_equal(mine_masks[key], masks[key], err_msg=key)
    np.testing.assert_array_equal(mine_masks.info.x, masks.info.x)
    nan_frames = Batch(obs=obs + np.nan, obs_next=obs, act=[0], rew=[0.0], terminated=[True], truncated=[False],
                       info={"x": [0.0]})
    buffer.add(nan_frames, buffer_ids=[0])
    reference.add(nan_frames, buffer_ids=[0])
    np.testing.assert_array_equal(buffer.isnull().obs, reference.isnull().obs)


def test_collector_fills_the_buffer_from_several_envs(tmp_path: Path) -> None:
    gym = pytest.importorskip("gymnasium")
    from tianshou.env import DummyVectorEnv

    class Frames(gym.Env):
        """Episodes of 5 steps; frame t of an episode is filled with t + 1, stacked as FrameStackObservation."""

        observation_space = gym.spaces.Box(0, 255, (STACK, *FRAME), np.uint8)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
            super().reset(seed=seed)
            self.t = 0
            self.stack = np.stack([np.full(FRAME, 1, np.uint8)] * STACK)
            return self.stack, {}

        def step(self, action):  # type: ignore[no-untyped-def]
            self.t += 1
            self.stack = np.concatenate([self.stack[1:], np.full((1, *FRAME), self.t + 1, np.uint8)])
            return self.stack, 1.0, self.t == 5, False, {}

    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.utils.net.common import Net

    envs = DummyVectorEnv([Frames for _ in range(3)])
    policy = DiscreteQLearningPolicy(model=Net(state_shape=(STACK, *FRAME), action_shape=2), action_space=Frames.action_space)
    with pytest.raises(ValueError, match="Cannot use ReplayBuffer to collect from multiple envs"):
        Collector(policy, envs, ReplayBuffer(60))
    buffer = MmreplayVectorReplayBuffer(60, 3, path=tmp_path / "stores", stack_size=STACK)
    collector = Collector(policy, envs, buffer)
    collector.reset()
    stats = collector.collect(n_step=30, random=True)
    assert stats.n_collected_steps == 30 and len(buffer) == 30
    ends = np.flatnonzero(buffer.done)
    assert len(ends) == 6
    np.testing.assert_array_equal(buffer[ends].obs_next[:, -1], np.full((6, *FRAME), 6, np.uint8))
    assert [store.transitions_added for store in buffer.stores] == [10, 10, 10]


def test_memory_options_are_refused_with_why(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"takes no ignore_obs_next=True: the stores keep each frame once and obs_next exact"):
        MmreplayVectorReplayBuffer(8, 2, path=tmp_path / "a", ignore_obs_next=True)
    with pytest.raises(ValueError, match=r"takes no save_only_last_obs=True"):
        MmreplayVectorReplayBuffer(8, 2, path=tmp_path / "a", save_only_last_obs=True)
    with pytest.raises(ValueError, match=r"takes stack_num=1 only; got stack_num=4: frame stacks come from the env"):
        MmreplayPrioritizedVectorReplayBuffer(8, 2, alpha=0.6, beta=0.4, path=tmp_path / "a", stack_num=4)
    with pytest.raises(ValueError, match=r"total_size must be >= 1; got 0"):
        MmreplayVectorReplayBuffer(0, 2, path=tmp_path / "a")
    with pytest.raises(TypeError, match=r"path must be a str or os.PathLike"):
        MmreplayVectorReplayBuffer(8, 2, path=3)  # type: ignore[arg-type]


def test_a_refused_add_writes_nothing(tmp_path: Path) -> None:
    buffer = MmreplayVectorReplayBuffer(8, 2, path=tmp_path / "stores", stack_size=STACK)
    envs = Envs(2)
    buffer.add(envs.step([0, 1], [0, 0]), buffer_ids=[0, 1])
    bad = envs.step([0, 1], [0, 0])
    bad.obs_next[1, 0] = 0  # env 1's stack is not obs shifted, in a transition that goes on
    with pytest.raises(ValueError, match=r"obs_next\[1\]\[:-1\] must equal obs\[1\]\[1:\]"):
        buffer.add(bad, buffer_ids=[0, 1])
    wrong_shape = envs.step([0], [0])
    wrong_shape.obs, wrong_shape.obs_next = wrong_shape.obs[:, :, :2], wrong_shape.obs_next[:, :, :2]
    with pytest.raises(ValueError, match=r"obs has shape \(4, 2, 4\) per row; expected \(4, 3, 4\)"):
        buffer.add(wrong_shape, buffer_ids=[0])
    with pytest.raises(TypeError, match=r"obs is a Batch \(a Dict or Tuple observation space\)"):
        buffer.add(Batch(obs=Batch(a=np.zeros((1, 2))), act=[0], rew=[0.0], terminated=[False], truncated=[False]),
                   buffer_ids=[0])
    with pytest.raises(ValueError, match=r"buffer_ids must lie in \[0, 2\)"):
        buffer.add(envs.step([0], [0]), buffer_ids=[2])
    assert len(buffer) == 2
    assert [store.transitions_added for store in buffer.stores] == [1, 1]


def test_reset_empties_the_stores_and_the_slots(tmp_path: Path) -> None:
    buffer = MmreplayVectorReplayBuffer(8, 2, path=tmp_path / "stores", stack_size=STACK)
    reference = VectorReplayBuffer(8, 2)
    envs = Envs(2)
    for _ in range(3):
        batch = envs.step([0, 1], [0, 0])
        buffer.add(batch, buffer_ids=[0, 1])
        reference.add(batch, buffer_ids=[0, 1])
    buffer.reset()
    reference.reset()
    assert len(buffer) == 0 and [len(store) for store in buffer.stores] == [0, 0]
    batch = envs.step([1], [1])
    buffer.add(batch, buffer_ids=[1])
    reference.add(batch, buffer_ids=[1])
    same_reads(reference, buffer, reference.sample_indices(0))


def test_save_hdf5_and_pickle_keep_every_slot_and_reopen_the_stores(tmp_path: Path) -> None:
    buffer = MmreplayPrioritizedVectorReplayBuffer(8, 2, alpha=0.6, beta=0.4, path=tmp_path / "stores", stack_size=STACK)
    envs = Envs(2)
    for t in range(6):
        buffer.add(envs.step([0, 1], [int(t == 2), 0]), buffer_ids=[0, 1])
    buffer.update_weight(np.array([0, 5]), np.array([2.0, 0.5]))
    slots = np.arange(8)
    expected = buffer[slots]
    buffer.save_hdf5(str(tmp_path / "buffer.hdf5"))
    copied = pickle.loads(pickle.dumps(buffer))
    buffer.close()
    loaded = MmreplayPrioritizedVectorReplayBuffer.load_hdf5(str(tmp_path / "buffer.hdf5"))
    for other in (loaded, copied):
        got = other[slots]
        for key in (*KEYS, "weight"):
            np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
        np.testing.assert_array_equal(other.next(slots), buffer.next(slots))
    copied.close()
    loaded.add(envs.step([0], [0]), buffer_ids=[0])  # its first add reopens env 0's store to append
    assert len(loaded) == 8 and loaded.stores[0] is not None and loaded.stores[0].mode == "r+"


def test_a_store_changed_since_the_save_is_refused(tmp_path: Path) -> None:
    buffer = MmreplayVectorReplayBuffer(8, 1, path=tmp_path / "stores", stack_size=STACK)
    envs = Envs(1)
    buffer.add(envs.step([0], [0]), buffer_ids=[0])
    buffer.save_hdf5(str(tmp_path / "buffer.hdf5"))
    buffer.add(envs.step([0], [0]), buffer_ids=[0])
    buffer.close()
    with pytest.raises(ValueError, match=r"holds 2 transitions; the buffer was saved when it held 1"):
        MmreplayVectorReplayBuffer.load_hdf5(str(tmp_path / "buffer.hdf5"))


def test_a_used_directory_is_refused_unless_replaced(tmp_path: Path) -> None:
    path = tmp_path / "stores"
    buffer = MmreplayVectorReplayBuffer(8, 2, path=path)
    buffer.add(Batch(obs=[[1.0], [2.0]], obs_next=[[2.0], [3.0]], act=[0, 0], rew=[0.0, 0.0], terminated=[0, 0],
                     truncated=[0, 0]))
    buffer.close()
    with pytest.raises(StoreExistsError, match=r"already holds \['env-000', 'env-001'\]"):
        MmreplayVectorReplayBuffer(8, 2, path=path)
    (path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"also holds \['notes.txt'\]: not removed"):
        MmreplayVectorReplayBuffer(8, 2, path=path, if_exists="replace")
    (path / "notes.txt").unlink()
    replaced = MmreplayVectorReplayBuffer(8, 2, path=path, if_exists="replace")
    assert len(replaced) == 0 and sorted(p.name for p in path.iterdir()) == []
