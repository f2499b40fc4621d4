"""The Ape-X shape on ``mmreplay.ray.ShardedReplay``: acting actors write ALE Pong to replay shards, one
learner samples across the shards, trains a DQN and sends priorities back by global id.

    pip install 'mmreplay[ray]' torch 'gymnasium[atari]' ale-py opencv-python-headless
    python scripts/apex_pong.py --actors 2 --shards 2 --updates 200

Each actor runs its own env with an epsilon-greedy copy of the learner's network (weights pulled every
``--sync-every`` of its steps) and writes through its sticky ``ShardWriter``: its frames go lz4-compressed
from the actor to its shard, never through the learner. The learner draws prioritized batches over the
union of the shards (prefetched, decoded in the learner), and a rate limit holds samples per insert near
``--samples-per-insert``. It prints one JSON line: env steps, updates, batches/s, and each shard's size,
inserts and samples (its rate limiter's counts) and priority mass.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def make_env(seed: int) -> Any:
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.25)
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, noop_max=30)
    env = gym.wrappers.FrameStackObservation(env, 4)
    env.reset(seed=seed)
    return env


def q_network(actions: int) -> Any:
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(4, 16, 8, stride=4), nn.ReLU(), nn.Conv2d(16, 32, 4, stride=2), nn.ReLU(), nn.Flatten(),
        nn.Linear(32 * 9 * 9, 256), nn.ReLU(), nn.Linear(256, actions),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--samples-per-insert", type=float, default=4.0)
    parser.add_argument("--min-size", type=int, default=500)
    parser.add_argument("--sync-every", type=int, default=200, help="actor steps between weight pulls")
    args = parser.parse_args(argv)

    # Loopback alone (tests/ray_loopback.py): set before ray is imported, or Ray 2.60 listens on every interface.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray
    import torch

    from mmreplay import PrioritizedSampler
    from mmreplay.ray import RateLimit, ShardedReplay

    work = Path(tempfile.mkdtemp(prefix="mmr-apex-"))
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             _temp_dir=str(work / "ray"), namespace="mmreplay-apex")
    try:
        replay = ShardedReplay.create(
            "apex", str(work / "replay"), num_shards=args.shards, frame_shape=(84, 84), capacity=100_000,
            sampler=PrioritizedSampler(alpha=0.6), envs_per_shard=8, placement="local",
            rate_limit=RateLimit(args.samples_per_insert, min_size_to_sample=args.min_size,
                                 error_buffer=args.samples_per_insert * 2000),
        )
        actions = make_env(0).action_space.n
        network = q_network(actions)

        @ray.remote(num_cpus=0)
        class Actor:
            """One acting process: an env, a copy of the network, a sticky writer."""

            def __init__(self, index: int) -> None:
                torch.set_num_threads(1)
                self.env, self.index = make_env(index), index
                self.network = q_network(actions)
                self.writer = ShardedReplay.connect("apex").writer(f"actor-{index}", shard=index % args.shards)
                self.rng = np.random.default_rng(index)
                self.epsilon = 0.4 ** (1 + 7 * index / max(1, args.actors - 1))  # Ape-X's epsilons

            def run(self, weights_holder: Any, steps: int) -> int:
                obs, _ = self.env.reset()
                for t in range(steps):
                    if t % args.sync_every == 0:
                        self.network.load_state_dict(ray.get(weights_holder.get.remote()))
                    if self.rng.random() < self.epsilon:
                        action = int(self.rng.integers(actions))
                    else:
                        with torch.no_grad():
                            q = self.network(torch.from_numpy(np.asarray(obs)[None]).float() / 255)
                        action = int(q.argmax())
                    next_obs, reward, terminated, truncated, _ = self.env.step(action)
                    self.writer.add(np.asarray(obs), action, float(reward), np.asarray(next_obs), terminated, truncated)
                    obs = next_obs
                    if terminated or truncated:
                        obs, _ = self.env.reset()
                self.writer.flush(timeout_s=600)
                return steps

        @ray.remote(num_cpus=0)
        class Weights:
            def __init__(self) -> None:
                self.state: Any = None

            def put(self, state: Any) -> None:
                self.state = state

            def get(self) -> Any:
                return self.state

        holder = Weights.remote()
        ray.get(holder.put.remote({k: v.clone() for k, v in network.state_dict().items()}))
        actors = [Actor.remote(i) for i in range(args.actors)]
        steps_each = int((args.min_size + args.updates * args.batch_size / args.samples_per_insert) / args.actors) + 50
        acting = [actor.run.remote(holder, steps_each) for actor in actors]

        target = q_network(actions)
        target.load_state_dict(network.state_dict())
        optimizer = torch.optim.Adam(network.parameters(), lr=1e-4)
        batches = replay.batches(args.batch_size, prefetch=2, group=2, rng=0, beta=0.4, n_step=3, gamma=0.99)
        start = time.perf_counter()
        for update in range(args.updates):
            batch = next(batches)
            tensors = batch.to_torch()
            q = network(tensors["obs"].float() / 255).gather(1, tensors["action"][:, None]).squeeze(1)
            with torch.no_grad():
                bootstrap = target(tensors["next_obs"].float() / 255).max(1).values
                goal = tensors["reward"] + tensors["discount"] * bootstrap
            td = goal - q
            loss = (tensors["weight"] * td.pow(2)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            replay.update_priorities(batch.index, td.abs().detach().numpy() + 1e-3)
            if update % 50 == 0:
                target.load_state_dict(network.state_dict())
                ray.get(holder.put.remote({k: v.clone() for k, v in network.state_dict().items()}))
        seconds = time.perf_counter() - start
        env_steps = sum(ray.get(acting))
        infos = [info for info in replay.stats() if info is not None]
        print(json.dumps({
            "actors": args.actors, "shards": args.shards, "env_steps": env_steps, "updates": args.updates,
            "learner_batches_per_s": round(args.updates / seconds, 1),
            "shard_sizes": [info["len"] for info in infos],
            # what each shard's rate limiter counted, and its priority mass (its size until priorities came)
            "shard_inserts": [info["inserts"] for info in infos], "shard_samples": [info["samples"] for info in infos],
            "shard_masses": [info["mass"] for info in infos],
        }))
        replay.close(destroy=True)
    finally:
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
