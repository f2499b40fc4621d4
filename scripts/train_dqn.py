"""DQN on a real Atari game, CleanRL ``dqn_atari.py`` style, with the replay buffer as a flag.

    .venv/bin/python scripts/train_dqn.py                          # smoke: 5,000 Pong steps, a few minutes
    .venv/bin/python scripts/train_dqn.py --buffer sb3             # the same run on SB3's ReplayBuffer
    .venv/bin/python scripts/train_dqn.py --buffer-size 1000000 --total-steps 10000000 --learning-starts 80000

``--buffer mmreplay`` is ``mmreplay.sb3.MmreplayBuffer`` (frames on disk, once, lz4-compressed);
``--buffer sb3`` is Stable-Baselines3's ``ReplayBuffer`` with CleanRL's settings
(``optimize_memory_usage=True``: 28,224 bytes of RAM per transition). The training loop is the same
line for line: only the buffer's constructor differs. At the end it prints env steps/s, episode
returns, the buffer's bytes (mmreplay: bytes on disk; sb3: its arrays' nbytes) and the process's
peak RSS, and writes a learning-curve PNG when matplotlib is installed.

Environment: ``--env-id`` made with ``frameskip=1``, then gymnasium's ``AtariPreprocessing`` (84x84
grayscale, frame_skip=4, up to 30 no-ops at reset), rewards clipped to [-1, 1], 4-frame stacks; a
vector env in same-step autoreset mode, whose ``info["final_obs"]`` gives the true next obs.
"""

from __future__ import annotations

import argparse
import random
import resource
import shutil
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--buffer", choices=("mmreplay", "sb3"), default="mmreplay")
    parser.add_argument("--env-id", default="ALE/Pong-v5")
    parser.add_argument("--total-steps", type=int, default=5_000, help="env steps, all envs together")
    parser.add_argument("--buffer-size", type=int, default=10_000, help="capacity in transitions")
    parser.add_argument("--learning-starts", type=int, default=1_000)
    parser.add_argument("--train-frequency", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--target-network-frequency", type=int, default=1_000)
    parser.add_argument("--start-e", type=float, default=1.0)
    parser.add_argument("--end-e", type=float, default=0.01)
    parser.add_argument("--exploration-fraction", type=float, default=0.5, help="of --total-steps")
    parser.add_argument("--num-envs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--path", type=Path, default=None, help="mmreplay store directory (default: a temporary one)")
    parser.add_argument("--plot", type=Path, default=None, help="learning-curve PNG (default: dqn_<buffer>.png)")
    parser.add_argument("--report-every", type=int, default=1_000, help="print progress every this many steps")
    return parser.parse_args()


def make_env(env_id: str, seed: int):
    def thunk() -> gym.Env:
        env = gym.make(env_id, frameskip=1)  # AtariPreprocessing skips frames (max-pooling the last two)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # unclipped returns in info["episode"]
        env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True)
        env = gym.wrappers.ClipReward(env, -1.0, 1.0)
        env = gym.wrappers.FrameStackObservation(env, 4)
        env.action_space.seed(seed)
        return env

    return thunk


class QNetwork(nn.Module):
    """The Nature DQN network: three convolutions and two dense layers over 4x84x84 uint8 stacks."""

    def __init__(self, n_actions: int) -> None:
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3136, 512), nn.ReLU(),
            nn.Linear(512, n_actions),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x / 255.0)


def linear_schedule(start_e: float, end_e: float, duration: int, t: int) -> float:
    return max(end_e, start_e + (end_e - start_e) * t / max(duration, 1))


def make_buffer(args: argparse.Namespace, envs: gym.vector.VectorEnv, device: torch.device):
    """The one line that differs between the two runs (plus where the bytes are)."""
    common = {"device": device, "n_envs": args.num_envs, "optimize_memory_usage": True, "handle_timeout_termination": False}
    space, actions = envs.single_observation_space, envs.single_action_space
    if args.buffer == "sb3":
        from stable_baselines3.common.buffers import ReplayBuffer

        return ReplayBuffer(args.buffer_size, space, actions, **common)
    from mmreplay.sb3 import MmreplayBuffer

    return MmreplayBuffer(args.buffer_size, space, actions, path=args.path, **common)


def buffer_bytes(rb) -> int:
    if hasattr(rb, "store"):
        return rb.store.bytes_on_disk
    arrays = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
    return sum(getattr(rb, name).nbytes for name in arrays if hasattr(rb, name))


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def main() -> None:
    args = parse_args()
    import ale_py

    gym.register_envs(ale_py)
    random.seed(args.seed)
    np.random.seed(args.seed)  # SB3-style buffers draw with numpy's global generator
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    temporary = None
    if args.buffer == "mmreplay" and args.path is None:
        temporary = Path(tempfile.mkdtemp(prefix="train_dqn-"))
        args.path = temporary / "replay.mmr"

    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, args.seed + i) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    q_network = QNetwork(envs.single_action_space.n).to(device)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate)
    target_network = QNetwork(envs.single_action_space.n).to(device)
    target_network.load_state_dict(q_network.state_dict())
    rss_before_buffer = peak_rss_bytes()
    rb = make_buffer(args, envs, device)

    returns: list[tuple[int, float]] = []
    obs, _ = envs.reset(seed=args.seed)
    start = time.perf_counter()
    learning_start_time, rss_at_learning_start = None, 0
    for global_step in range(0, args.total_steps, args.num_envs):
        epsilon = linear_schedule(args.start_e, args.end_e, int(args.exploration_fraction * args.total_steps), global_step)
        if random.random() < epsilon:
            actions = envs.action_space.sample()
        else:
            with torch.no_grad():
                actions = q_network(torch.as_tensor(obs, device=device)).argmax(dim=1).cpu().numpy()
        next_obs, rewards, terminations, _, infos = envs.step(actions)  # CleanRL: truncations bootstrap

        final_info = infos.get("final_info", {})  # same-step autoreset: the ended episodes' last info
        if "_episode" in final_info:
            for i in np.flatnonzero(final_info["_episode"]):
                returns.append((global_step, float(final_info["episode"]["r"][i])))
                print(f"step {global_step:>8,}  episodic return {returns[-1][1]:+.0f}")

        real_next_obs = next_obs.copy()  # same-step autoreset: the final obs of ended episodes is in infos
        if "_final_obs" in infos:
            for i in np.flatnonzero(infos["_final_obs"]):
                real_next_obs[i] = infos["final_obs"][i]
        rb.add(obs, real_next_obs, actions, rewards, terminations, infos)
        obs = next_obs

        if global_step >= args.learning_starts:
            if learning_start_time is None:
                learning_start_time = (time.perf_counter(), global_step)
                rss_at_learning_start = peak_rss_bytes()
            if global_step % args.train_frequency == 0:
                data = rb.sample(args.batch_size)
                with torch.no_grad():
                    target_max, _ = target_network(data.next_observations).max(dim=1)
                    td_target = data.rewards.flatten() + args.gamma * target_max * (1 - data.dones.flatten())
                old_val = q_network(data.observations).gather(1, data.actions.long()).squeeze()
                loss = F.mse_loss(td_target, old_val)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            if global_step % args.target_network_frequency == 0:
                target_network.load_state_dict(q_network.state_dict())
        if global_step and global_step % args.report_every == 0:
            elapsed = time.perf_counter() - start
            print(f"step {global_step:>8,}  {global_step / elapsed:6.0f} steps/s  buffer {buffer_bytes(rb) / 2**20:8.1f} MiB"
                  f"  peak RSS {peak_rss_bytes() / 2**20:7.0f} MiB")

    elapsed = time.perf_counter() - start
    steps = args.total_steps
    print(f"\n{args.buffer} buffer on {args.env_id}: {steps:,} env steps in {elapsed:.1f} s = {steps / elapsed:.0f} steps/s")
    if learning_start_time is not None:
        t0, s0 = learning_start_time
        print(f"  while training (from step {s0:,}): {(steps - s0) / (time.perf_counter() - t0):.0f} steps/s")
    transitions, size = min(steps, args.buffer_size), buffer_bytes(rb)
    if args.buffer == "mmreplay":
        print(f"  buffer: {size:,} bytes on disk ({size / 2**20:.1f} MiB) for {transitions:,} stored transitions "
              f"({size / transitions:,.0f} bytes each), capacity {args.buffer_size:,}")
    else:  # numpy allocates the arrays for the whole capacity; pages count in RSS as they are filled
        print(f"  buffer: {size:,} bytes of arrays ({size / 2**20:.1f} MiB) for capacity {args.buffer_size:,} "
              f"({size / args.buffer_size:,.0f} bytes each), {transitions:,} stored")
    print(f"  peak RSS: {peak_rss_bytes() / 2**20:.0f} MiB ({rss_before_buffer / 2**20:.0f} MiB before the buffer was made"
          + (f", {rss_at_learning_start / 2**20:.0f} MiB when learning started)" if learning_start_time else ")"))
    if returns:
        last = [r for _, r in returns[-10:]]
        print(f"  episodes: {len(returns)}, mean return of the last {len(last)}: {np.mean(last):+.1f}")
    plot(returns, args.plot or Path(f"dqn_{args.buffer}.png"), title=f"DQN on {args.env_id}, {args.buffer} buffer")
    envs.close()
    if hasattr(rb, "close"):
        rb.close()
    if temporary is not None:
        shutil.rmtree(temporary)


def plot(returns: list[tuple[int, float]], path: Path, *, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("  (matplotlib is not installed: no learning-curve PNG)")
        return
    figure, axes = plt.subplots(figsize=(6, 3.5))
    if returns:
        axes.plot(*zip(*returns), marker=".")
    axes.set(xlabel="env step", ylabel="episodic return", title=title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    print(f"  learning curve: {path}")


if __name__ == "__main__":
    main()
