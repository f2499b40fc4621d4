"""Tianshou's DQN (n-step 3) on real Pong frames with its own buffer, its memory options, and mmreplay's.

Each buffer trains in its own process (peak RAM is the process's), seeded alike (torch, numpy, the env,
the buffer's draws): Pong through gymnasium + ale-py (``AtariPreprocessing``: 84x84 gray, frame skip 4;
``FrameStackObservation(4)``), one env, ``random`` steps first, then ``collect(n_step=10)`` and one
``update(buffer, 32)`` in turn, as ``OffPolicyTrainer`` runs them. The buffers:

* ``mmreplay``: ``MmreplayVectorReplayBuffer(size, 1, stack_size=4)``;
* ``tianshou``: ``VectorReplayBuffer(size, 1)``, which keeps both stacks of every transition;
* ``tianshou-memory``: ``VectorReplayBuffer(size, 1, ignore_obs_next=True, save_only_last_obs=True,
  stack_num=4)``, the memory options of Tianshou's Atari examples.

Every add's true obs_next is kept beside the buffer; at the end each stored slot's ``buffer[slot]``
obs and obs_next are compared with what the env returned: the wrong ones are counted. Printed (and
``--json``): the episode returns, the losses (the first and last, and whether two runs' are equal step
for step), the peak RSS, the wrong observations, and the run's seconds.

    python benchmarks/tianshou_dqn_pong.py --steps 3000
    python benchmarks/tianshou_dqn_pong.py --steps 3000 --json > benchmarks/results/tianshou_dqn_pong.json
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BUFFERS = ("mmreplay", "tianshou", "tianshou-memory")


def make_env():  # type: ignore[no-untyped-def]
    import ale_py
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)
    return FrameStackObservation(AtariPreprocessing(env, frame_skip=4, screen_size=84, grayscale_obs=True), 4)


def run(kind: str, steps: int, size: int, seed: int, workdir: Path) -> dict[str, object]:
    """One training run with the buffer ``kind``; its figures."""
    import torch
    from tianshou.algorithm.modelfree.dqn import DQN, DiscreteQLearningPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.env.atari.atari_network import DQNet
    from tianshou.utils.torch_utils import policy_within_training_step, torch_train_mode

    torch.manual_seed(seed)
    np.random.seed(seed)
    torch.set_num_threads(1)
    envs = DummyVectorEnv([make_env])
    envs.seed(seed)
    space = envs.action_space[0]
    policy = DiscreteQLearningPolicy(model=DQNet(4, 84, 84, action_shape=space.n), action_space=space,
                                     eps_training=0.1)
    algorithm = DQN(policy=policy, optim=AdamOptimizerFactory(lr=1e-4), gamma=0.99, n_step_return_horizon=3,
                    target_update_freq=500)
    if kind == "mmreplay":
        from mmreplay.tianshou import MmreplayVectorReplayBuffer

        buffer = MmreplayVectorReplayBuffer(size, 1, path=workdir / "stores", stack_size=4, random_seed=seed)
    elif kind == "tianshou":
        buffer = VectorReplayBuffer(size, 1, random_seed=seed)
    else:
        buffer = VectorReplayBuffer(size, 1, ignore_obs_next=True, save_only_last_obs=True, stack_num=4,
                                    random_seed=seed)
    true_obs = np.zeros((buffer.maxsize, 4, 84, 84), np.uint8)
    true_next = np.zeros((buffer.maxsize, 4, 84, 84), np.uint8)
    add = buffer.add

    def recording_add(batch, buffer_ids=None):  # type: ignore[no-untyped-def]
        obs, obs_next = np.array(batch.obs), np.array(batch.obs_next)
        result = add(batch, buffer_ids)
        true_obs[result[0]], true_next[result[0]] = obs, obs_next
        return result

    buffer.add = recording_add
    collector = Collector(algorithm, envs, buffer, exploration_noise=True)
    collector.reset()
    started = time.perf_counter()
    returns: list[float] = []
    losses: list[float] = []
    warmup = min(1000, steps)
    stats = collector.collect(n_step=warmup, random=True)
    returns.extend(float(r) for r in stats.returns)
    done = warmup
    while done < steps:  # one training step of OffPolicyTrainer: collect, then one update
        with policy_within_training_step(policy), torch_train_mode(policy):
            stats = collector.collect(n_step=10)
            done += 10
            returns.extend(float(r) for r in stats.returns)
            losses.append(float(algorithm.update(buffer, 32).loss))
    seconds = time.perf_counter() - started
    slots = buffer.sample_indices(0)
    read = buffer[slots]
    wrong_next = ~(np.asarray(read.obs_next).reshape(len(slots), -1) == true_next[slots].reshape(len(slots), -1)).all(1)
    wrong_obs = ~(np.asarray(read.obs).reshape(len(slots), -1) == true_obs[slots].reshape(len(slots), -1)).all(1)
    ended = np.asarray(buffer.done)[slots]
    result: dict[str, object] = {
        "buffer": kind,
        "steps": steps,
        "stored": len(slots),
        "episode_ends": int(ended.sum()),
        "returns": returns,
        "losses": losses,
        "wrong_obs_next": int(wrong_next.sum()),
        "wrong_obs_next_at_episode_ends": int((wrong_next & ended).sum()),
        "wrong_obs": int(wrong_obs.sum()),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "seconds": round(seconds, 1),
    }
    if kind == "mmreplay":
        result["store_bytes_on_disk"] = sum(store.bytes_on_disk for store in buffer.stores if store is not None)
        buffer.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000, help="env steps per run (the first 1,000 random)")
    parser.add_argument("--size", type=int, default=10_000, help="the buffer's total_size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--buffers", nargs="+", choices=BUFFERS, default=list(BUFFERS))
    parser.add_argument("--one", choices=BUFFERS, help=argparse.SUPPRESS)  # a child run
    parser.add_argument("--json", action="store_true", help="print every run's figures as JSON")
    args = parser.parse_args()
    if args.one:
        with tempfile.TemporaryDirectory(prefix="mmreplay-tianshou-dqn-") as workdir:
            print(json.dumps(run(args.one, args.steps, args.size, args.seed, Path(workdir))))
        return
    results = []
    for kind in args.buffers:
        command = [sys.executable, __file__, "--one", kind, "--steps", str(args.steps), "--size", str(args.size),
                   "--seed", str(args.seed)]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(output.strip().splitlines()[-1]))
    by_kind = {result["buffer"]: result for result in results}
    for result in results:
        result["losses_equal_to_tianshou"] = (
            None if "tianshou" not in by_kind else result["losses"] == by_kind["tianshou"]["losses"]
        )
        result["returns_equal_to_tianshou"] = (
            None if "tianshou" not in by_kind else result["returns"] == by_kind["tianshou"]["returns"]
        )
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for result in results:
        losses = result["losses"]
        print(
            f"{result['buffer']:>16}: returns {result['returns']}, losses {len(losses)} "
            f"(first {losses[0]:.5f}, last {losses[-1]:.5f}; equal to tianshou's: {result['losses_equal_to_tianshou']}), "
            f"stored {result['stored']} ({result['episode_ends']} episode ends), wrong obs_next "
            f"{result['wrong_obs_next']} ({result['wrong_obs_next_at_episode_ends']} at episode ends), wrong obs "
            f"{result['wrong_obs']}, peak RSS {result['peak_rss_mb']:.0f} MB, {result['seconds']} s"
            + (f", store {result['store_bytes_on_disk'] / 1e6:.1f} MB on disk" if "store_bytes_on_disk" in result else "")
        )


if __name__ == "__main__":
    main()
