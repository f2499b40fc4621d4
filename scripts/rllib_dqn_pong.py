"""RLlib DQN (new API stack) on ALE Pong with ``mmreplay.rllib.MmreplayEpisodeReplayBuffer``, checking that
every sampled observation is bit-identical to one the env produced.

    pip install 'mmreplay[rllib]' ale-py opencv-python-headless
    python scripts/rllib_dqn_pong.py --steps 400 --path /tmp/dqn-pong.mmr

It prints one JSON line: env steps, training iterations, observations checked and how many matched,
the store's transitions and bytes on disk. Exit status 1 if any sampled observation was not one the env
produced. The buffer is subclassed here only to record the env's observations (``add``) and check what
``sample`` returns; the training itself is RLlib's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mmreplay.rllib import MmreplayEpisodeReplayBuffer


class CheckedEpisodeReplayBuffer(MmreplayEpisodeReplayBuffer):  # type: ignore[misc]
    """The mmreplay buffer, remembering a digest of every observation added and checking every one sampled."""

    seen: set[bytes] = set()
    checked = 0
    matched = 0

    def add(self, episodes: Any, weight: float | None = None) -> None:
        for episode in episodes if isinstance(episodes, list) else [episodes]:
            for observation in episode.get_observations():
                CheckedEpisodeReplayBuffer.seen.add(_digest(observation))
        super().add(episodes, weight)

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        sampled = super().sample(*args, **kwargs)
        for episode in sampled:
            for observation in episode.get_observations():
                CheckedEpisodeReplayBuffer.checked += 1
                CheckedEpisodeReplayBuffer.matched += _digest(observation) in CheckedEpisodeReplayBuffer.seen
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
    args = parser.parse_args(argv)

    import gymnasium as gym
    import ale_py
    import ray
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack
    from ray.tune.registry import register_env

    gym.register_envs(ale_py)
    temporary = None
    path = args.path
    if path is None:
        temporary = tempfile.mkdtemp(prefix="mmr-dqn-")
        path = str(Path(temporary) / "pong.mmr")
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # RLlib imports the buffer by its dotted name
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             _temp_dir=str(Path(temporary or tempfile.mkdtemp(prefix="mmr-dqn-")) / "ray"))
    try:
        register_env("mmr_pong", lambda _: wrap_atari_for_new_api_stack(
            gym.make("ALE/Pong-v5", frameskip=1), dim=84, framestack=4))
        config = (
            DQNConfig()
            .environment("mmr_pong")
            .env_runners(num_env_runners=0, rollout_fragment_length=4)
            .training(
                replay_buffer_config={
                    "type": "rllib_dqn_pong.CheckedEpisodeReplayBuffer", "path": path, "capacity": 10_000,
                    "alpha": 0.6, "beta": 0.4, "prioritized": args.prioritized, "seed": 0,
                },
                num_steps_sampled_before_learning_starts=args.learning_starts,
                train_batch_size=32, n_step=3, lr=1e-4,
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
        store = buffer.store
        counts = type(buffer)  # RLlib imported this module again by its dotted name: its class holds the counts
        report = {
            "env_steps": steps, "iterations": iterations, "seconds": round(time.perf_counter() - start, 1),
            "observations_checked": counts.checked, "observations_matched": counts.matched,
            "transitions_stored": len(store), "bytes_on_disk": store.bytes_on_disk(),
            "bytes_per_transition": round(store.bytes_on_disk() / max(1, len(store)), 1),
        }
        algo.stop()
        store.close()
        print(json.dumps(report))
        ok = report["observations_checked"] > 0 and report["observations_checked"] == report["observations_matched"]
        return 0 if ok else 1
    finally:
        ray.shutdown()
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
