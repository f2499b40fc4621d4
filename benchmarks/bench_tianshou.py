"""Tianshou's own ``VectorReplayBuffer`` against ``MmreplayVectorReplayBuffer``, in one process, alternating.

Both buffers take the same adds of recorded Pong frame stacks (``mmreplay.testing.atari_frames``' frames,
stacked as ``FrameStackObservation(4)`` does, in ``--envs`` envs), then draw the same batches
(``sample(B)``, seeded alike) and answer ``hasnull()``. Each measurement alternates the two buffers,
``--rounds`` times, and reports the median: a busy machine slows both alike. Printed per buffer: adds per
second, ``sample(B)`` per second, one ``hasnull()``'s seconds, and the process's RSS growth after its
adds (its frames' memory). Not a test: nothing here asserts a time.

    python benchmarks/bench_tianshou.py --transitions 5000 --batch 32
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def frames(count: int) -> np.ndarray:
    """``count`` real 84x84 Pong frames (recorded once by mmreplay.testing.atari_frames), repeated if fewer."""
    from mmreplay.testing import atari_frames

    recorded = atari_frames.load("pong", 4000)["frames"]
    return np.resize(recorded, (count, *recorded.shape[1:]))


def rss_mb() -> float:
    with open("/proc/self/statm") as file:
        return int(file.read().split()[1]) * 4096 / 1e6


def adds(buffer: object, stream: np.ndarray, envs: int) -> float:
    """Every add of ``stream``'s frames: one row per env per call, episodes of 500 steps; seconds."""
    from tianshou.data import Batch

    per_env = len(stream) // envs
    stacks = [np.stack([stream[e * per_env]] * 4) for e in range(envs)]
    started = time.perf_counter()
    for t in range(1, per_env):
        ended = t % 500 == 0
        obs = np.stack(stacks)
        obs_next = np.stack([np.concatenate([stacks[e][1:], stream[e * per_env + t][None]]) for e in range(envs)])
        buffer.add(Batch(obs=obs, obs_next=obs_next, act=np.zeros(envs, np.int64), rew=np.zeros(envs),  # type: ignore[attr-defined]
                         terminated=np.full(envs, ended), truncated=np.zeros(envs, bool)))
        stacks = [np.stack([stream[e * per_env + t]] * 4) if ended else obs_next[e] for e in range(envs)]
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transitions", type=int, default=5000)
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--samples", type=int, default=200, help="sample() calls per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from tianshou.data import VectorReplayBuffer

    from mmreplay.tianshou import MmreplayVectorReplayBuffer

    stream = frames(args.transitions)
    workdir = Path(tempfile.mkdtemp(prefix="mmreplay-bench-tianshou-"))
    buffers = {}
    figures: dict[str, dict[str, object]] = {}
    for name in ("tianshou", "mmreplay"):  # adds alternate only once: each buffer is filled once
        before = rss_mb()
        buffer = (VectorReplayBuffer(args.transitions, args.envs, random_seed=0) if name == "tianshou" else
                  MmreplayVectorReplayBuffer(args.transitions, args.envs, path=workdir / "stores", stack_size=4, random_seed=0))
        seconds = adds(buffer, stream, args.envs)
        buffers[name] = buffer
        figures[name] = {"adds_per_s": round(len(buffer) / seconds), "rss_growth_mb": round(rss_mb() - before, 1),
                         "stored": len(buffer)}
    samples: dict[str, list[float]] = {name: [] for name in buffers}
    hasnull: dict[str, list[float]] = {name: [] for name in buffers}
    for _ in range(args.rounds):
        for name, buffer in buffers.items():
            started = time.perf_counter()
            for _ in range(args.samples):
                buffer.sample(args.batch)
            samples[name].append(args.samples / (time.perf_counter() - started))
            started = time.perf_counter()
            buffer.hasnull()
            hasnull[name].append(time.perf_counter() - started)
    for name in buffers:
        figures[name]["samples_per_s"] = round(statistics.median(samples[name]))
        figures[name]["hasnull_s"] = statistics.median(hasnull[name])
    figures["mmreplay"]["store_bytes_on_disk"] = sum(store.bytes_on_disk for store in buffers["mmreplay"].stores if store)
    arguments = {"transitions": args.transitions, "envs": args.envs, "batch": args.batch, "rounds": args.rounds}
    if args.json:
        print(json.dumps({"arguments": arguments, "figures": figures}, indent=1))
    else:
        print(arguments)
        for name, values in figures.items():
            print(f"{name:>9}: " + ", ".join(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
                                             for key, value in values.items()))


if __name__ == "__main__":
    main()
