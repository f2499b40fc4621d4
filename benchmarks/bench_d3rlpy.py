"""d3rlpy's own replay buffer against ``MmreplayReplayBuffer`` on real Pong transitions, in one process.

The same episodes (``mmreplay.testing.atari_frames``' Pong stream, ``(1, 84, 84)`` frames, stacked 4 at a
time by ``FrameStackTransitionPicker`` and by the store) go into d3rlpy's ``ReplayBuffer`` and into a
store. The script reports, for each buffer: the Python heap it holds (tracemalloc, numpy's arrays
included), its file on disk (d3rlpy's ``dump``, the store's directory) and the time to load it back;
sampling rates of ``sample_transition_batch(32)`` and ``sample_trajectory_batch(16, 20)``, the two
buffers taking turns; and the losses of ``DQN``, ``DiscreteCQL`` and ``DiscreteDecisionTransformer``
trained on each with ``d3rlpy.seed`` alike (equal when the buffers hand over the same batches). Not a
test: figures depend on the machine and its load.

    python benchmarks/bench_d3rlpy.py --frames 50000 --steps 100 --json benchmarks/results/d3rlpy-2core.jsonl
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

from mmreplay.testing import atari_frames


def pong_episodes(frames: int) -> list[Any]:
    """The Pong stream's episodes as d3rlpy episodes (a stream's cut last episode as truncated)."""
    from d3rlpy.dataset import Episode

    from ale_py.registration import register_v5_envs

    register_v5_envs()  # ale-py 0.12 registers its envs at import only with gymnasium >= 1.1 (d3rlpy pins 1.0)
    stream = atari_frames.load("pong", frames)
    starts = np.flatnonzero(stream["episode_start"]).tolist() + [len(stream["frames"])]
    episodes = []
    for start, stop in zip(starts[:-1], starts[1:]):
        taken = np.arange(start, stop)[stream["action"][start:stop] >= 0]
        if len(taken):
            episodes.append(Episode(observations=stream["frames"][taken][:, None].copy(),
                                    actions=stream["action"][taken, None].astype(np.int64),
                                    rewards=stream["reward"][taken, None].astype(np.float32),
                                    terminated=bool(stream["terminated"][taken[-1]])))
    return episodes


def held_bytes(build: Any) -> tuple[Any, int, float]:
    """(what ``build()`` returns, the Python heap it holds after, seconds it took)."""
    tracemalloc.start()
    started = time.perf_counter()
    made = build()
    seconds = time.perf_counter() - started
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return made, held, seconds


def rates(buffers: dict[str, Any], call: Any, rounds: int, per_round: int) -> dict[str, float]:
    """Median calls per second of ``call(buffer)``, the buffers taking turns for ``rounds`` rounds."""
    seen: dict[str, list[float]] = {name: [] for name in buffers}
    for _ in range(rounds):
        for name, buffer in buffers.items():
            started = time.perf_counter()
            for _ in range(per_round):
                call(buffer)
            seen[name].append(per_round / (time.perf_counter() - started))
    return {name: float(np.median(values)) for name, values in seen.items()}


def train(make: Any, dataset: Any, steps: int, seed: int) -> list[float]:
    """The losses of ``steps`` updates of a new algorithm on ``dataset`` (one a step)."""
    import d3rlpy

    d3rlpy.seed(seed)
    algo = make().create(device="cpu:0")
    losses: list[float] = []
    if hasattr(algo, "build_with_dataset"):
        algo.build_with_dataset(dataset)
    trajectories = "Transformer" in type(algo).__name__
    for _ in range(steps):
        batch = dataset.sample_trajectory_batch(8, 20) if trajectories else dataset.sample_transition_batch(32)
        losses.append(float(algo.update(batch)["loss"]))
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=50_000)
    parser.add_argument("--steps", type=int, default=100, help="updates of each algorithm on each buffer")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="append the results here (one JSON line)")
    args = parser.parse_args()
    import d3rlpy
    from d3rlpy.dataset import FrameStackTrajectorySlicer, FrameStackTransitionPicker, InfiniteBuffer, ReplayBuffer

    from mmreplay.d3rlpy import MmreplayReplayBuffer

    episodes = pong_episodes(args.frames)
    work = Path(tempfile.mkdtemp(prefix="bench-d3rlpy-"))
    result: dict[str, Any] = {"machine": platform.node(), "date": time.strftime("%Y-%m-%d"), "d3rlpy": d3rlpy.__version__,
                              "frames": args.frames, "episodes": len(episodes)}
    try:
        def own() -> Any:
            return ReplayBuffer(InfiniteBuffer(), episodes=episodes, transition_picker=FrameStackTransitionPicker(4),
                                trajectory_slicer=FrameStackTrajectorySlicer(4))

        theirs, _, _ = held_bytes(own)
        result["transitions"] = theirs.transition_count
        with open(work / "own.h5", "w+b") as file:
            theirs.dump(file)
        result["own_file_bytes"] = (work / "own.h5").stat().st_size
        del theirs

        def loaded() -> Any:
            with open(work / "own.h5", "rb") as file:
                return ReplayBuffer.load(file, InfiniteBuffer(), transition_picker=FrameStackTransitionPicker(4),
                                         trajectory_slicer=FrameStackTrajectorySlicer(4))

        theirs, result["own_held_bytes"], result["own_load_s"] = held_bytes(loaded)
        MmreplayReplayBuffer.from_episodes(work / "pong.mmr", episodes, frame_stack=4, action_size=6).close()
        del episodes
        ours, result["store_held_bytes"], result["store_open_s"] = held_bytes(
            lambda: MmreplayReplayBuffer.from_store(work / "pong.mmr", action_size=6))
        result["store_disk_bytes"] = ours.store.bytes_on_disk
        assert ours.transition_count == theirs.transition_count
        buffers = {"d3rlpy": theirs, "mmreplay": ours}
        result["transition_batches_per_s"] = rates(buffers, lambda b: b.sample_transition_batch(32), args.rounds, 20)
        result["trajectory_batches_per_s"] = rates(buffers, lambda b: b.sample_trajectory_batch(16, 20), args.rounds, 5)
        print(json.dumps(result), flush=True)  # the figures so far, before the (long) training runs
        makers = {
            "DQN": lambda: d3rlpy.algos.DQNConfig(batch_size=32),
            "DiscreteCQL": lambda: d3rlpy.algos.DiscreteCQLConfig(batch_size=32),
            "DiscreteDecisionTransformer": lambda: d3rlpy.algos.DiscreteDecisionTransformerConfig(
                batch_size=8, context_size=20, max_timestep=2000, num_heads=1, num_layers=1),
        }
        result["losses"] = {}
        for name, make in makers.items():
            runs = {label: train(make, buffer, args.steps, seed=1) for label, buffer in buffers.items()}
            result["losses"][name] = {label: {"first": losses[0], "last": losses[-1], "mean": float(np.mean(losses))}
                                      for label, losses in runs.items()}
            result["losses"][name]["equal"] = runs["d3rlpy"] == runs["mmreplay"]
            print(name, result["losses"][name], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "a") as file:
            file.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
