"""MmreplayDictBuffer and MmreplayHerBuffer against Stable-Baselines3's DictReplayBuffer and HerReplayBuffer:
the same transitions at every position, the same seeded samples, the same training runs bit for bit.

The rows are made as SB3's off-policy loop makes them for a ``Dict`` space: image keys stacked as
``VecFrameStack`` stacks them (zero-padded at an episode's start, the terminal stack in next_obs of a
done env), vector and ``Discrete`` keys beside them, ``TimeLimit.truncated`` in infos. SB3's own buffer
is the reference model.
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
import torch as th
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stable_baselines3.common.buffers import DictReplayBuffer

from mmreplay.sb3 import MmreplayDictBuffer, MmreplayHerBuffer

FRAME = (5, 6)


def dict_space(n_stack: int, *, channels: int = 1) -> spaces.Dict:
    return spaces.Dict({
        "camera": spaces.Box(0, 255, (n_stack * channels, *FRAME), np.uint8),
        "joints": spaces.Box(-1.0, 1.0, (3,), np.float32),
        "mode": spaces.Discrete(4),
    })


class DictRows:
    """Rows of a dict env under VecFrameStack (image key stacked; the others whole)."""

    def __init__(self, n_envs: int, n_stack: int, rng: np.random.Generator, *, channels: int = 1):
        self.n_envs, self.n_stack, self.rng, self.channels = n_envs, n_stack, rng, channels
        self.obs = {key: np.stack([value for value in values]) for key, values in self._resets().items()}

    def _frame(self) -> np.ndarray:
        return self.rng.integers(0, 256, (self.channels, *FRAME), dtype=np.uint8)

    def _reset(self) -> dict[str, np.ndarray]:
        stack = np.zeros((self.n_stack * self.channels, *FRAME), np.uint8)
        stack[-self.channels :] = self._frame()
        return {"camera": stack, "joints": self.rng.uniform(-1, 1, 3).astype(np.float32), "mode": np.int64(self.rng.integers(4))}

    def _resets(self) -> dict[str, list[np.ndarray]]:
        resets = [self._reset() for _ in range(self.n_envs)]
        return {key: [reset[key] for reset in resets] for key in resets[0]}

    def row(self) -> tuple:
        obs = {key: value.copy() for key, value in self.obs.items()}
        new_frames = np.stack([self._frame() for _ in range(self.n_envs)])
        next_obs = {
            "camera": np.concatenate([obs["camera"][:, self.channels :], new_frames], axis=1),
            "joints": self.rng.uniform(-1, 1, (self.n_envs, 3)).astype(np.float32),
            "mode": self.rng.integers(0, 4, self.n_envs),
        }
        done = self.rng.random(self.n_envs) < 0.15
        timeout = done & (self.rng.random(self.n_envs) < 0.5)
        infos = [{"TimeLimit.truncated": True} if t else {} for t in timeout]
        self.obs = {key: value.copy() for key, value in next_obs.items()}
        for i in np.flatnonzero(done):
            for key, value in self._reset().items():
                self.obs[key][i] = value
        action = self.rng.integers(0, 3, self.n_envs)
        reward = self.rng.standard_normal(self.n_envs).astype(np.float32)
        return obs, next_obs, action, reward, done, infos


def make_pair(tmp_path: Path, *, buffer_size: int, n_envs: int, n_stack: int, handle_timeout_termination: bool = True, **kwargs):
    space = dict_space(n_stack)
    common = {"device": "cpu", "n_envs": n_envs, "handle_timeout_termination": handle_timeout_termination}
    theirs = DictReplayBuffer(buffer_size, space, spaces.Discrete(3), **common)
    ours = MmreplayDictBuffer(buffer_size, space, spaces.Discrete(3), path=tmp_path / "dict.mmr", **common, **kwargs)
    return theirs, ours


def fill(buffers, rows: int, *, n_envs: int, n_stack: int, seed: int) -> None:
    source = DictRows(n_envs, n_stack, np.random.default_rng(seed))
    for _ in range(rows):
        row = source.row()
        for buffer in buffers:
            buffer.add(*copy.deepcopy(row))


def assert_dict_samples_equal(expected, got) -> None:
    for name in ("observations", "next_observations"):
        want, have = getattr(expected, name), getattr(got, name)
        assert list(have) == list(want), name
        for key in want:
            assert have[key].dtype == want[key].dtype and have[key].shape == want[key].shape, (name, key)
            assert th.equal(have[key], want[key]), (name, key)
    for name in ("actions", "dones", "rewards"):
        want, have = getattr(expected, name), getattr(got, name)
        assert have.dtype == want.dtype and have.shape == want.shape, name
        assert th.equal(have, want), name


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n_envs=st.sampled_from([1, 2]),
    n_stack=st.sampled_from([1, 3]),
    rows=st.integers(1, 40),
    handle_timeout_termination=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_every_position_and_seeded_sample_matches_sb3s_dict_replay_buffer(tmp_path_factory, n_envs, n_stack, rows, handle_timeout_termination, seed):
    tmp_path = tmp_path_factory.mktemp("dict")
    theirs, ours = make_pair(tmp_path, buffer_size=24, n_envs=n_envs, n_stack=n_stack, handle_timeout_termination=handle_timeout_termination)
    fill([theirs, ours], rows, n_envs=n_envs, n_stack=n_stack, seed=seed)
    assert (ours.pos, ours.full, ours.size()) == (theirs.pos, theirs.full, theirs.size())
    for key in theirs.observations:  # SB3's arrays, read whole through the views
        assert np.array_equal(np.asarray(ours.observations[key]), theirs.observations[key]), key
        assert np.array_equal(np.asarray(ours.next_observations[key]), theirs.next_observations[key]), key
    for name in ("actions", "rewards", "dones", "timeouts"):
        assert np.array_equal(np.asarray(getattr(ours, name)), getattr(theirs, name)), name
    np.random.seed(seed)
    expected = theirs.sample(32)
    np.random.seed(seed)
    assert_dict_samples_equal(expected, ours.sample(32))
    ours.close()


def test_image_keys_are_one_frame_stream_stored_once_and_the_other_keys_are_fields(tmp_path):
    _, ours = make_pair(tmp_path, buffer_size=40, n_envs=1, n_stack=4)
    store = ours.store
    assert (store.frame_shape, store.stack_size) == ((30,), 4)  # one (5, 6) frame of the camera per step
    assert store.fields == {
        "obs_joints": ((3,), np.dtype(np.float32)), "next_obs_joints": ((3,), np.dtype(np.float32)),
        "obs_mode": ((1,), np.dtype(np.int64)), "next_obs_mode": ((1,), np.dtype(np.int64)),
    }
    ours.close()


def test_a_dict_of_vectors_keeps_every_key_as_fields_beside_a_one_byte_placeholder_frame(tmp_path):
    space = spaces.Dict({"observation": spaces.Box(-1, 1, (4,), np.float32), "desired_goal": spaces.Box(-1, 1, (2,), np.float32)})
    buffer = MmreplayDictBuffer(10, space, spaces.Discrete(2), device="cpu", path=tmp_path / "v.mmr")
    assert (buffer.store.frame_shape, buffer.store.stack_size) == ((1,), 1)
    assert sorted(buffer.store.fields) == ["next_obs_desired_goal", "next_obs_observation", "obs_desired_goal", "obs_observation"]
    buffer.close()


def test_frame_keys_choose_the_frame_stream_and_must_share_one_dtype(tmp_path):
    space = spaces.Dict({"depth": spaces.Box(0, 10, (8, 8), np.float32), "goal": spaces.Box(0, 10, (2,), np.float32),
                         "rgb": spaces.Box(0, 255, (3, 8, 8), np.uint8)})
    buffer = MmreplayDictBuffer(10, space, spaces.Discrete(2), device="cpu", path=tmp_path / "a.mmr", frame_keys=["depth"])
    assert (buffer.store.frame_shape, buffer.store.frame_dtype) == ((64,), np.dtype(np.float32))
    assert sorted(buffer.store.fields) == ["next_obs_goal", "next_obs_rgb", "obs_goal", "obs_rgb"]
    buffer.close()
    with pytest.raises(ValueError, match=r"^frame_keys must share one dtype \(one frame stream\); got \['float32', 'uint8'\]$"):
        MmreplayDictBuffer(10, space, spaces.Discrete(2), device="cpu", path=tmp_path / "b.mmr", frame_keys=["depth", "rgb"])
    with pytest.raises(ValueError, match=r"^frame_keys names 'lidar', which observation_space does not have"):
        MmreplayDictBuffer(10, space, spaces.Discrete(2), device="cpu", path=tmp_path / "b.mmr", frame_keys=["lidar"])
    assert not (tmp_path / "b.mmr").exists()


def test_nested_dicts_and_other_spaces_are_refused_with_the_key(tmp_path):
    nested = spaces.Dict({"inner": spaces.Dict({"x": spaces.Box(0, 1, (2,))})})
    with pytest.raises(TypeError, match=r"^observation_space\['inner'\] must be a Box, Discrete, MultiDiscrete or MultiBinary"):
        MmreplayDictBuffer(10, nested, spaces.Discrete(2), device="cpu", path=tmp_path / "n.mmr")
    with pytest.raises(TypeError, match=r"^observation_space must be a gymnasium Dict for MmreplayDictBuffer"):
        MmreplayDictBuffer(10, spaces.Box(0, 1, (2,)), spaces.Discrete(2), device="cpu", path=tmp_path / "n.mmr")
    with pytest.raises(TypeError, match=r"^MmreplayDictBuffer needs path=, the store's directory"):
        MmreplayDictBuffer(10, dict_space(1), spaces.Discrete(2), device="cpu")
    assert not (tmp_path / "n.mmr").exists()


def test_a_bad_observation_is_refused_naming_its_key_before_anything_is_written(tmp_path):
    _, ours = make_pair(tmp_path, buffer_size=10, n_envs=1, n_stack=1)
    obs, next_obs, action, reward, done, infos = DictRows(1, 1, np.random.default_rng(0)).row()
    with pytest.raises(ValueError, match=r"^next_obs\['joints'\] has shape \(1, 4\); expected \(1, 3\)"):
        ours.add(obs, {**next_obs, "joints": np.zeros((1, 4), np.float32)}, action, reward, done, infos)
    with pytest.raises(ValueError, match=r"^obs has keys \['camera', 'joints'\]; expected \['camera', 'joints', 'mode'\]$"):
        ours.add({"camera": obs["camera"], "joints": obs["joints"]}, next_obs, action, reward, done, infos)
    assert ours.store.transitions_added == 0 and ours.size() == 0
    ours.close()


def test_float64_observations_of_float32_keys_are_cast_as_sb3s_dict_buffer_casts_them(tmp_path):
    theirs, ours = make_pair(tmp_path, buffer_size=10, n_envs=2, n_stack=1)
    obs, next_obs, action, reward, done, infos = DictRows(2, 1, np.random.default_rng(3)).row()
    as_float64 = {**obs, "joints": obs["joints"].astype(np.float64) + 1e-9}
    for buffer in (theirs, ours):
        buffer.add(copy.deepcopy(as_float64), copy.deepcopy(next_obs), action, reward, done, infos)
    assert np.array_equal(np.asarray(ours.observations["joints"]), theirs.observations["joints"])
    assert ours.observations["joints"].dtype == np.float32
    ours.close()


def test_a_refuted_stack_split_falls_back_to_whole_observations_while_the_store_is_empty(tmp_path):
    space = spaces.Dict({"camera": spaces.Box(0, 255, (2, *FRAME), np.uint8)})  # two channels, no stack
    buffer = MmreplayDictBuffer(10, space, spaces.Discrete(2), device="cpu", path=tmp_path / "s.mmr")
    assert buffer.store.stack_size == 2
    rng = np.random.default_rng(1)
    obs = {"camera": rng.integers(0, 256, (1, 2, *FRAME), dtype=np.uint8)}
    next_obs = {"camera": rng.integers(0, 256, (1, 2, *FRAME), dtype=np.uint8)}
    buffer.add(obs, next_obs, np.array([1]), np.array([0.5]), np.array([False]), [{}])
    assert (buffer.store.frame_shape, buffer.store.stack_size) == ((60,), 1)
    assert np.array_equal(np.asarray(buffer.next_observations["camera"])[0], next_obs["camera"])
    buffer.close()
    reopened = MmreplayDictBuffer(10, space, spaces.Discrete(2), device="cpu", path=tmp_path / "s.mmr", if_exists="reopen")
    assert reopened.size() == 1 and reopened.store.stack_size == 1
    reopened.close()


def test_a_pickled_and_a_deepcopied_dict_buffer_reopen_the_store_with_the_same_transitions(tmp_path):
    _, ours = make_pair(tmp_path, buffer_size=20, n_envs=2, n_stack=3)
    fill([ours], 14, n_envs=2, n_stack=3, seed=5)
    loaded = pickle.loads(pickle.dumps(ours))
    duplicate = copy.deepcopy(ours)
    for other in (loaded, duplicate):
        assert (other.pos, other.full) == (ours.pos, ours.full)
        for key in ours.observations:
            assert np.array_equal(np.asarray(other.observations[key]), np.asarray(ours.observations[key]))
    fill([ours], 3, n_envs=2, n_stack=3, seed=6)  # the original writes on: a copy reads what it held
    assert duplicate.size() == 10 and ours.size() == 10 and ours.full
    for buffer in (ours, loaded, duplicate):
        buffer.close()


# -- training runs ----------------------------------------------------------------------------------


@pytest.fixture
def one_torch_thread():
    threads = th.get_num_threads()
    th.set_num_threads(1)
    yield
    th.set_num_threads(threads)


def dqn_parameters(model) -> list[th.Tensor]:
    return [parameter.detach().clone() for parameter in model.policy.parameters()]


@pytest.mark.parametrize("n_stack", [None, 2], ids=["no-stack", "vecframestack-2"])
def test_a_short_multi_input_dqn_run_is_bit_identical_to_sb3s_dict_replay_buffer(tmp_path, n_stack, one_torch_thread):
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.envs import SimpleMultiObsEnv
    from stable_baselines3.common.vec_env import VecFrameStack

    def train(buffer_class, kwargs):
        np.random.seed(0)  # SimpleMultiObsEnv draws its images with numpy's global generator when it is made
        env = make_vec_env(lambda: SimpleMultiObsEnv(random_start=True), n_envs=2, seed=0)
        if n_stack:
            env = VecFrameStack(env, n_stack=n_stack)
        model = DQN("MultiInputPolicy", env, buffer_size=300, learning_starts=40, train_freq=2, gradient_steps=1,
                    target_update_interval=50, batch_size=16, policy_kwargs=dict(net_arch=[32]), seed=3,
                    replay_buffer_class=buffer_class, replay_buffer_kwargs=kwargs, device="cpu")
        model.learn(400)  # the ring of 150 rows wraps
        return model

    theirs = train(DictReplayBuffer, {})
    ours = train(MmreplayDictBuffer, {"path": tmp_path / "dqn.mmr"})
    assert ours.replay_buffer.store.transitions_added == 400 and ours.replay_buffer.full
    assert ours.replay_buffer.store.stack_size == (n_stack or 1)
    for want, have in zip(dqn_parameters(theirs), dqn_parameters(ours), strict=True):
        assert th.equal(want, have)
    np.random.seed(9)
    expected = theirs.replay_buffer.sample(64)
    np.random.seed(9)
    assert_dict_samples_equal(expected, ours.replay_buffer.sample(64))
    ours.replay_buffer.close()


@pytest.mark.parametrize("image_obs_space", [False, True], ids=["vectors", "images"])
def test_her_over_the_store_trains_bit_identically_to_sb3s_her_replay_buffer(tmp_path, image_obs_space, one_torch_thread):
    from stable_baselines3 import DQN, HerReplayBuffer
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.envs import BitFlippingEnv

    def train(buffer_class, kwargs):
        env = make_vec_env(lambda: BitFlippingEnv(n_bits=4, continuous=False, image_obs_space=image_obs_space), n_envs=2, seed=0)
        model = DQN("MultiInputPolicy", env, buffer_size=200, learning_starts=30, train_freq=2, batch_size=16, seed=1,
                    policy_kwargs=dict(net_arch=[32]), replay_buffer_class=buffer_class, device="cpu",
                    replay_buffer_kwargs=dict(n_sampled_goal=2, goal_selection_strategy="future", **kwargs))
        model.learn(260)  # past the first wrap: HER drops the overwritten episodes
        return model

    theirs = train(HerReplayBuffer, {})
    ours = train(MmreplayHerBuffer, {"path": tmp_path / "her.mmr"})
    assert isinstance(ours.replay_buffer, HerReplayBuffer) and ours.replay_buffer.full
    assert np.array_equal(ours.replay_buffer.ep_length, theirs.replay_buffer.ep_length)
    for want, have in zip(dqn_parameters(theirs), dqn_parameters(ours), strict=True):
        assert th.equal(want, have)
    np.random.seed(4)
    expected = theirs.replay_buffer.sample(32)
    np.random.seed(4)
    assert_dict_samples_equal(expected, ours.replay_buffer.sample(32))
    ours.replay_buffer.close()


def test_her_truncates_the_last_trajectory_of_a_loaded_buffer_through_dones_and_timeouts(tmp_path):
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.envs import BitFlippingEnv

    env = make_vec_env(lambda: BitFlippingEnv(n_bits=4, continuous=True), n_envs=2, seed=0)
    buffer = MmreplayHerBuffer(100, env.observation_space, env.action_space, env, device="cpu", n_envs=2,
                               path=tmp_path / "her.mmr")
    rng = np.random.default_rng(0)
    obs = env.reset()
    for _ in range(3):  # BitFlippingEnv episodes last 4 steps: both episodes unfinished
        actions = rng.random((2, 4)).astype(np.float32)
        next_obs, rewards, dones, infos = env.step(actions)
        buffer.add(obs, next_obs, actions, rewards, dones, infos)
        obs = next_obs
    loaded = pickle.loads(pickle.dumps(buffer))
    assert loaded.env is None
    loaded.set_env(env)
    with pytest.warns(UserWarning, match="The last trajectory in the replay buffer will be truncated"):
        loaded.truncate_last_trajectory()
    assert loaded.dones[2].tolist() == [1.0, 1.0] and loaded.timeouts[2].tolist() == [1.0, 1.0]
    assert (loaded.ep_length[:3] == 3).all()
    assert buffer.dones[2].tolist() == [0.0, 0.0]  # the original keeps its own flags, as SB3's copy does
    samples = loaded.sample(8)
    assert samples.dones.sum() == 0  # truncated: bootstrap
    for other in (buffer, loaded):
        other.close()


@pytest.mark.parametrize("steps", [37, 230], ids=["before-the-wrap", "after-the-wrap"])
def test_her_over_a_reopened_store_rebuilds_the_episodes_its_bookkeeping_had(tmp_path, steps):
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.envs import BitFlippingEnv

    env = make_vec_env(lambda: BitFlippingEnv(n_bits=6, continuous=True), n_envs=2, seed=0)
    buffer = MmreplayHerBuffer(200, env.observation_space, env.action_space, env, device="cpu", n_envs=2, path=tmp_path / "her.mmr")
    rng = np.random.default_rng(0)
    obs = env.reset()
    for _ in range(steps):  # episodes of up to 6 steps, ended by reaching the goal or the time limit
        actions = (rng.random((2, 6)) < 0.3).astype(np.float32)
        next_obs, rewards, dones, infos = env.step(actions)
        buffer.add(obs, next_obs, actions, rewards, dones, infos)
        obs = next_obs
    buffer.close()
    reopened = MmreplayHerBuffer(200, env.observation_space, env.action_space, env, device="cpu", n_envs=2,
                                 path=tmp_path / "her.mmr", if_exists="reopen")
    valid = buffer.ep_length > 0
    assert np.array_equal(reopened.ep_length > 0, valid) and valid.any()
    assert np.array_equal(reopened.ep_length[valid], buffer.ep_length[valid])
    assert np.array_equal(reopened.ep_start[valid], buffer.ep_start[valid])
    assert np.array_equal(reopened._current_ep_start, buffer._current_ep_start)
    reopened.sample(16)
    reopened.close()
