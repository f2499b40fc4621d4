"""RLlib DQN (new API stack) on ALE Pong with ``mmreplay.rllib.MmreplayEpisodeReplayBuffer``, checking that
every sampled observation is bit-identical to one the env produced.

    pip install 'mmreplay[rllib]' ale-py opencv-python-headless
    python scripts/rllib_dqn_pong.py --steps 400 --path /tmp/dqn-pong.mmr
    python scripts/rllib_dqn_pong.py --steps 1000 --buffer rllib     # RLlib's own buffer, for its times

It prints one JSON line: env steps, training iterations, observations checked and how many matched,
the buffer's ``sample`` time as DQN calls it (median ms, and the number of samples), and for the
mmreplay buffer the store's transitions and bytes on disk. Exit status 1 if any sampled observation
was not one the env produced. The buffer is subclassed here only to record the env's observations
(``add``), time ``sample`` and check what it returns; the training itself is RLlib's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Loopback alone (tests/ray_loopback.py): set before ray is imported, or Ray 2.60 listens on every interface.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import PrioritizedEpisodeReplayBuffer  # noqa: E402

from mmreplay.rllib import MmreplayEpisodeReplayBuffer  # noqa: E402


class Checks:
    """What the checked buffers saw: a digest of every observation added, every one sampled checked
    against them, and each ``sample`` call's seconds (the checking not counted)."""

    seen: set[bytes] = set()
    checked = 0
    matched = 0
    sample_seconds: list[float] = []

    @classmethod
    def added(cls, episodes: Any) -> None:
        for episode in episodes if isinstance(episodes, list) else [episodes]:
            for observation in episode.get_observations():
                cls.seen.add(_digest(observation))

    @classmethod
    def sampled(cls, episodes: Any, seconds: float) -> None:
        cls.sample_seconds.append(seconds)
        for episode in episodes:
            for observation in episode.get_observations():
                cls.checked += 1
                cls.matched += _digest(observation) in cls.seen


class CheckedEpisodeReplayBuffer(MmreplayEpisodeReplayBuffer):  # type: ignore[misc]
    """The mmreplay buffer, checked (``Checks``)."""

    def add(self, episodes: Any, weight: float | None = None) -> None:
        Checks.added(episodes)
        super().add(episodes, weight)

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        sampled = super().sample(*args, **kwargs)
        Checks.sampled(sampled, time.perf_counter() - start)
        return sampled


class CheckedRLlibEpisodeReplayBuffer(PrioritizedEpisodeReplayBuffer):  # type: ignore[misc]
    """RLlib's own prioritized episode buffer, checked the same way (``--buffer rllib``)."""

    def add(self, episodes: Any, weight: float | None = None) -> None:
        Checks.added(episodes)
        super().add(episodes, weight)

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        sampled = super().sample(*args, **kwargs)
        Checks.sampled(sampled, time.perf_counter() - start)
        return sampled


def _digest(observation: Any) -> bytes:
    import numpy as np

    array = np.ascontiguousarray(observation)
    return hashlib.blake2b(array.dtype.str.encode() + array.tobytes(), digest_size=16).digest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="env steps to train for")
    parser.add_argument("--path", default=None, help="the store's directory (default: a temporary one, removed)")
    parser.add_argument("--learning-starts", type=int, default=100)
    parser.add_argument("--prioritized", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--buffer", choices=("mmreplay", "rllib"), default="mmreplay",
                        help="the replay buffer: mmreplay's, or RLlib's own PrioritizedEpisodeReplayBuffer")
    parser.add_argument("--observation-buffers", type=int, default=None,
                        help="the mmreplay buffer's observation_buffers (default: its own default)")
    parser.add_argument("--n-step", type=int, default=3)
    args = parser.parse_args(argv)

    import gymnasium as gym
    import ale_py
    import ray
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack
    from ray.tune.registry import register_env

    gym.register_envs(ale_py)
    temporary = tempfile.mkdtemp(prefix="mmr-dqn-")  # Ray's session files, and the store unless --path
    path = args.path or str(Path(temporary) / "pong.mmr")
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # RLlib imports the buffer by its dotted name
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             _temp_dir=str(Path(temporary) / "ray"))
    try:
        register_env("mmr_pong", lambda _: wrap_atari_for_new_api_stack(
            gym.make("ALE/Pong-v5", frameskip=1), dim=84, framestack=4))
        if args.buffer == "mmreplay":
            buffer_config = {"type": "rllib_dqn_pong.CheckedEpisodeReplayBuffer", "path": path, "capacity": 10_000,
                             "alpha": 0.6, "beta": 0.4, "prioritized": args.prioritized, "seed": 0}
            if args.observation_buffers is not None:
                buffer_config["observation_buffers"] = args.observation_buffers
        else:
            buffer_config = {"type": "rllib_dqn_pong.CheckedRLlibEpisodeReplayBuffer", "capacity": 10_000,
                             "alpha": 0.6 if args.prioritized else 0.0, "beta": 0.4}
        config = (
            DQNConfig()
            .environment("mmr_pong")
            .env_runners(num_env_runners=0, rollout_fragment_length=4)
            .training(
                replay_buffer_config=buffer_config,
                num_steps_sampled_before_learning_starts=args.learning_starts,
                train_batch_size=32, n_step=args.n_step, lr=1e-4,
            )
            .rl_module(model_config=DefaultModelConfig(
                conv_filters=[[16, 8, 4], [32, 4, 2], [256, 11, 1, "valid"]], head_fcnet_hiddens=[256]))
            .reporting(min_sample_timesteps_per_iteration=0)
        )
        algo = config.build_algo()
        start, steps, iterations = time.perf_counter(), 0, 0
        while steps < args.steps:
            result = algo.train()
            iterations += 1
            steps = int(result["env_runners"]["num_env_steps_sampled_lifetime"])
        buffer = algo.local_replay_buffer
        # RLlib imported this module again by its dotted name: that copy's Checks holds the counts.
        checks = sys.modules["rllib_dqn_pong"].Checks
        times = checks.sample_seconds
        report: dict[str, Any] = {
            "buffer": args.buffer, "env_steps": steps, "iterations": iterations,
            "seconds": round(time.perf_counter() - start, 1),
            "observations_checked": checks.checked, "observations_matched": checks.matched,
            "samples": len(times), "sample_ms_median": round(1000 * statistics.median(times), 3) if times else None,
        }
        store = getattr(buffer, "store", None)
        if store is not None:
            report.update({"transitions_stored": len(store), "bytes_on_disk": store.bytes_on_disk,
                           "bytes_per_transition": round(store.bytes_on_disk / max(1, len(store)), 1)})
        algo.stop()
        if store is not None:
            store.close()
        print(json.dumps(report))
        ok = report["observations_checked"] > 0 and report["observations_checked"] == report["observations_matched"]
        return 0 if ok else 1
    finally:
        ray.shutdown()
        shutil.rmtree(temporary, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
