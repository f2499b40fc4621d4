"""The store behind an SB3 buffer: a training run never adopts a store it did not write, while
``DQN.load``, a pickle and an explicit reopen find theirs; SB3's memory-saving draws; SB3's casts."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer

from mmreplay import ReplayStore, StoreExistsError, StoreLockedError
from mmreplay.sb3 import MmreplayBuffer, MmreplayDictBuffer

SPACE = spaces.Box(0, 255, (4, 6, 7), np.uint8)


def vector_rows(space: spaces.Box, rows: int, *, seed: int, n_envs: int = 1, episode: int = 7):
    """Rows of a vector env whose episodes end every ``episode`` steps (terminated); next_obs of a
    step is the obs of the next one within an episode, as SB3's memory-saving buffer needs."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (n_envs, *space.shape)).astype(space.dtype)
    for step in range(rows):
        next_obs = rng.uniform(-1, 1, (n_envs, *space.shape)).astype(space.dtype)
        done = np.full(n_envs, (step + 1) % episode == 0)
        yield obs, next_obs, rng.integers(0, 3, n_envs), rng.standard_normal(n_envs).astype(np.float32), done, [{}] * n_envs
        obs = rng.uniform(-1, 1, (n_envs, *space.shape)).astype(space.dtype) if done[0] else next_obs


def test_a_new_buffer_refuses_a_store_left_at_its_path_saying_what_it_found_and_the_choices(tmp_path):
    path = tmp_path / "run.mmr"
    first = MmreplayBuffer(40, SPACE, spaces.Discrete(2), device="cpu", path=path)
    first.close()
    message = (
        r"^MmreplayBuffer: '.*run.mmr' holds a store of 0 transitions added \(0 kept\) with frames \(6, 7\) uint8, "
        r"stack_size=4, num_envs=1, capacity=40, left by an earlier run; a new buffer does not adopt a store it did "
        r"not write \(a re-run would train on the earlier run's data\)\. Choose one: a new path for each run "
        r"\(such as one named after the run\), if_exists='replace' to delete it and start empty, or "
        r"if_exists='reopen' to go on with its transitions"
    )
    with pytest.raises(StoreExistsError, match=message):
        MmreplayBuffer(40, SPACE, spaces.Discrete(2), device="cpu", path=path)
    other_game = spaces.Box(0, 255, (4, 8, 8), np.uint8)
    with pytest.raises(FileExistsError, match="left by an earlier run"):  # another game's store too
        MmreplayBuffer(40, other_game, spaces.Discrete(2), device="cpu", path=path)
    with pytest.raises(StoreExistsError, match="left by an earlier run"):
        MmreplayDictBuffer(40, spaces.Dict({"a": SPACE}), spaces.Discrete(2), device="cpu", path=path)
    with ReplayStore.open(path, "r+"):  # untouched, and not left locked
        pass


def test_if_exists_replace_deletes_the_old_store_and_starts_empty_and_reopen_goes_on(tmp_path):
    path = tmp_path / "run.mmr"
    space = spaces.Box(-1, 1, (3,), np.float32)
    first = MmreplayBuffer(20, space, spaces.Discrete(3), device="cpu", path=path)
    for row in vector_rows(space, 5, seed=0):
        first.add(*row)
    first.close()
    reopened = MmreplayBuffer(20, space, spaces.Discrete(3), device="cpu", path=path, if_exists="reopen")
    assert reopened.size() == 5
    reopened.close()
    with pytest.warns(UserWarning, match=r"if_exists='replace': deleting '.*run.mmr' holds a store of 5 transitions"):
        replaced = MmreplayBuffer(20, spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(3), device="cpu", path=path, if_exists="replace")
    assert replaced.size() == 0 and replaced.store.frame_shape == (4,)
    with pytest.raises(StoreLockedError, match=r"^if_exists='replace' cannot delete the store: .*close the buffer that writes it"):
        MmreplayBuffer(20, space, spaces.Discrete(3), device="cpu", path=path, if_exists="replace")
    replaced.close()
    with pytest.raises(ValueError, match=r"^if_exists must be one of 'error', 'reopen', 'replace'; got 'append'$"):
        MmreplayBuffer(20, space, spaces.Discrete(3), device="cpu", path=tmp_path / "new.mmr", if_exists="append")
    assert not (tmp_path / "new.mmr").exists()


def test_replace_refuses_a_path_that_holds_no_store(tmp_path):
    path = tmp_path / "notes"
    path.mkdir()
    (path / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"^'.*notes' exists and is not a store this buffer can use \(StoreNotFoundError"):
        MmreplayBuffer(20, SPACE, spaces.Discrete(2), device="cpu", path=path, if_exists="replace")
    assert (path / "keep.txt").read_text() == "mine"


def test_dqn_load_and_a_pickle_reopen_their_store_while_a_second_training_run_is_refused(tmp_path):
    from stable_baselines3 import DQN

    path = tmp_path / "dqn.mmr"
    kwargs = dict(buffer_size=100, learning_starts=20, policy_kwargs=dict(net_arch=[16]), seed=0, device="cpu",
                  replay_buffer_class=MmreplayBuffer, replay_buffer_kwargs=dict(path=path))
    model = DQN("MlpPolicy", "CartPole-v1", **kwargs)
    model.learn(30)
    model.save(tmp_path / "model.zip")
    model.save_replay_buffer(tmp_path / "buffer.pkl")
    loaded = DQN.load(tmp_path / "model.zip", device="cpu")  # the kwargs in the zip: the store is its own
    added = model.num_timesteps  # learn(30) collects whole rounds of train_freq steps
    assert loaded.replay_buffer.store.path == path and loaded.replay_buffer.size() == added
    with open(tmp_path / "buffer.pkl", "rb") as file:
        unpickled = pickle.load(file)
    assert unpickled.size() == added
    with pytest.raises(StoreExistsError, match="left by an earlier run"):
        DQN("MlpPolicy", "CartPole-v1", **kwargs)  # the same script run again
    for buffer in (model.replay_buffer, loaded.replay_buffer, unpickled):
        buffer.close()


@pytest.mark.parametrize("n_envs", [1, 2])
def test_optimize_memory_usage_draws_as_sb3s_memory_saving_buffer_before_and_after_the_wrap(tmp_path, n_envs):
    space = spaces.Box(-1, 1, (3,), np.float32)
    theirs = ReplayBuffer(30, space, spaces.Discrete(3), device="cpu", n_envs=n_envs, optimize_memory_usage=True,
                          handle_timeout_termination=False)
    ours = MmreplayBuffer(30, space, spaces.Discrete(3), device="cpu", n_envs=n_envs, optimize_memory_usage=True,
                          handle_timeout_termination=False, path=tmp_path / "b.mmr")
    rows = 0
    for total in (9, 15, 47):  # before the wrap, at it, and past it (buffer_size 30 // n_envs rows)
        for row in list(vector_rows(space, total, seed=2, n_envs=n_envs))[rows:]:
            theirs.add(*row)
            ours.add(*row)
        rows = total
        for seed in range(3):
            np.random.seed(seed)
            expected = theirs.sample(64)
            np.random.seed(seed)
            got = ours.sample(64)
            assert th.equal(expected.observations, got.observations)
            assert th.equal(expected.actions, got.actions) and th.equal(expected.rewards, got.rewards)
            # SB3's memory-saving next observation of an episode's last step is the next episode's first
            # obs; this buffer keeps the true one. Elsewhere they agree, and dones do too.
            assert th.equal(expected.dones, got.dones)
            going_on = got.dones[:, 0] == 0
            assert th.equal(expected.next_observations[going_on], got.next_observations[going_on])
    ours.close()


def test_a_float64_observation_of_a_float32_box_is_cast_as_sb3s_buffer_casts_it(tmp_path):
    space = spaces.Box(-1, 1, (3,), np.float32)
    theirs = ReplayBuffer(10, space, spaces.Discrete(3), device="cpu", n_envs=2)
    ours = MmreplayBuffer(10, space, spaces.Discrete(3), device="cpu", n_envs=2, path=tmp_path / "b.mmr")
    obs = np.random.default_rng(0).uniform(-1, 1, (2, 3))  # float64, as SubprocVecEnv hands some envs' obs
    next_obs = obs + 1e-9
    for buffer in (theirs, ours):
        buffer.add(obs, next_obs, np.array([1, 2]), np.array([0.5, 1.0]), np.array([False, False]), [{}, {}])
    assert ours.observations.dtype == np.float32
    assert np.array_equal(np.asarray(ours.observations), theirs.observations)
    assert np.array_equal(np.asarray(ours.next_observations), theirs.next_observations)
    ours.close()


def test_float64_observations_under_subprocvecenv_train_without_a_dtype_error(tmp_path):
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv

    class Float64Obs(gym.ObservationWrapper):
        def observation(self, observation):
            return np.asarray(observation, dtype=np.float64)  # a float32 Box, float64 values

    env = make_vec_env("CartPole-v1", n_envs=2, wrapper_class=Float64Obs, vec_env_cls=SubprocVecEnv,
                       vec_env_kwargs=dict(start_method="fork"))
    try:
        model = DQN("MlpPolicy", env, buffer_size=100, learning_starts=10, policy_kwargs=dict(net_arch=[8]), device="cpu",
                    replay_buffer_class=MmreplayBuffer, replay_buffer_kwargs=dict(path=tmp_path / "b.mmr"))
        model.learn(20)
        assert model.replay_buffer.size() == model.num_timesteps // 2 and model.replay_buffer.store.frame_dtype == np.float32
        model.replay_buffer.close()
    finally:
        env.close()


def test_a_buffer_pickled_by_the_earlier_mmreplay_still_loads_and_adds(tmp_path):
    from mmreplay.sb3.observations import StoreLayout

    space = spaces.Box(-1, 1, (3,), np.float32)
    buffer = MmreplayBuffer(20, space, spaces.Discrete(3), device="cpu", path=tmp_path / "b.mmr")
    for row in vector_rows(space, 7, seed=1):
        buffer.add(*row)
    buffer.flush()
    # The state the earlier MmreplayBuffer pickled: its counts in the buffer, a layout without fields.
    earlier_layout = object.__new__(StoreLayout)
    earlier_layout.__dict__.update({key: value for key, value in vars(buffer._layout).items() if key != "fields"})
    state = {key: value for key, value in vars(buffer).items() if key != "_rows"}
    state |= {"path": str(buffer.path), "_transitions": 7, "_cut_steps": set(), "_layout": earlier_layout}
    expected = np.asarray(buffer.observations)
    buffer.close()
    loaded = MmreplayBuffer.__new__(MmreplayBuffer)
    loaded.__setstate__(state)
    assert loaded.size() == 7 and np.array_equal(np.asarray(loaded.observations), expected)
    loaded.add(*next(vector_rows(space, 1, seed=2)))
    assert loaded.store.transitions_added == 8
    loaded.close()
