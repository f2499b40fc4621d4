"""The gymnasium recorders on real Atari envs: every transition recorded, with the true final observation,
in both vector autoreset modes, for frame stacks and single frames.

Breakout with ``terminal_on_life_loss`` terminates every few dozen steps and a time limit truncates
the rest, so short runs cross both kinds of episode end. The expected transitions are rebuilt from
what the wrapped env returned, by README's recipes.

The tests run on gymnasium 1.x and on 0.29 (CleanRL's pin); each test that needs one of them says so.
Gymnasium 0.29's vector envs reset in the ending step and name the final observation
``info["final_observation"]``: a fake vector env that does so checks that on 1.x too.
"""

from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
ale_py = pytest.importorskip("ale_py")
from gymnasium.spaces import Box, MultiDiscrete
from gymnasium.vector import SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import batch_space

from mmreplay import ReplayStore
from mmreplay.recorder import RecordEpisodes, RecordVectorEpisodes

GYMNASIUM_1 = int(gym.__version__.split(".")[0]) >= 1
if GYMNASIUM_1:
    from gymnasium.vector import AutoresetMode

    gym.register_envs(ale_py)  # gymnasium 0.29 finds ale_py's envs by importing it
needs_gymnasium_1 = pytest.mark.skipif(not GYMNASIUM_1, reason=f"autoreset modes need gymnasium 1.x; {gym.__version__}")
needs_gymnasium_0 = pytest.mark.skipif(GYMNASIUM_1, reason=f"gymnasium 0.29's vector envs; {gym.__version__}")
# The info keys of a same-step autoreset, (final observations, which envs ended): gymnasium 1.x, 0.29.
FINAL_OBS_KEYS = (("final_obs", "_final_obs"), ("final_observation", "_final_observation"))
FrameStack = getattr(gym.wrappers, "FrameStackObservation", None) or gym.wrappers.FrameStack
STEPS = 100


def make_breakout(*, stacked: bool, max_episode_steps: int):
    def make():
        # max_episode_steps counts emulator frames: AtariPreprocessing skips 4 per step.
        env = gym.make("ALE/Breakout-v5", frameskip=1, max_episode_steps=max_episode_steps)
        env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, terminal_on_life_loss=True)
        return FrameStack(env, 4) if stacked else env

    return make


def run_vector(envs, steps: int, seed: int = 0) -> list[tuple]:
    """Step ``envs`` with random actions; return each step's (obs, action, outputs of step)."""
    envs.action_space.seed(seed)
    obs, _ = envs.reset(seed=seed)
    history = []
    for _ in range(steps):
        action = envs.action_space.sample()
        next_obs, reward, terminated, truncated, info = envs.step(action)
        history.append((obs, action, next_obs, reward, terminated, truncated, info))
        obs = next_obs
    return history


def expected_transitions(history: list[tuple], *, same_step: bool) -> list[tuple]:
    """README's recipes, one env entry at a time: (obs, action, reward, next_obs, terminated, truncated)."""
    expected = []
    resetting = np.zeros(len(history[0][1]), bool)
    for obs, action, next_obs, reward, terminated, truncated, info in history:
        for env in range(len(action)):
            real_next = next_obs[env]
            for final_key, ended_key in FINAL_OBS_KEYS:
                if same_step and info.get(ended_key, np.zeros(len(action), bool))[env]:
                    real_next = np.asarray(info[final_key][env])
            if same_step or not resetting[env]:
                expected.append((obs[env], action[env], reward[env], real_next, terminated[env], truncated[env]))
        resetting = terminated | truncated
    return expected


def assert_store_holds(store: ReplayStore, expected: list[tuple]) -> None:
    assert len(store) == len(expected)
    batch = store.read(store.stored_steps)
    for i, (obs, action, reward, next_obs, terminated, truncated) in enumerate(expected):
        obs, next_obs = np.asarray(obs), np.asarray(next_obs)  # gymnasium 0.29's FrameStack gives LazyFrames
        stack = (store.stack_size, *store.frame_shape)
        if obs.shape == stack:
            assert np.array_equal(batch.obs[i], obs) and np.array_equal(batch.next_obs[i], next_obs), i
        else:  # single frames: the newest frame of each stack the store rebuilt
            assert np.array_equal(batch.obs[i][-1], obs) and np.array_equal(batch.next_obs[i][-1], next_obs), i
        assert batch.action[i] == action and batch.reward[i] == np.float32(reward)
        assert (batch.terminated[i], batch.truncated[i]) == (terminated, truncated), i


@needs_gymnasium_1
@pytest.mark.parametrize("mode_name", ["NEXT_STEP", "SAME_STEP"], ids=["next-step", "same-step"])
@pytest.mark.parametrize("stacked", [True, False], ids=["stacks", "frames"])
def test_a_vector_env_is_recorded_with_final_observations_in_both_autoreset_modes(tmp_path, mode_name, stacked):
    mode = AutoresetMode[mode_name]
    # Two time limits, so the envs end episodes at different steps.
    envs = SyncVectorEnv(
        [make_breakout(stacked=stacked, max_episode_steps=m) for m in (120, 200)], autoreset_mode=mode
    )
    with ReplayStore.create(tmp_path / "rec.mmr", frame_shape=(84, 84), capacity=1000, num_envs=2) as store:
        recorder = RecordVectorEpisodes(envs, store)
        assert recorder.autoreset_mode is mode
        history = run_vector(recorder, STEPS)
        expected = expected_transitions(history, same_step=mode is AutoresetMode.SAME_STEP)
        ended = [t for t in expected if t[4] or t[5]]
        assert any(t[4] for t in ended) and any(t[5] for t in ended)  # both kinds of episode end happened
        assert len(expected) == 2 * STEPS - (len(ended) if mode is AutoresetMode.NEXT_STEP else 0) + (
            # next-step: an env that ended on the very last step has not yet returned its reset entry
            int(np.sum(history[-1][4] | history[-1][5])) if mode is AutoresetMode.NEXT_STEP else 0
        )
        assert_store_holds(store, expected)
        episodes = store.episodes()
        assert {e.ended_by for e in episodes} >= {"terminated", "truncated"}
        recorder.close()


def test_the_final_observation_of_an_ended_episode_is_not_its_reset_observation(tmp_path):
    envs = SyncVectorEnv([make_breakout(stacked=True, max_episode_steps=m) for m in (80, 100)])
    with ReplayStore.create(tmp_path / "rec.mmr", frame_shape=(84, 84), capacity=1000, num_envs=2) as store:
        history = run_vector(RecordVectorEpisodes(envs, store), 60)
        batch = store.read(store.stored_steps)
        checked = 0
        for episode in store.episodes():
            last = episode.steps[-1]
            later = [s for s in range(last + 1, store.transitions_added) if batch.env_index[s] == episode.env_index]
            if later:  # the env's next transition starts the next episode from its reset obs
                assert batch.obs[later[0]][-1].any() and not np.array_equal(batch.next_obs[last], batch.obs[later[0]])
                checked += 1
        assert checked >= 2 and len(history) == 60
        envs.close()


def test_one_env_is_recorded_across_resets(tmp_path):
    env = make_breakout(stacked=True, max_episode_steps=120)()
    with ReplayStore.create(tmp_path / "one.mmr", frame_shape=(84, 84), capacity=1000) as store:
        env = RecordEpisodes(env, store)
        env.action_space.seed(1)
        obs, _ = env.reset(seed=1)
        expected = []
        # Until both kinds of episode end happened (each within a few dozen steps).
        while len(expected) < 500 and not (any(t[4] for t in expected) and any(t[5] for t in expected)):
            action = env.action_space.sample()
            next_obs, reward, terminated, truncated, _ = env.step(action)
            expected.append((obs, action, reward, next_obs, terminated, truncated))
            obs = env.reset()[0] if terminated or truncated else next_obs
        assert any(t[4] for t in expected) and any(t[5] for t in expected)
        assert_store_holds(store, expected)
        env.close()


def test_recorders_refuse_stores_that_do_not_fit_the_env(tmp_path):
    make = make_breakout(stacked=True, max_episode_steps=100)
    with ReplayStore.create(tmp_path / "a.mmr", frame_shape=(84, 84), capacity=10, num_envs=2) as store:
        with pytest.raises(ValueError, match=r"store has num_envs=2; expected 1 for a single env"):
            RecordEpisodes(make(), store)
        with pytest.raises(ValueError, match=r"store has num_envs=2; expected 3 like the vector env"):
            RecordVectorEpisodes(SyncVectorEnv([make] * 3), store)
    with ReplayStore.create(tmp_path / "b.mmr", frame_shape=(84, 84), capacity=10, stack_size=2) as store:
        with pytest.raises(
            ValueError,
            match=r"observation_space has shape \(4, 84, 84\); expected \(84, 84\) \(one frame\) or \(2, 84, 84\) \(a stack\)",
        ):
            RecordEpisodes(make(), store)
    with ReplayStore.create(tmp_path / "c.mmr", frame_shape=(84, 84), capacity=10) as store:
        env = RecordEpisodes(make(), store)
        with pytest.raises(RuntimeError, match=r"cannot step: call reset\(\) first"):
            env.step(0)
        assert len(store) == 0


@needs_gymnasium_1
def test_with_autoreset_disabled_the_caller_resets_ended_envs_and_every_entry_is_a_transition(tmp_path):
    envs = SyncVectorEnv(
        [make_breakout(stacked=True, max_episode_steps=m) for m in (80, 120)], autoreset_mode=AutoresetMode.DISABLED
    )
    with ReplayStore.create(tmp_path / "rec.mmr", frame_shape=(84, 84), capacity=1000, num_envs=2) as store:
        recorder = RecordVectorEpisodes(envs, store)
        recorder.action_space.seed(0)
        obs, _ = recorder.reset(seed=0)
        expected = []
        for _ in range(60):
            action = recorder.action_space.sample()
            next_obs, reward, terminated, truncated, _ = recorder.step(action)
            expected.extend(zip(obs, action, reward, next_obs, terminated, truncated))
            ended = terminated | truncated
            obs = recorder.reset(options={"reset_mask": ended})[0] if ended.any() else next_obs
        assert any(t[5] for t in expected)
        assert_store_holds(store, expected)


class SameStepVectorEnv(VectorEnv):
    """Two envs of 2x2 frames that reset in the step that ends an episode and put the final frame in
    ``info["final_observation"]`` (an object array, None where an env goes on) marked by
    ``info["_final_observation"]``: gymnasium 0.29's vector envs, as CleanRL meets them. Env 0
    terminates every 2 steps, env 1 truncates every 3. Each frame is filled with a count of the
    frames its env has shown (env 1 from 100), so a final frame and the reset frame after it differ."""

    def __init__(self) -> None:
        self.num_envs = 2
        self.single_observation_space = Box(0, 255, (2, 2), np.uint8)
        self.observation_space = batch_space(self.single_observation_space, 2)
        self.action_space = MultiDiscrete([3, 3])
        # The mode gymnasium 1.x would report for this behaviour; gymnasium 0.29 has no such setting.
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP} if GYMNASIUM_1 else {}
        self._shown = np.array([0, 100])
        self._steps = np.zeros(2, int)

    def _frames(self) -> np.ndarray:
        return np.repeat(self._shown.astype(np.uint8), 4).reshape(2, 2, 2)

    def reset(self, *, seed=None, options=None):
        self._shown, self._steps = np.array([0, 100]), np.zeros(2, int)
        return self._frames(), {}

    def step(self, actions):
        self._shown += 1
        self._steps += 1
        ended = self._steps == np.array([2, 3])
        terminated, truncated = ended & np.array([True, False]), ended & np.array([False, True])
        info = {}
        if ended.any():
            final = np.full(2, None, dtype=object)
            for env in np.flatnonzero(ended):
                final[env] = self._frames()[env]
            info = {"final_observation": final, "_final_observation": ended.copy()}
            self._shown[ended] += 1  # the reset frame
            self._steps[ended] = 0
        return self._frames(), np.asarray(actions, np.float64), terminated, truncated, info


def test_gymnasium_0_29_final_observations_in_info_final_observation_are_recorded(tmp_path):
    envs = SameStepVectorEnv()
    with ReplayStore.create(tmp_path / "rec.mmr", frame_shape=(2, 2), capacity=100, num_envs=2) as store:
        history = run_vector(RecordVectorEpisodes(envs, store), 12)
        expected = expected_transitions(history, same_step=True)
        assert len(expected) == 24
        assert_store_holds(store, expected)
        batch = store.read(store.stored_steps)
        ended = np.flatnonzero(batch.terminated | batch.truncated)
        # Env 0 ends at steps 2, 4, ... of its own, env 1 at 3, 6, ...: each next_obs is its final frame,
        # one short of the reset frame that starts the env's next transition.
        assert ended.size == 6 + 4
        assert all(batch.next_obs[i][-1, 0, 0] + 1 == batch.obs[i + 2][-1, 0, 0] for i in ended if i + 2 < 24)
        assert [e.ended_by for e in store.episodes() if e.env_index == 1][:4] == ["truncated"] * 4


@needs_gymnasium_0
@pytest.mark.parametrize("stacked", [True, False], ids=["stacks", "frames"])
def test_a_gymnasium_0_29_vector_env_is_recorded_with_its_final_observations(tmp_path, stacked):
    envs = SyncVectorEnv([make_breakout(stacked=stacked, max_episode_steps=m) for m in (120, 200)])
    with ReplayStore.create(tmp_path / "rec.mmr", frame_shape=(84, 84), capacity=1000, num_envs=2) as store:
        recorder = RecordVectorEpisodes(envs, store)
        assert recorder.autoreset_mode is None
        history = run_vector(recorder, STEPS)
        assert any("_final_observation" in info for *_, info in history)
        expected = expected_transitions(history, same_step=True)
        assert any(t[4] for t in expected) and any(t[5] for t in expected)
        assert len(expected) == 2 * STEPS
        assert_store_holds(store, expected)
        recorder.close()
