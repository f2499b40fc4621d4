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


def test_sampled_observations_are_exact_and_n_step_is_cut_at_the_episode_end(tmp_path: Path) -> None:
    buffer = MmreplayEpisodeReplayBuffer(1000, path=str(tmp_path / "b.mmr"), num_envs=4, seed=0)
    interleaved = [chunk for pair in zip(chunks(40, tag=1), chunks(40, tag=2, terminated=False)) for chunk in pair]
    buffer.add(interleaved)
    assert len(buffer) == 80 and buffer.get_num_episodes() == 1
    sampled = buffer.sample(num_items=64, n_step=3, gamma=0.5, beta=0.4, batch_length_T=0, lookback=0,
                            min_batch_length_T=0, sample_episodes=True)
    assert len(sampled) == 64
    for episode in sampled:
        first, last = episode.get_observations()
        tag = int(round((first[0, 2, 0] + 1) * 128))
        t = int(round((first[0, 0, 0] + 1) * 128)) + 256 * int(round((first[0, 1, 0] + 1) * 128))
        np.testing.assert_array_equal(first, observation(t, tag))  # bit-exact float32
        used = min(3, 40 - t)  # both episodes have 40 steps so far: the window is cut at the 40th
        ends = tag == 1 and t + used == 40
        np.testing.assert_array_equal(last, observation(t + used, tag))
        assert episode.get_rewards()[0] == pytest.approx(sum(0.5**k * (t + k) for k in range(used)))
        assert episode.get_actions()[0] == t % 6
        assert episode.is_terminated == ends
        # n_step is what DQN's loss discounts the bootstrap by; at a termination there is none (n asked).
        assert episode.get_extra_model_outputs("n_step")[0] == (3 if ends else used)
        assert episode.get_extra_model_outputs("weights")[0] == pytest.approx(1.0)


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
