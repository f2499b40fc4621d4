"""Is one build of the compiled extensions slower than another, on the same machine, in the same run?

Two source trees (each a folder holding an ``mmreplay`` package with its extensions built in place, such
as a checkout of main and a branch) are timed in alternating fresh processes, ``--rounds`` times each,
on real frames: a batch of 32 x 5 distinct Pong frames decoded by ``lz4_codec.decode_batch`` (one thread
and two), a store of Pong frames filled through ``add`` (its fast path writes frames and rows in
compiled calls), ``sample(32)`` from it, and ``sample(32)`` from a store of CartPole-sized float32
frames, where the compiled read's per-call overhead is most of a batch. Prints each tree's median per
task, and the ratio of the second tree's to the first's (below 1: the second is faster). Alternating
keeps load from other processes on a shared machine out of the ratio, as far as it can be kept.

    python benchmarks/lab/bench_builds.py /tmp/main-tree . --rounds 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TASKS = ("decode-1", "decode-2", "add", "sample", "sample-small")
UNITS = {"decode-1": "us/batch", "decode-2": "us/batch", "add": "us/add", "sample": "us/batch",
         "sample-small": "us/batch"}


def median_seconds(call, repeats: int, *, per: int = 1) -> float:
    """The median seconds of one call, timed in groups of ``per`` calls, ``repeats`` groups."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(per):
            call()
        times.append((time.perf_counter() - start) / per)
    return statistics.median(times)


def worker(frames_path: Path, frame_count: int) -> dict[str, object]:
    """Every task once, in this process, against the mmreplay on sys.path; medians in microseconds."""
    import mmreplay
    from mmreplay import ReplayStore
    from mmreplay.frames import lz4_codec as codec

    extension = sys.modules.get("mmreplay._lz4batch")
    frames = np.load(frames_path)["frames"][:frame_count]
    rng = np.random.default_rng(0)
    results: dict[str, object] = {"package": mmreplay.__file__, "extension": getattr(extension, "__file__", None)}

    payloads = [codec.compress(frame) for frame in frames]
    lengths = np.array([len(p) for p in payloads], np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    checksums = np.array([codec.checksum(p, i) for i, p in enumerate(payloads)], np.uint32)
    view = memoryview(b"".join(payloads))
    picks = iter([rng.choice(len(frames), 160, replace=False) for _ in range(4000)])
    out = np.empty((160, *frames.shape[1:]), np.uint8)
    segments = np.zeros(160, np.int64)
    for threads in (1, 2):
        def decode() -> None:
            pick = next(picks)
            assert codec.decode_batch(segments, offsets[pick], lengths[pick], checksums[pick], pick, out,
                                      views=[view], threads=threads) == -1
        decode()
        results[f"decode-{threads}"] = median_seconds(decode, 1500) * 1e6

    with tempfile.TemporaryDirectory() as directory:
        store = ReplayStore.create(Path(directory) / "pong.mmr", frame_shape=frames.shape[1:], capacity=len(frames),
                                   stack_size=4, commit_interval_s=None)
        step = iter(range(len(frames) - 1))  # one episode: every add after the first takes the fast path

        def add() -> None:
            i = next(step)
            store.add(frames[i], 1, 0.0, frames[i + 1], False, False)
        results["add"] = median_seconds(add, 40, per=(len(frames) - 1) // 40) * 1e6
        sampler = np.random.default_rng(1)
        results["sample"] = median_seconds(lambda: store.sample(32, rng=sampler), 300, per=5) * 1e6
        store.close()

        states = rng.normal(size=(2000, 4)).astype(np.float32)
        small = ReplayStore.create(Path(directory) / "cartpole.mmr", frame_shape=(4,), capacity=50_000, stack_size=1,
                                   frame_dtype=np.float32, commit_interval_s=None)
        for i in range(50_000):
            small.add(states[i % 2000], i % 2, 1.0, states[(i + 1) % 2000], i % 200 == 199, False)
        results["sample-small"] = median_seconds(lambda: small.sample(32, rng=sampler), 300, per=20) * 1e6
        small.close()
    return results


def run_worker(tree: Path, args: argparse.Namespace, frames_path: Path) -> dict[str, object]:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
    environment.pop("MMREPLAY_PURE_PYTHON", None)
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", str(frames_path), str(args.frames)],
        capture_output=True, text=True, env=environment, cwd=tempfile.gettempdir(), timeout=600,
    )
    if done.returncode != 0:
        sys.exit(f"the worker for {tree} failed:\n{done.stderr}")
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    if not str(result["extension"]).startswith(str(tree.resolve())):
        sys.exit(f"the worker for {tree} ran {result['extension']}, not that tree's build")
    return result


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        print(json.dumps(worker(Path(sys.argv[2]), int(sys.argv[3]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", type=Path, nargs=2, help="two folders, each holding a built mmreplay package")
    parser.add_argument("--rounds", type=int, default=8, help="fresh processes per tree, alternating")
    parser.add_argument("--frames", type=int, default=4000, help="Pong frames of the recorded stream to use")
    parser.add_argument("--frames-file", type=Path, help="an npz of frames (mmreplay.testing.atari_frames' layout) to "
                        "use instead of the recorded stream")
    parser.add_argument("--json", type=Path, help="also write every round's figures here")
    args = parser.parse_args()
    if args.frames_file is None:
        from mmreplay.testing import atari_frames

        frames_path = atari_frames.stream_path("pong", args.frames)
    else:
        frames_path = args.frames_file.resolve()
    trees = [tree.resolve() for tree in args.trees]
    rounds: dict[str, list[dict[str, object]]] = {str(tree): [] for tree in trees}
    for round_number in range(args.rounds):
        for tree in trees if round_number % 2 == 0 else trees[::-1]:  # ABBA: neither always runs first
            rounds[str(tree)].append(run_worker(tree, args, frames_path))
    print(f"{args.rounds} alternating rounds, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end")
    print(f"| task | unit | {trees[0]} | {trees[1]} | second / first |")
    print("|---|---|---|---|---|")
    for task in TASKS:
        first, second = (statistics.median(float(str(r[task])) for r in rounds[str(tree)]) for tree in trees)
        print(f"| {task} | {UNITS[task]} | {first:.2f} | {second:.2f} | {second / first:.3f} |")
    if args.json:
        args.json.write_text(json.dumps(rounds, indent=1))


if __name__ == "__main__":
    main()
