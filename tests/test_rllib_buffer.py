"""``mmreplay.rllib.MmreplayEpisodeReplayBuffer`` as RLlib DQN (new API stack) uses it: 4-step episode
chunks in, length-1 n-step episodes out, priorities positional against the last sample; and RLlib DQN
on ALE Pong for a few hundred steps with every sampled observation checked against the env's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("ray.rllib", reason="Ray RLlib is not installed: pip install 'mmreplay[rllib]' to run the RLlib tests")

from ray.rllib.env.single_agent_episode import SingleAgentEpisode  # noqa: E402
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import PrioritizedEpisodeReplayBuffer  # noqa: E402

from mmreplay.rllib import MmreplayEpisodeReplayBuffer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def observation(n: int, tag: int = 0) -> np.ndarray:
    """The (8, 8, 4) float32 stack RLlib's Atari wrapper would give at step n: frames n..n+3, p/128 - 1."""
    frames = np.zeros((8, 8, 4), np.uint8)
    for i in range(4):
        frames[0, 0, i], frames[0, 1, i], frames[0, 2, i] = (n + i) % 256, (n + i) // 256, tag
    return frames.astype(np.float32) / 128 - 1


def chunks(length: int, *, tag: int = 0, size: int = 4, terminated: bool = True) -> list[SingleAgentEpisode]:
    """One episode of ``length`` steps as RLlib sends it: chunks of ``size`` steps sharing an id, each
    starting with the previous chunk's last observation; reward t at step t."""
    episode_id = f"episode-{tag}"
    result = []
    for start in range(0, length, size):
        stop = min(start + size, length)
        result.append(SingleAgentEpisode(
            id_=episode_id,
            observations=[observation(t, tag) for t in range(start, stop + 1)],
            actions=[t % 6 for t in range(start, stop)],
            rewards=[float(t) for t in range(start, stop)],
            terminated=terminated and stop == length,
            len_lookback_buffer=0,
        ))
    return result


def test_it_is_a_prioritized_episode_buffer_so_dqn_sends_it_priorities(tmp_path: Path) -> None:
    buffer = MmreplayEpisodeReplayBuffer(100, path=str(tmp_path / "b.mmr"))
    assert isinstance(buffer, PrioritizedEpisodeReplayBuffer)
    assert len(buffer) == 0


def assert_bit_identical(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(expected).tobytes()


@pytest.mark.parametrize("n_step", [1, 3])  # 1: obs and next_obs come from one array of 5 frames a transition
def test_sampled_observations_are_exact_and_n_step_is_cut_at_the_episode_end(tmp_path: Path, n_step: int) -> None:
    buffer = MmreplayEpisodeReplayBuffer(1000, path=str(tmp_path / "b.mmr"), num_envs=4, seed=0)
    interleaved = [chunk for pair in zip(chunks(40, tag=1), chunks(40, tag=2, terminated=False)) for chunk in pair]
    buffer.add(interleaved)
    assert len(buffer) == 80 and buffer.get_num_episodes() == 1
    sampled = buffer.sample(num_items=64, n_step=n_step, gamma=0.5, beta=0.4, batch_length_T=0, lookback=0,
                            min_batch_length_T=0, sample_episodes=True)
    assert len(sampled) == 64
    for episode in sampled:
        first, last = episode.get_observations()
        tag = int(round((first[0, 2, 0] + 1) * 128))
        t = int(round((first[0, 0, 0] + 1) * 128)) + 256 * int(round((first[0, 1, 0] + 1) * 128))
        assert_bit_identical(first, observation(t, tag))
        used = min(n_step, 40 - t)  # both episodes have 40 steps so far: the window is cut at the 40th
        ends = tag == 1 and t + used == 40
        assert_bit_identical(last, observation(t + used, tag))
        assert episode.get_rewards()[0] == pytest.approx(sum(0.5**k * (t + k) for k in range(used)))
        assert episode.get_actions()[0] == t % 6
        assert episode.is_terminated == ends
        # n_step is what DQN's loss discounts the bootstrap by; at a termination there is none (n asked).
        assert episode.get_extra_model_outputs("n_step")[0] == (n_step if ends else used)
        assert episode.get_extra_model_outputs("weights")[0] == pytest.approx(1.0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_sampled_observation_is_the_one_added_bit_for_bit(tmp_path_factory: pytest.TempPathFactory,
                                                                   data: st.DataObject) -> None:
    """Against a plain list of the episode's observations: random pixels (all of 0..255 drawn, so -1.0,
    0.0 and 127/128 occur), float32 as RLlib's wrapper makes them or uint8, in chunks of any size, the
    final observation the last one shifted or any other."""
    length = data.draw(st.integers(2, 24), label="length")
    uint8 = data.draw(st.booleans(), label="uint8")
    chunk_size = data.draw(st.integers(1, 6), label="chunk_size")
    n_step = data.draw(st.integers(1, 4), label="n_step")
    pixels = np.frombuffer(data.draw(st.binary(min_size=(length + 1) * 30, max_size=(length + 1) * 30)), np.uint8)
    frames = pixels.reshape(length + 1, 5, 6)
    # RLlib's frame stack: the reset frame repeated, then each step pushes the newest frame (H, W, stack).
    stacks = [np.stack([frames[max(0, t - 3 + i)] for i in range(4)], axis=-1) for t in range(length + 1)]
    if data.draw(st.booleans(), label="final observation not the last one shifted"):
        # Kept as given (the store then hands out obs and next_obs as two views of 8 frames a transition).
        final = np.frombuffer(data.draw(st.binary(min_size=120, max_size=120)), np.uint8)
        stacks[-1] = final.reshape(5, 6, 4)
    reference = stacks if uint8 else [(s.astype(np.float32) / 128.0) - 1.0 for s in stacks]  # NormalizedImageEnv
    buffer = MmreplayEpisodeReplayBuffer(100, path=str(tmp_path_factory.mktemp("b") / "b.mmr"), seed=0)
    for start in range(0, length, chunk_size):
        stop = min(start + chunk_size, length)
        buffer.add(SingleAgentEpisode(id_="e", observations=reference[start : stop + 1], actions=[0] * (stop - start),
                                      rewards=[0.0] * (stop - start), terminated=stop == length, len_lookback_buffer=0))
    for episode in buffer.sample(num_items=16, n_step=n_step, gamma=0.5):
        t = episode.t_started  # the transition's step: its position in the only episode
        m = min(n_step, length - t)
        first, last = episode.get_observations()
        assert_bit_identical(first, reference[t])
        assert_bit_identical(last, reference[t + m])


def test_float32_observations_that_are_not_rllibs_encoding_are_refused(tmp_path: Path) -> None:
    buffer = MmreplayEpisodeReplayBuffer(100, path=str(tmp_path / "b.mmr"))
    episode = chunks(4)[0]
    # p / 255: pixel 0 of frame 0 is 0 / 255 = 0.0, also RLlib's value for p = 128; frame 1's is 1 / 255
    scaled = [np.rint((o + 1) * 128).astype(np.float32) / 255 for o in episode.get_observations()]
    message = (r"observations are float32 but not RLlib's p / 128 - 1 of uint8 pixels p: the observation at "
               r"\(0, 0, 0, 1\) is 0.00392156886; expected one of k / 128 - 1")
    with pytest.raises(ValueError, match=message):
        buffer.add(SingleAgentEpisode(observations=scaled, actions=[0] * 4, rewards=[0.0] * 4, len_lookback_buffer=0))
    assert len(buffer) == 0


def test_observations_of_another_dtype_or_a_changed_dtype_are_refused(tmp_path: Path) -> None:
    buffer = MmreplayEpisodeReplayBuffer(100, path=str(tmp_path / "b.mmr"))
    episode = chunks(4)[0]
    as_float64 = [o.astype(np.float64) for o in episode.get_observations()]
    with pytest.raises(TypeError, match="observations are float64; expected uint8 pixels or float32 p / 128 - 1"):
        buffer.add(SingleAgentEpisode(observations=as_float64, actions=[0] * 4, rewards=[0.0] * 4,
                                      len_lookback_buffer=0))
    buffer.add(episode)
    as_uint8 = [np.rint((o + 1) * 128).astype(np.uint8) for o in episode.get_observations()]
    with pytest.raises(TypeError, match="observations are uint8; this buffer was given float32 ones first"):
        buffer.add(SingleAgentEpisode(observations=as_uint8, actions=[0] * 4, rewards=[0.0] * 4, len_lookback_buffer=0))
    assert len(buffer) == 4


def test_sampled_episodes_are_what_rllibs_constructor_makes_of_the_same_values(tmp_path: Path) -> None:
    """The buffer builds its episodes without the constructor (ten times faster); every attribute but
    the id must be what the constructor sets, so RLlib's connectors read them alike."""
    buffer = MmreplayEpisodeReplayBuffer(1000, path=str(tmp_path / "b.mmr"), seed=0)
    buffer.add(chunks(40))
    sampled = buffer.sample(num_items=32, n_step=3, gamma=0.9)
    for episode in sampled:
        made = SingleAgentEpisode(
            observations=list(episode.get_observations()), actions=list(episode.get_actions()),
            rewards=list(episode.get_rewards()), terminated=episode.is_terminated, truncated=episode.is_truncated,
            extra_model_outputs={key: list(episode.get_extra_model_outputs(key)) for key in ("weights", "n_step")},
            len_lookback_buffer=0, t_started=episode.t_started,
        )
        for name in SingleAgentEpisode.__slots__:
            if name != "id_":
                assert getattr(episode, name) == getattr(made, name), name
        episode.validate()
    ids = [episode.id_ for episode in sampled + buffer.sample(num_items=32, n_step=3)]
    # Unique, and without "_": RLlib's learner connectors append "_<i>" to an id that has none.
    assert len(set(ids)) == len(ids) and not any("_" in id_ for id_ in ids)


@pytest.mark.parametrize("observation_buffers, later_samples", [(0, 20), (3, 2)])
def test_a_samples_observations_stay_as_they_were_through_later_samples(
    tmp_path: Path, observation_buffers: int, later_samples: int
) -> None:
    """By default for good (new arrays each sample); with k recycled arrays, for the next k - 1 samples."""
    buffer = MmreplayEpisodeReplayBuffer(1000, path=str(tmp_path / "b.mmr"), seed=0,
                                         observation_buffers=observation_buffers)
    buffer.add(chunks(40))
    first = buffer.sample(num_items=16, n_step=3)
    kept = [[o.copy() for o in episode.get_observations()] for episode in first]
    for _ in range(later_samples):
        buffer.sample(num_items=16, n_step=3)
    for episode, copies in zip(first, kept):
        for observation, copy in zip(episode.get_observations(), copies):
            assert_bit_identical(observation, copy)


def test_update_priorities_is_positional_against_the_last_sample(tmp_path: Path) -> None:
    buffer = MmreplayEpisodeReplayBuffer(1000, path=str(tmp_path / "b.mmr"), alpha=1.0, epsilon=0.0, seed=1)
    buffer.add(chunks(100))
    sampled = buffer.sample(num_items=8, n_step=1)
    priorities = np.zeros(8)
    priorities[0] = 1000.0
    buffer.update_priorities(priorities, "default_policy")
    chosen = sampled[0].t_started
    zeroed = {e.t_started for e in sampled[1:]} - {chosen}
    steps = [e.t_started for e in buffer.sample(num_items=400, n_step=1)]
    # The others keep priority 1 (new transitions get the largest priority seen before the update).
    assert zeroed and not set(steps) & zeroed
    assert steps.count(chosen) > 300  # 1000 against at most 99 others of 1


def test_a_stateful_request_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    buffer = MmreplayEpisodeReplayBuffer(100, path=str(tmp_path / "b.mmr"))
    buffer.add(chunks(10))
    with pytest.raises(ValueError, match="batch_length_T is 20: MmreplayEpisodeReplayBuffer serves transitions"):
        buffer.sample(num_items=4, batch_length_T=20)


def test_uint8_observations_come_back_as_uint8(tmp_path: Path) -> None:
    buffer = MmreplayEpisodeReplayBuffer(100, path=str(tmp_path / "b.mmr"), prioritized=False)
    episode = chunks(6)[0]
    pixels = [np.rint((o + 1) * 128).astype(np.uint8) for o in episode.get_observations()]
    buffer.add([SingleAgentEpisode(observations=pixels, actions=[0, 1, 2, 3], rewards=[0.0] * 4,
                                   len_lookback_buffer=0)])
    sampled = buffer.sample(num_items=4)
    assert sampled[0].get_observations()[0].dtype == np.uint8


def test_state_is_the_store_on_disk(tmp_path: Path) -> None:
    buffer = MmreplayEpisodeReplayBuffer(100, path=str(tmp_path / "b.mmr"))
    buffer.add(chunks(12))
    state = buffer.get_state()
    buffer.store.close()
    again = MmreplayEpisodeReplayBuffer(100, path=str(tmp_path / "other.mmr"))
    again.set_state(state)
    assert len(again) == 12


@pytest.mark.skipif(not os.environ.get("MMREPLAY_RLLIB_DQN", "1") == "1", reason="MMREPLAY_RLLIB_DQN=0")
def test_rllib_dqn_trains_on_pong_with_bit_exact_observations(tmp_path: Path) -> None:
    pytest.importorskip("ale_py", reason="ale-py is not installed")
    pytest.importorskip("cv2", reason="opencv is not installed (RLlib's Atari wrapper needs it)")
    pytest.importorskip("torch", reason="torch is not installed")
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "rllib_dqn_pong.py"), "--steps", "160", "--learning-starts", "64",
         "--path", str(tmp_path / "pong.mmr")],
        capture_output=True, text=True, timeout=600,
    )
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert run.returncode == 0, run.stderr[-3000:]
    assert report["observations_checked"] > 1000
    assert report["observations_matched"] == report["observations_checked"]
    assert report["transitions_stored"] >= 160
