"""MmreplayBuffer against Stable-Baselines3's own ReplayBuffer: same transitions, same semantics, same draws.

The differential tests feed both buffers identical rows made the way SB3's ``VecFrameStack`` makes
them (zero-padded stacks at an episode's start, the terminal stack substituted into next_obs of a done
env, ``TimeLimit.truncated`` in infos) and compare every stored position and seeded samples (n-step
ones against ``NStepReplayBuffer``). The model tests run SB3's algorithms on its ``FakeImageEnv``:
``DQN.load`` beside and away from the store, SB3's own save/load, resource-warning and checkpoint flows
on image observations, a second ``learn()``, RGB images with and without ``VecFrameStack``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer

from mmreplay import ReplayStore, StoreLockedError
from mmreplay.sb3 import MmreplayBuffer

FRAME = (6, 7)
N_STACK = 4


class FakeFrameStackRows:
    """Rows like SB3's off-policy loop gives ``replay_buffer.add`` under ``VecFrameStack``."""

    def __init__(self, n_envs: int, rng: np.random.Generator, *, action_space: spaces.Space):
        self.n_envs = n_envs
        self.rng = rng
        self.action_space = action_space
        self.obs = np.stack([self._reset_stack() for _ in range(n_envs)])

    def _frame(self) -> np.ndarray:
        return self.rng.integers(0, 256, FRAME, dtype=np.uint8)

    def _reset_stack(self) -> np.ndarray:
        stack = np.zeros((N_STACK, *FRAME), np.uint8)  # VecFrameStack pads with zeros, not repeats
        stack[-1] = self._frame()
        return stack

    def row(self) -> tuple:
        obs = self.obs.copy()
        next_obs = np.concatenate([obs[:, 1:], np.stack([self._frame()[None] for _ in range(self.n_envs)])], axis=1)
        done = self.rng.random(self.n_envs) < 0.15
        timeout = done & (self.rng.random(self.n_envs) < 0.5)
        infos = [{"TimeLimit.truncated": True} if t else {} for t in timeout]
        new_obs = next_obs.copy()
        for i in np.flatnonzero(done):
            new_obs[i] = self._reset_stack()  # next_obs keeps the terminal stack, as _store_transition does
        self.obs = new_obs
        if isinstance(self.action_space, spaces.Discrete):
            action = self.rng.integers(0, self.action_space.n, self.n_envs)
        else:
            action = self.rng.standard_normal((self.n_envs, *self.action_space.shape)).astype(np.float32)
        reward = self.rng.standard_normal(self.n_envs).astype(np.float32)
        return obs, next_obs, action, reward, done, infos


def make_pair(tmp_path: Path, *, buffer_size: int, n_envs: int, handle_timeout_termination: bool, action_space: spaces.Space):
    observation_space = spaces.Box(0, 255, (N_STACK, *FRAME), np.uint8)
    common = {"device": "cpu", "n_envs": n_envs, "handle_timeout_termination": handle_timeout_termination}
    theirs = ReplayBuffer(buffer_size, observation_space, action_space, optimize_memory_usage=False, **common)
    ours = MmreplayBuffer(buffer_size, observation_space, action_space, path=tmp_path / "sb3.mmr", **common)
    return theirs, ours


def fill(theirs: ReplayBuffer, ours: MmreplayBuffer, rows: int, seed: int, action_space: spaces.Space) -> None:
    source = FakeFrameStackRows(theirs.n_envs, np.random.default_rng(seed), action_space=action_space)
    for _ in range(rows):
        row = source.row()
        theirs.add(*row)
        ours.add(*row)


def assert_samples_equal(expected, got) -> None:
    for name in ("observations", "actions", "next_observations", "dones", "rewards"):
        want, have = getattr(expected, name), getattr(got, name)
        assert have.dtype == want.dtype, name
        assert have.shape == want.shape, name
        assert have.device == want.device, name
        assert th.equal(have, want), name
    assert getattr(got, "discounts", None) is None  # SB3 >= 2.7 has the n-step field


CASES = [
    pytest.param(2, True, spaces.Discrete(6), id="2envs-timeouts-handled"),
    pytest.param(2, False, spaces.Discrete(6), id="2envs-timeouts-as-dones"),
    pytest.param(1, True, spaces.Discrete(3), id="1env"),
    pytest.param(2, True, spaces.Box(-1, 1, (2,), np.float32), id="2envs-box-actions"),
]


@pytest.mark.parametrize(("n_envs", "handle_timeout_termination", "action_space"), CASES)
def test_every_stored_position_matches_sb3s_replay_buffer(tmp_path, n_envs, handle_timeout_termination, action_space):
    theirs, ours = make_pair(
        tmp_path, buffer_size=40, n_envs=n_envs, handle_timeout_termination=handle_timeout_termination, action_space=action_space
    )
    for rows in (7, 33, 95):  # before, at and well past the first wrap of 40 // n_envs rows
        fill(theirs, ours, rows - (ours.store.transitions_added // n_envs), seed=rows, action_space=action_space)
        assert (ours.pos, ours.full, ours.size()) == (theirs.pos, theirs.full, theirs.size())
        positions = np.repeat(np.arange(theirs.size()), n_envs)
        envs = np.tile(np.arange(n_envs), theirs.size())
        got = ours.samples_at(positions, envs)
        timeouts = theirs.timeouts[positions, envs] if handle_timeout_termination else 0
        assert np.array_equal(got.observations.numpy(), theirs.observations[positions, envs])
        assert np.array_equal(got.next_observations.numpy(), theirs.next_observations[positions, envs])
        assert np.array_equal(got.actions.numpy(), theirs.actions[positions, envs])
        assert np.array_equal(got.rewards.numpy()[:, 0], theirs.rewards[positions, envs])
        assert np.array_equal(got.dones.numpy()[:, 0], theirs.dones[positions, envs] * (1 - timeouts))
    ours.close()


@pytest.mark.parametrize(("n_envs", "handle_timeout_termination", "action_space"), CASES)
def test_seeded_samples_equal_sb3s_samples(tmp_path, n_envs, handle_timeout_termination, action_space):
    theirs, ours = make_pair(
        tmp_path, buffer_size=30, n_envs=n_envs, handle_timeout_termination=handle_timeout_termination, action_space=action_space
    )
    fill(theirs, ours, 50, seed=1, action_space=action_space)
    for seed in range(3):
        np.random.seed(seed)
        expected = theirs.sample(64)
        np.random.seed(seed)
        assert_samples_equal(expected, ours.sample(64))
    ours.close()


def test_the_store_keeps_terminated_and_truncated_apart_whatever_sb3_returns_as_dones(tmp_path):
    theirs, ours = make_pair(tmp_path, buffer_size=200, n_envs=2, handle_timeout_termination=False, action_space=spaces.Discrete(2))
    fill(theirs, ours, 100, seed=3, action_space=spaces.Discrete(2))
    batch = ours.store.read(ours.store.stored_steps)
    assert batch.terminated.any() and batch.truncated.any()
    assert not (batch.terminated & batch.truncated).any()
    ours.close()


def test_truncated_next_obs_is_the_terminal_stack_and_the_next_episode_starts_zero_padded(tmp_path):
    space = spaces.Box(0, 255, (N_STACK, *FRAME), np.uint8)
    buffer = MmreplayBuffer(10, space, spaces.Discrete(2), device="cpu", path=tmp_path / "b.mmr")
    source = FakeFrameStackRows(1, np.random.default_rng(0), action_space=spaces.Discrete(2))
    obs, next_obs, action, reward, _, _ = source.row()
    buffer.add(obs, next_obs, action, reward, np.array([True]), [{"TimeLimit.truncated": True}])
    reset = np.zeros((1, N_STACK, *FRAME), np.uint8)
    reset[0, -1] = 7
    buffer.add(reset, np.concatenate([reset[:, 1:], reset[:, -1:] + 1], axis=1), action, reward, np.array([False]), [{}])
    got = buffer.samples_at([0, 1], [0, 0])
    assert np.array_equal(got.next_observations[0].numpy(), next_obs[0])
    assert np.array_equal(got.observations[1].numpy(), reset[0])
    assert got.dones[:, 0].tolist() == [0.0, 0.0]
    assert buffer.store.read([0]).truncated.tolist() == [True]
    buffer.close()


def test_rgb_frames_stacked_along_channels_are_stored_as_frames(tmp_path):
    space = spaces.Box(0, 255, (3 * N_STACK, 5, 6), np.uint8)
    buffer = MmreplayBuffer(8, space, spaces.Discrete(2), device="cpu", path=tmp_path / "rgb.mmr", stack_size=N_STACK)
    assert buffer.store.frame_shape == (3, 5, 6) and buffer.store.stack_size == N_STACK
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (N_STACK + 1, 3, 5, 6), dtype=np.uint8)
    obs, next_obs = frames[:-1].reshape(1, 12, 5, 6), frames[1:].reshape(1, 12, 5, 6)
    buffer.add(obs, next_obs, np.array([1]), np.array([0.5], np.float32), np.array([False]), [{}])
    got = buffer.samples_at([0], [0])
    assert np.array_equal(got.observations.numpy(), obs) and np.array_equal(got.next_observations.numpy(), next_obs)
    buffer.close()


def test_observation_spaces_that_cannot_be_split_into_frames_are_refused(tmp_path):
    with pytest.raises(TypeError, match=r"^observation_space must be a gymnasium Box, Discrete, MultiDiscrete or "
                                        r"MultiBinary; got Dict\('a': Discrete\(3\)\)$"):
        MmreplayBuffer(8, spaces.Dict({"a": spaces.Discrete(3)}), spaces.Discrete(2), path=tmp_path / "x")
    with pytest.raises(ValueError, match=r"^stack_size must be 1 for a Discrete observation space; got 4$"):
        MmreplayBuffer(8, spaces.Discrete(3), spaces.Discrete(2), path=tmp_path / "x", stack_size=4)
    with pytest.raises(ValueError, match=r"stack_size=3 must divide the observation's first axis; observation_space has shape \(4, 84, 84\)"):
        MmreplayBuffer(8, spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(2), path=tmp_path / "x", stack_size=3)
    assert not (tmp_path / "x").exists()


def test_a_pickled_buffer_reopens_its_store(tmp_path):
    import pickle

    theirs, ours = make_pair(tmp_path, buffer_size=20, n_envs=2, handle_timeout_termination=True, action_space=spaces.Discrete(4))
    fill(theirs, ours, 15, seed=5, action_space=spaces.Discrete(4))
    data = pickle.dumps(ours)
    ours.close()
    loaded = pickle.loads(data)
    np.random.seed(0)
    expected = theirs.sample(16)
    np.random.seed(0)
    assert_samples_equal(expected, loaded.sample(16))
    loaded.close()


def test_sb3_dqn_trains_on_real_pong_with_the_mmreplay_buffer(tmp_path, request):
    pytest.importorskip("ale_py")
    import ale_py
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    threads = th.get_num_threads()
    th.set_num_threads(1)  # a CNN this small trains faster on one thread than on contended cores
    request.addfinalizer(lambda: th.set_num_threads(threads))
    # max_episode_steps counts emulator frames (frameskip=1; AtariWrapper skips 4): truncation every 100 steps.
    env = make_atari_env("ALE/Pong-v5", n_envs=2, seed=0, env_kwargs={"frameskip": 1, "max_episode_steps": 400})
    env = VecFrameStack(env, n_stack=4)
    model = DQN(
        "CnnPolicy",
        env,
        buffer_size=300,
        learning_starts=100,
        batch_size=32,
        train_freq=4,
        target_update_interval=100,
        device="cpu",
        seed=0,
        replay_buffer_class=MmreplayBuffer,
        replay_buffer_kwargs={"path": tmp_path / "dqn.mmr"},
    )
    before = [p.detach().clone() for p in model.q_net.parameters()]
    model.learn(total_timesteps=400)
    assert any(not th.equal(a, b) for a, b in zip(before, model.q_net.parameters()))
    buffer = model.replay_buffer
    assert isinstance(buffer, MmreplayBuffer)
    store = buffer.store
    assert store.frame_shape == (84, 84) and store.stack_size == 4 and store.num_envs == 2
    assert len(store) == 300 and store.transitions_added == 400
    batch = store.read(store.stored_steps)
    assert batch.truncated.sum() >= 2  # each env was truncated at step 100, 200 and 300
    samples = buffer.sample(32)
    assert samples.observations.shape == (32, 4, 84, 84) and samples.observations.dtype == th.uint8
    assert samples.actions.shape == (32, 1) and samples.actions.dtype == th.int64
    assert samples.dones.shape == samples.rewards.shape == (32, 1)
    path = store.path
    buffer.close()
    env.close()
    with ReplayStore.open(path) as reopened:
        assert len(reopened) == 300


# -- models on image envs: load, save, pickles, second learn, observation layouts --------------------

SCREEN = 36  # the smallest screen SB3's NatureCNN takes


@pytest.fixture
def one_torch_thread(request):
    threads = th.get_num_threads()
    th.set_num_threads(1)  # a CNN this small trains faster on one thread than on contended cores
    request.addfinalizer(lambda: th.set_num_threads(threads))


def image_env(*, n_channels: int = 1, discrete: bool = True, n_stack: int | None = 4, n_envs: int = 1):
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.envs import FakeImageEnv
    from stable_baselines3.common.vec_env import VecFrameStack

    kwargs = {"screen_height": SCREEN, "screen_width": SCREEN, "n_channels": n_channels, "discrete": discrete}
    env = make_vec_env(FakeImageEnv, n_envs=n_envs, seed=0, env_kwargs=kwargs)
    return env if n_stack is None else VecFrameStack(env, n_stack=n_stack)


def image_model(model_class, path: Path, *, env=None, buffer_size: int = 200, **kwargs):
    env = image_env(discrete=model_class.__name__ == "DQN") if env is None else env
    replay_buffer_kwargs = {"path": path, **kwargs.pop("replay_buffer_kwargs", {})}
    extra = {"target_update_interval": 50} if model_class.__name__ == "DQN" else {}
    return model_class(
        "CnnPolicy", env, buffer_size=buffer_size, learning_starts=50, batch_size=16, train_freq=4,
        device="cpu", seed=0, replay_buffer_class=MmreplayBuffer, replay_buffer_kwargs=replay_buffer_kwargs,
        **extra, **kwargs,
    )


ReplayBufferFields = ("observations", "actions", "next_observations", "dones", "rewards")


def stored_transitions(buffer: MmreplayBuffer):
    positions = np.repeat(np.arange(buffer.size()), buffer.n_envs)
    return buffer.samples_at(positions, np.tile(np.arange(buffer.n_envs), buffer.size()))


def assert_same_transitions(a: MmreplayBuffer, b: MmreplayBuffer) -> None:
    assert (a.pos, a.full, a.size()) == (b.pos, b.full, b.size())
    for name, x, y in zip(ReplayBufferFields, stored_transitions(a), stored_transitions(b)):
        assert th.equal(x, y), name


def test_dqn_load_reopens_the_store_it_trained_with_while_the_trained_model_still_holds_it(tmp_path, one_torch_thread):
    from stable_baselines3 import DQN

    model = image_model(DQN, tmp_path / "dqn.mmr")
    model.learn(120)
    model.save(tmp_path / "m.zip")
    model.replay_buffer.flush()  # what a reader of the store sees: the writer's last commit
    loaded = DQN.load(tmp_path / "m.zip", env=image_env())
    buffer = loaded.replay_buffer
    assert buffer.store.path == (tmp_path / "dqn.mmr") and buffer.store.mode == "r"  # the trained model writes
    assert_same_transitions(model.replay_buffer, buffer)
    loaded.predict(np.zeros((1, 4, SCREEN, SCREEN), np.uint8))
    model.replay_buffer.close()
    loaded.learn(40, reset_num_timesteps=False)  # takes over the store: its first add opens it for writing
    assert buffer.store.mode == "r+" and buffer.store.transitions_added == 160


def test_dqn_load_from_another_working_directory_reopens_the_store_by_its_absolute_path(tmp_path, monkeypatch, one_torch_thread):
    from stable_baselines3 import DQN

    (tmp_path / "train").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "train")
    with pytest.warns(UserWarning, match=r"MmreplayBuffer path 'dqn.mmr' is relative: the store is created at '.*/train/dqn.mmr'"):
        relative = image_model(DQN, Path("dqn.mmr"))
    relative.replay_buffer.close()
    model = image_model(DQN, tmp_path / "train" / "abs.mmr")
    model.learn(60)
    model.save(tmp_path / "m.zip")
    model.replay_buffer.close()
    monkeypatch.chdir(tmp_path / "elsewhere")
    loaded = DQN.load(tmp_path / "m.zip")
    assert loaded.replay_buffer.store.path == tmp_path / "train" / "abs.mmr"
    assert loaded.replay_buffer.size() == 60 and not list((tmp_path / "elsewhere").iterdir())
    loaded.replay_buffer.close()


def test_a_store_whose_layout_differs_from_the_buffers_is_refused_naming_the_field(tmp_path):
    space = spaces.Box(0, 255, (N_STACK, *FRAME), np.uint8)
    MmreplayBuffer(40, space, spaces.Discrete(2), device="cpu", path=tmp_path / "b.mmr").close()
    cases = [
        ((3, *FRAME), spaces.Discrete(2), 40, r"has frame_shape=\(6, 7\); this MmreplayBuffer needs frame_shape=\(3, 6, 7\)"),
        ((2, *FRAME), spaces.Discrete(2), 40, r"has stack_size=4; this MmreplayBuffer needs stack_size=2"),
        ((N_STACK, *FRAME), spaces.Discrete(2), 80, r"has capacity=40; this MmreplayBuffer needs capacity=80"),
        ((N_STACK, *FRAME), spaces.Box(-1, 1, (2,), np.float32), 40, r"has action_shape=\(1,\); this MmreplayBuffer needs action_shape=\(2,\)"),
    ]
    for shape, action_space, buffer_size, message in cases:
        with pytest.raises(ValueError, match=message):
            MmreplayBuffer(buffer_size, spaces.Box(0, 255, shape, np.uint8), action_space, device="cpu",
                           path=tmp_path / "b.mmr", if_exists="reopen")
    with pytest.raises(ValueError, match=r"has num_envs=1; this MmreplayBuffer needs num_envs=2"):
        MmreplayBuffer(40, space, spaces.Discrete(2), device="cpu", n_envs=2, path=tmp_path / "b.mmr", if_exists="reopen")
    with ReplayStore.open(tmp_path / "b.mmr", "r+"):  # not left locked by the refused buffers
        pass


@pytest.mark.parametrize("model_name", ["DQN", "SAC", "TD3"])
def test_save_and_load_of_the_replay_buffer_in_one_process_as_sb3s_own_test_does(tmp_path, model_name, one_torch_thread):
    """SB3's test_save_load_replay_buffer, on an image env: deepcopy, save, load twice, extend."""
    import stable_baselines3
    from copy import deepcopy

    model_class = getattr(stable_baselines3, model_name)
    path = tmp_path / "logs" / "replay_buffer.pkl"
    path.parent.mkdir()
    model = image_model(model_class, tmp_path / "buffer.mmr", env=image_env(discrete=model_name == "DQN"))
    model.learn(72)
    old_replay_buffer = deepcopy(model.replay_buffer)
    model.save_replay_buffer(path)
    model.replay_buffer = None
    for device in ["cpu", "cuda"]:
        model.device = th.device(device)
        model.load_replay_buffer(path)
        assert model.replay_buffer.device.type == model.device.type
    model.device = model.replay_buffer.device = th.device("cpu")
    assert_same_transitions(old_replay_buffer, model.replay_buffer)
    rows = stored_transitions(old_replay_buffer)
    model.replay_buffer.extend(
        rows.observations.numpy()[:, None],
        rows.next_observations.numpy()[:, None],
        rows.actions.numpy()[:, None],
        rows.rewards.numpy(),
        rows.dones.numpy(),
        [[{}]] * len(rows.rewards),
    )
    assert model.replay_buffer.store.transitions_added == 144
    np.random.seed(0)
    model.replay_buffer.sample(8)


@pytest.mark.filterwarnings("error")
def test_saving_and_loading_the_replay_buffer_leaves_no_resource_warning(tmp_path, one_torch_thread):
    """SB3's test_no_resource_warning (its replay buffer part), on an image env, warnings as errors."""
    import tempfile

    from stable_baselines3 import SAC

    model = image_model(SAC, tmp_path / "buffer.mmr", env=image_env(discrete=False))
    model.save_replay_buffer(tmp_path / "replay")
    model.load_replay_buffer(tmp_path / "replay")
    model.save_replay_buffer(str(tmp_path / "replay"))
    model.load_replay_buffer(str(tmp_path / "replay"))
    with tempfile.TemporaryFile() as fp:
        model.save_replay_buffer(fp)
        fp.seek(0)
        model.load_replay_buffer(fp)
        assert not fp.closed
    del model
    import gc

    gc.collect()


def test_a_checkpoint_loads_beside_the_model_that_saved_it(tmp_path, one_torch_thread):
    """SB3's test_checkpoint_additional_info, on an image env: the model is still alive at DQN.load."""
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import CheckpointCallback
    from stable_baselines3.common.vec_env import VecNormalize, VecTransposeImage

    # Channel-first under VecNormalize (SB3 would transpose outside it, and store its untransposed
    # original observations); normalized observations would be float32: rewards only.
    env = VecNormalize(VecTransposeImage(image_env()), norm_obs=False)
    checkpoint_dir = tmp_path / "checkpoints"
    callback = CheckpointCallback(save_freq=100, save_path=checkpoint_dir, save_replay_buffer=True, save_vecnormalize=True)
    model = image_model(DQN, tmp_path / "dqn.mmr", env=env)
    model.learn(100, callback=callback)
    model.learn(32, callback=callback, reset_num_timesteps=False)  # the store goes on past the checkpoint (at 99)
    loaded = DQN.load(checkpoint_dir / "rl_model_100_steps.zip")
    with pytest.warns(UserWarning, match=r"has 132 transitions, 33 more than this buffer holds .* continues from the store's 132"):
        model.replay_buffer.close()  # commits the 130
        loaded.load_replay_buffer(checkpoint_dir / "rl_model_replay_buffer_100_steps.pkl")
    assert loaded.replay_buffer.size() == 132
    VecNormalize.load(checkpoint_dir / "rl_model_vecnormalize_100_steps.pkl", VecTransposeImage(image_env()))


# -- pickles: counts, other processes, the writer lock -------------------------------------------------


def filled_buffer(path: Path, rows: int, *, buffer_size: int = 40, n_envs: int = 2, seed: int = 0, **kwargs) -> MmreplayBuffer:
    space = spaces.Box(0, 255, (N_STACK, *FRAME), np.uint8)
    buffer = MmreplayBuffer(buffer_size, space, spaces.Discrete(3), device="cpu", n_envs=n_envs, path=path, **kwargs)
    source = FakeFrameStackRows(n_envs, np.random.default_rng(seed), action_space=spaces.Discrete(3))
    for _ in range(rows):
        buffer.add(*source.row())
    return buffer


def test_a_deepcopy_reads_the_same_transitions_and_the_original_keeps_writing(tmp_path):
    import copy

    original = filled_buffer(tmp_path / "b.mmr", 12)
    copied = copy.deepcopy(original)
    assert copied.store.mode == "r" and copied.path == original.path
    assert_same_transitions(original, copied)
    source = FakeFrameStackRows(2, np.random.default_rng(9), action_space=spaces.Discrete(3))
    original.add(*source.row())
    assert (original.size(), copied.size()) == (13, 12)  # the copy keeps the rows it was made with
    original.close()
    copied.close()


def test_an_older_pickle_adopts_the_stores_newer_transitions_and_a_store_with_fewer_is_refused(tmp_path):
    import pickle

    buffer = filled_buffer(tmp_path / "b.mmr", 10)
    old = pickle.dumps(buffer)
    source = FakeFrameStackRows(2, np.random.default_rng(7), action_space=spaces.Discrete(3))
    for _ in range(5):
        buffer.add(*source.row())
    newer = pickle.dumps(buffer)
    buffer.close()
    with pytest.warns(UserWarning, match=r"has 30 transitions, 10 more than this buffer holds \(it was pickled before they were added.*\): the buffer continues from the store's 30"):
        loaded = pickle.loads(old)
    assert (loaded.pos, loaded.full, loaded.size()) == (15, False, 15)
    loaded.close()
    filled_buffer(tmp_path / "other.mmr", 3).close()
    (tmp_path / "b.mmr").rename(tmp_path / "moved.mmr")
    (tmp_path / "other.mmr").rename(tmp_path / "b.mmr")
    with pytest.raises(ValueError, match=r"has committed 6 transitions, fewer than the 30 this buffer was pickled with: it is not the store"):
        pickle.loads(newer)
    with ReplayStore.open(tmp_path / "b.mmr", "r+"):  # the refused unpickling left it unlocked
        pass


def test_a_pickled_buffer_loads_in_another_process_from_another_working_directory(tmp_path, monkeypatch):
    import pickle
    import subprocess
    import sys

    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning, match="is relative"):
        buffer = filled_buffer(Path("b.mmr"), 25)  # wraps: 25 rows in 20 positions
    (tmp_path / "b.pkl").write_bytes(pickle.dumps(buffer))
    np.random.seed(3)
    expected = buffer.sample(16)
    script = (
        "import pickle, sys, numpy as np, torch\n"
        "buffer = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "print(buffer.store.mode, buffer.pos, buffer.full)\n"
        "np.random.seed(3)\n"
        "torch.save(buffer.sample(16), sys.argv[2])\n"
    )
    (tmp_path / "elsewhere").mkdir()
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "b.pkl"), str(tmp_path / "s.pt")],
        cwd=tmp_path / "elsewhere", capture_output=True, text=True, check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["r", "5", "True"]  # this process still holds the writer lock
    assert_samples_equal(expected, th.load(tmp_path / "s.pt", weights_only=False))
    buffer.close()


def test_a_buffer_cannot_add_while_another_process_writes_its_store_and_says_so(tmp_path):
    import pickle
    import subprocess
    import sys

    buffer = filled_buffer(tmp_path / "b.mmr", 4)
    (tmp_path / "b.pkl").write_bytes(pickle.dumps(buffer))
    buffer.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from mmreplay import ReplayStore; s = ReplayStore.open(sys.argv[1], 'r+'); "
         "print('held', flush=True); sys.stdin.read()", str(tmp_path / "b.mmr")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**__import__("os").environ},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        loaded = pickle.loads((tmp_path / "b.pkl").read_bytes())
        loaded.sample(4)
        source = FakeFrameStackRows(2, np.random.default_rng(1), action_space=spaces.Discrete(3))
        with pytest.raises(StoreLockedError, match=r"this MmreplayBuffer cannot add: the store at '.*b.mmr' is already open for writing by another process"):
            loaded.add(*source.row())
        loaded.close()
    finally:
        holder.communicate("")


def test_a_second_writer_in_the_same_process_is_told_it_is_this_process(tmp_path):
    buffer = filled_buffer(tmp_path / "b.mmr", 2)
    with pytest.raises(StoreLockedError, match=r"already open for writing in this process \(close that store first"):
        ReplayStore.open(tmp_path / "b.mmr", "r+")
    buffer.close()
    with ReplayStore.open(tmp_path / "b.mmr", "r+"):  # closed: free again
        pass


def test_a_buffer_takes_the_writer_lock_from_another_buffer_of_this_process_at_its_first_add(tmp_path):
    import pickle

    first = filled_buffer(tmp_path / "b.mmr", 6)
    second = pickle.loads(pickle.dumps(first))
    assert (first.store.mode, second.store.mode) == ("r+", "r")
    source = FakeFrameStackRows(2, np.random.default_rng(5), action_space=spaces.Discrete(3))
    second.add(*source.row())
    assert (first.store.mode, second.store.mode) == ("r", "r+") and second.size() == 7
    with pytest.warns(UserWarning, match=r"has 14 transitions, 2 more than this buffer holds"):
        first.add(*FakeFrameStackRows(2, np.random.default_rng(6), action_space=spaces.Discrete(3)).row())
    assert (first.store.mode, second.store.mode, first.size()) == ("r+", "r", 8)
    first.close()
    second.close()


# -- SB3's dones, second learn(), observation layouts, n-step returns, independent tensors -------------


def test_a_second_learn_with_optimize_memory_usage_ends_the_newest_episodes_through_dones(tmp_path, one_torch_thread):
    from stable_baselines3 import DQN

    model = image_model(DQN, tmp_path / "dqn.mmr", env=image_env(n_envs=2), optimize_memory_usage=True)
    model.learn(24)  # 12 rows; FakeImageEnv truncates every 10 steps
    buffer = model.replay_buffer
    newest = buffer.pos - 1
    assert buffer.dones[newest].tolist() == [0.0, 0.0]
    with pytest.warns(UserWarning, match="The last trajectory in the replay buffer will be truncated"):
        model.learn(24)  # SB3 writes replay_buffer.dones[pos - 1] = True first
    assert buffer.dones[newest].tolist() == [1.0, 1.0] and buffer.dones[newest, 1] == 1.0
    assert buffer.store.transitions_added == 48
    got = buffer.samples_at([newest, newest], [0, 1])
    assert got.dones[:, 0].tolist() == [0.0, 0.0]  # a truncation by the caller: bootstrap from the true next obs
    flags = np.asarray(buffer.dones)
    assert flags.shape == (buffer.buffer_size, 2) and flags.dtype == np.float32
    assert flags[:24].sum() == 2 + 2 * 2  # the two marked, and each env's truncation at step 10 and 20
    buffer.close()


def test_dones_marks_the_ended_episodes_for_sampling_and_refuses_what_it_cannot_mean(tmp_path):
    buffer = filled_buffer(tmp_path / "b.mmr", 6, seed=4, handle_timeout_termination=False)
    before = np.asarray(buffer.dones).copy()
    target = np.flatnonzero(before[:6, 1] == 0)[0]
    buffer.dones[target, 1] = True
    after = np.asarray(buffer.dones)
    assert after[target, 1] == 1.0 and (np.delete(after.ravel(), target * 2 + 1) == np.delete(before.ravel(), target * 2 + 1)).all()
    assert buffer.samples_at([target], [1]).dones.item() == 1.0  # handle_timeout_termination=False: done
    with pytest.raises(ValueError, match=r"dones: position 7 holds no transition yet \(pos=6\)"):
        buffer.dones[7] = True
    ended = np.argwhere(before[:6] == 1)
    if len(ended):
        with pytest.raises(ValueError, match="cannot be marked as not done"):
            buffer.dones[ended[0][0], ended[0][1]] = False
    buffer.close()


def frame_rows(frames: np.ndarray, n_stack: int | None, channels: int):
    """obs and next_obs of one env as SB3 gives them, from a sequence of (channels, h, w) frames."""
    if n_stack is None:
        return frames[:-1][:, None], frames[1:][:, None]
    stacks = np.stack([frames[i : i + n_stack].reshape(n_stack * channels, *frames.shape[2:]) for i in range(len(frames) - n_stack + 1)])
    return stacks[:-1][:, None], stacks[1:][:, None]


@pytest.mark.parametrize(
    ("shape", "frame_shape", "stack_size"),
    [
        pytest.param((3, 20, 24), (3, 20, 24), 1, id="rgb"),
        pytest.param((12, 20, 24), (3, 20, 24), 4, id="rgb-vecframestack-4"),
        pytest.param((4, 20, 24), (20, 24), 4, id="gray-vecframestack-4"),
        pytest.param((20, 24, 3), (20, 24, 3), 1, id="rgb-channel-last"),
        pytest.param((4, 20, 24, 3), (20, 24, 3), 4, id="framestackobservation-of-rgb"),
        pytest.param((20, 24), (20, 24), 1, id="gray"),
    ],
)
def test_the_stack_is_inferred_from_the_observation_space_with_no_hand_set_stack_size(tmp_path, shape, frame_shape, stack_size):
    space = spaces.Box(0, 255, shape, np.uint8)
    buffer = MmreplayBuffer(16, space, spaces.Discrete(2), device="cpu", path=tmp_path / "b.mmr")
    assert (buffer.store.frame_shape, buffer.store.stack_size) == (frame_shape, stack_size)
    frame = (shape[0] // stack_size, *shape[1:]) if len(shape) == 3 else shape[1:] if len(shape) == 4 else shape
    frames = np.random.default_rng(0).integers(0, 256, (12, *frame), dtype=np.uint8)
    if len(shape) == 3 and stack_size > 1:
        obs, next_obs = frame_rows(frames, stack_size, frame[0])
    elif len(shape) == 4:
        obs, next_obs = frame_rows(frames[:, None], stack_size, 1)
        obs, next_obs = obs.reshape(-1, 1, *shape), next_obs.reshape(-1, 1, *shape)
    else:
        obs, next_obs = frames[:-1][:, None], frames[1:][:, None]
    for o, n in zip(obs, next_obs):
        buffer.add(o, n, np.array([1]), np.array([0.5], np.float32), np.array([False]), [{}])
    got = buffer.samples_at(np.arange(len(obs)), np.zeros(len(obs), int))
    assert np.array_equal(got.observations.numpy(), obs[:, 0]) and np.array_equal(got.next_observations.numpy(), next_obs[:, 0])
    buffer.close()


def test_a_misread_stack_is_replaced_while_the_store_is_empty_and_refused_naming_stack_size_after(tmp_path):
    space = spaces.Box(0, 255, (6, 10, 12), np.uint8)  # VecFrameStack(n_stack=6) of grayscale: read as 2 RGB frames
    frames = np.random.default_rng(0).integers(0, 256, (8, 1, 10, 12), dtype=np.uint8)
    obs, next_obs = frame_rows(frames, 6, 1)
    args = (np.array([1]), np.array([0.5], np.float32), np.array([False]), [{}])
    buffer = MmreplayBuffer(16, space, spaces.Discrete(2), device="cpu", path=tmp_path / "b.mmr")
    assert (buffer.store.frame_shape, buffer.store.stack_size) == ((3, 10, 12), 2)
    buffer.add(obs[0], next_obs[0], *args)  # refutes it: the empty store is made again
    assert (buffer.store.frame_shape, buffer.store.stack_size) == ((10, 12), 6)
    assert np.array_equal(buffer.samples_at([0], [0]).next_observations.numpy(), next_obs[0])
    buffer.close()
    reopened = MmreplayBuffer(16, space, spaces.Discrete(2), device="cpu", path=tmp_path / "b.mmr", if_exists="reopen")
    assert reopened.store.stack_size == 6 and reopened.size() == 1  # the store's split is kept
    reopened.close()

    blank = np.zeros((1, 6, 10, 12), np.uint8)  # fits every split: decides nothing
    other = MmreplayBuffer(16, space, spaces.Discrete(2), device="cpu", path=tmp_path / "c.mmr")
    other.add(blank, blank, *args)
    with pytest.raises(ValueError, match=r"inferred stack_size=2 \(frames of shape \(3, 10, 12\)\) from the observation space, but next_obs is not obs shifted by one such frame; pass stack_size= to MmreplayBuffer: the data fit stack_size=6, stack_size=1"):
        other.add(obs[0], next_obs[0], *args)
    assert other.store.transitions_added == 1
    other.close()


def test_a_terminating_transition_whose_next_obs_is_the_reset_obs_does_not_refute_the_inferred_stack(tmp_path):
    """CleanRL passes the next episode's reset obs as next_obs at a termination; the store keeps it as given."""
    space = spaces.Box(0, 255, (4, 20, 24), np.uint8)
    rng = np.random.default_rng(0)
    obs, reset = rng.integers(0, 256, (2, 1, 4, 20, 24), dtype=np.uint8)
    buffer = MmreplayBuffer(16, space, spaces.Discrete(2), device="cpu", path=tmp_path / "b.mmr", handle_timeout_termination=False)
    buffer.add(obs, reset, np.array([1]), np.array([1.0], np.float32), np.array([True]), {})
    assert (buffer.store.frame_shape, buffer.store.stack_size) == ((20, 24), 4)
    assert np.array_equal(buffer.samples_at([0], [0]).next_observations.numpy(), reset)
    buffer.close()


@pytest.mark.parametrize(("n_channels", "n_stack"), [(3, None), (3, 2)], ids=["rgb", "rgb-vecframestack-2"])
def test_dqn_trains_on_rgb_images_with_and_without_vecframestack(tmp_path, n_channels, n_stack, one_torch_thread):
    from stable_baselines3 import DQN

    model = image_model(DQN, tmp_path / "dqn.mmr", env=image_env(n_channels=3, n_stack=n_stack))
    model.learn(80)
    store = model.replay_buffer.store
    assert (store.frame_shape, store.stack_size) == ((3, SCREEN, SCREEN), n_stack or 1)
    assert store.transitions_added == 80
    model.replay_buffer.close()


def make_n_step_pair(tmp_path, *, n_steps: int, gamma: float, n_envs: int, handle_timeout_termination: bool, buffer_size: int = 30):
    from stable_baselines3.common.buffers import NStepReplayBuffer

    space = spaces.Box(0, 255, (N_STACK, *FRAME), np.uint8)
    common = {"device": "cpu", "n_envs": n_envs, "handle_timeout_termination": handle_timeout_termination}
    theirs = NStepReplayBuffer(buffer_size, space, spaces.Discrete(4), n_steps=n_steps, gamma=gamma, **common)
    ours = MmreplayBuffer(buffer_size, space, spaces.Discrete(4), path=tmp_path / "n.mmr", n_steps=n_steps, gamma=gamma, **common)
    return theirs, ours


@pytest.mark.parametrize("n_envs", [1, 2])
@pytest.mark.parametrize("handle_timeout_termination", [True, False])
@pytest.mark.parametrize("n_steps", [3, 5])
def test_n_step_samples_equal_sb3s_n_step_replay_buffer(tmp_path, n_envs, handle_timeout_termination, n_steps):
    theirs, ours = make_n_step_pair(tmp_path, n_steps=n_steps, gamma=0.97, n_envs=n_envs, handle_timeout_termination=handle_timeout_termination)
    for rows in (9, 40):  # before and after the first wrap of 30 // n_envs rows
        fill(theirs, ours, rows - ours.store.transitions_added // n_envs, seed=rows, action_space=spaces.Discrete(4))
        for seed in range(3):
            np.random.seed(seed)
            expected = theirs.sample(64)
            np.random.seed(seed)
            got = ours.sample(64)
            for name in ("observations", "actions", "next_observations", "dones", "rewards", "discounts"):
                want, have = getattr(expected, name), getattr(got, name)
                assert have.dtype == want.dtype and have.shape == want.shape, name
                assert th.equal(have, want), name
    ours.close()


def test_n_step_windows_stop_where_the_next_transition_starts_another_episode(tmp_path):
    """SB3's buffer would sum rewards across an episode start that no done marks (a new learn() without
    optimize_memory_usage resets the env); the store knows the episodes apart by their observations."""
    space = spaces.Box(0, 255, (N_STACK, *FRAME), np.uint8)
    buffer = MmreplayBuffer(20, space, spaces.Discrete(2), device="cpu", path=tmp_path / "b.mmr", n_steps=3, gamma=0.5)
    first = FakeFrameStackRows(1, np.random.default_rng(0), action_space=spaces.Discrete(2))
    second = FakeFrameStackRows(1, np.random.default_rng(1), action_space=spaces.Discrete(2))
    rows = []
    for source in (first, second):  # no done between them: the second's obs is not the first's next_obs
        obs, next_obs, action, _, _, _ = source.row()
        rows.append((obs, next_obs))
        buffer.add(obs, next_obs, action, np.array([1.0], np.float32), np.array([False]), [{}])
    got = buffer.n_step_samples_at([0], [0])
    assert got.rewards.item() == 1.0 and got.discounts.item() == 0.5 and got.dones.item() == 0.0
    assert np.array_equal(got.next_observations.numpy(), rows[0][1])
    buffer.close()


def test_sampled_observations_and_next_observations_are_independent_tensors(tmp_path):
    buffer = filled_buffer(tmp_path / "b.mmr", 10)
    for n_steps in (1, 3):
        buffer.n_steps = n_steps
        np.random.seed(0)
        samples = buffer.sample(16)
        next_before = samples.next_observations.clone()
        samples.observations.add_(1)  # an in-place augmentation
        assert th.equal(samples.next_observations, next_before)
        samples.next_observations.zero_()
        np.random.seed(0)
        assert th.equal(buffer.sample(16).observations + 1, samples.observations)
    buffer.close()


def fill_vectors(buffers, space: spaces.Box, rows: int, *, truncated_at: int | None = None, done_at: int | None = None) -> None:
    """Rows of observations drawn from ``space`` (one env, an episode going on), the same in every buffer;
    ``truncated_at`` marks ``TimeLimit.truncated`` without ``done``, as SB3's own n-step test does."""
    rng = np.random.default_rng(0)
    draw = (lambda: rng.random(space.shape) < 0.5) if space.dtype == np.bool_ else (lambda: rng.integers(0, 100, space.shape).astype(space.dtype))
    obs = draw()
    for i in range(rows):
        next_obs = draw()
        infos = [{"TimeLimit.truncated": i == truncated_at}]
        action_space = buffers[0].action_space
        # Actions of the space's own dtype: a float64 space's are cast to float32 by the buffers (GH#1145).
        action = np.array([[rng.integers(0, 2)]]) if isinstance(action_space, spaces.Discrete) else rng.standard_normal((1, 1)).astype(action_space.dtype)
        reward = np.array([rng.standard_normal()])
        for buffer in buffers:
            buffer.add(obs[None], next_obs[None], action, reward, np.array([i == done_at]), infos)
        obs = next_obs


def assert_seeded_samples_equal(theirs, ours, fields=("observations", "actions", "next_observations", "dones", "rewards")) -> None:
    for seed in range(3):
        np.random.seed(seed)
        expected = theirs.sample(16)
        np.random.seed(seed)
        got = ours.sample(16)
        for name in fields:
            want, have = getattr(expected, name), getattr(got, name)
            assert have.dtype == want.dtype and have.shape == want.shape, name
            assert th.equal(have, want), name


SB3_OBSERVATION_DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64, np.float16, np.float32, np.float64, np.bool_]


@pytest.mark.parametrize("dtype", SB3_OBSERVATION_DTYPES, ids=lambda dtype: np.dtype(dtype).name)
@pytest.mark.parametrize(
    "action_space",
    [spaces.Discrete(10), spaces.Box(-1.0, 1.0, dtype=np.float32), spaces.Box(-1.0, 1.0, dtype=np.float64)],
    ids=["discrete", "box-float32", "box-float64"],
)
def test_samples_keep_the_observation_dtype_and_sb3s_action_cast_for_every_dtype_of_sb3s_own_test(tmp_path, dtype, action_space):
    """SB3's test_buffer_dtypes reads ``replay_buffer.observations.dtype``, an array this buffer does not
    keep: the same dtypes, compared with SB3's buffer on seeded samples (float64 actions cast to float32)."""
    space = spaces.Box(0, 1 if dtype == np.bool_ else 100, (3,), dtype)
    theirs = ReplayBuffer(20, space, action_space, device="cpu")
    ours = MmreplayBuffer(20, space, action_space, device="cpu", path=tmp_path / "b.mmr")
    fill_vectors([theirs, ours], space, 12)
    assert_seeded_samples_equal(theirs, ours)
    ours.close()


def test_a_scalar_box_observation_is_stored_as_one_value_and_sampled_in_the_spaces_shape(tmp_path):
    """A Box of shape () (SB3's own buffer cannot sample one: it indexes a third axis) is a frame of one
    value; samples give one value per transition, shape (batch,), as the space's shape says."""
    space = spaces.Box(-100.0, 100.0, shape=(), dtype=np.float32)
    path = tmp_path / "b.mmr"
    buffer = MmreplayBuffer(20, space, spaces.Discrete(2), device="cpu", path=path)
    for step in range(25):  # past the first wrap: positions 0..4 hold steps 20..24
        buffer.add(np.array([step], np.float32), np.array([step + 0.5], np.float32), np.array([1]), np.array([1.0]), np.array([False]), [{}])
    buffer.close()
    reopened = MmreplayBuffer(20, space, spaces.Discrete(2), device="cpu", path=path, if_exists="reopen")
    samples = reopened.samples_at([0, 4, 5, 19], [0, 0, 0, 0])
    assert samples.observations.shape == (4,) and samples.observations.dtype == th.float32
    assert samples.observations.tolist() == [20.0, 24.0, 5.0, 19.0]
    assert samples.next_observations.tolist() == [20.5, 24.5, 5.5, 19.5]
    reopened.close()


@pytest.mark.parametrize("handle_timeout_termination", [True, False])
@pytest.mark.parametrize("n_steps", [1, 3])
def test_a_timeout_without_done_ends_the_window_exactly_where_sb3s_buffer_ends_it(tmp_path, handle_timeout_termination, n_steps):
    """SB3's own n-step test marks ``TimeLimit.truncated`` on an env that is not done: SB3's buffer
    records that timeout (with ``handle_timeout_termination=True``) and stops n-step windows there."""
    from stable_baselines3.common.buffers import NStepReplayBuffer

    space = spaces.Box(0, 1, (4,), np.float32)
    common = {"device": "cpu", "handle_timeout_termination": handle_timeout_termination}
    if n_steps == 1:
        theirs = ReplayBuffer(10, space, spaces.Box(0, 1, (1,), np.float32), **common)
    else:
        theirs = NStepReplayBuffer(10, space, spaces.Box(0, 1, (1,), np.float32), n_steps=n_steps, gamma=0.9, **common)
    ours = MmreplayBuffer(10, space, spaces.Box(0, 1, (1,), np.float32), path=tmp_path / "b.mmr", n_steps=n_steps, gamma=0.9, **common)
    fill_vectors([theirs, ours], space, 8, truncated_at=2)
    fields = ("observations", "actions", "next_observations", "dones", "rewards")
    assert_seeded_samples_equal(theirs, ours, fields + (("discounts",) if n_steps > 1 else ()))
    ours.close()


def test_float64_actions_that_float32_cannot_hold_exactly_are_stored_cast_as_sb3_stores_them(tmp_path):
    """SB3 keeps a float64 action space's actions as float32 (GH#1145) and casts what it is given; the
    store alone refuses a lossy cast, so the buffer casts first."""
    action_space = spaces.Box(-1.0, 1.0, (2,), np.float64)
    buffer = MmreplayBuffer(10, spaces.Box(0, 1, (3,), np.float32), action_space, device="cpu", path=tmp_path / "b.mmr")
    action = np.array([[0.1, -1 / 3]])  # neither is a float32
    obs = np.zeros((1, 3), np.float32)
    buffer.add(obs, obs + 1, action, np.array([0.0]), np.array([False]), [{}])
    stored = buffer.samples_at([0], [0]).actions
    assert stored.dtype == th.float32 and stored.tolist() == [action.astype(np.float32).ravel().tolist()]
    buffer.close()


@pytest.mark.parametrize(
    "space",
    [spaces.Discrete(16), spaces.Discrete(5, start=-2), spaces.MultiDiscrete([3, 4, 5]), spaces.MultiBinary(6),
     spaces.MultiBinary([2, 3])],
    ids=["discrete", "discrete-start", "multidiscrete", "multibinary", "multibinary-2d"],
)
def test_integer_observation_spaces_sample_what_sb3s_buffer_samples(tmp_path, space):
    """FrozenLake's ``Discrete`` states and the other integer spaces SB3 stores: one frame of SB3's shape
    per observation ((1,) for Discrete, whose observations come as (n_envs,)), the space's dtype."""
    theirs = ReplayBuffer(20, space, spaces.Discrete(4), device="cpu")
    ours = MmreplayBuffer(20, space, spaces.Discrete(4), device="cpu", path=tmp_path / "b.mmr")
    space.seed(0)
    obs = space.sample()
    for step in range(30):  # past the first wrap
        next_obs = space.sample()
        done = np.array([step % 7 == 6])
        action = np.array([[step % 4]])
        for buffer in (theirs, ours):
            buffer.add(np.array([obs]), np.array([next_obs]), action, np.array([float(step)]), done, [{}])
        obs = space.sample() if done[0] else next_obs
    assert_seeded_samples_equal(theirs, ours)
    ours.close()


def test_dqn_learns_on_a_discrete_observation_space_with_the_buffer(tmp_path):
    from stable_baselines3 import DQN

    model = DQN("MlpPolicy", "FrozenLake-v1", learning_starts=50, buffer_size=500, train_freq=4, seed=0,
                replay_buffer_class=MmreplayBuffer, replay_buffer_kwargs={"path": str(tmp_path / "frozen.mmr")})
    model.learn(300)
    assert model.replay_buffer.size() == 300
    samples = model.replay_buffer.sample(8)
    assert samples.observations.shape == (8, 1) and samples.observations.dtype == th.int64
    model.replay_buffer.close()
