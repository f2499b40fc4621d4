"""Ray's own cost per actor call on this machine, beside what a group of ``batches()`` costs through the
shard actors: the floor under the through-actors path.

Two parts, each in alternating windows in one process (the machine's drift falls on both sides):

- **The floor**: two trivial actors answering at once, as a group's two shards do, each call answering
  ``1`` ("small") or ``--answer-kb`` of bytes and a small dict ("answer", a shard's answer for a group
  is 0.3-1.1 MB at groups of 64), through plain actor calls (``.remote()`` then ``ray.get``) against a
  Ray compiled graph over the same two calls (a beta Ray API, shared-memory channels; compiled afresh
  for each window and torn down after it, so its loop runs only in its own windows).
- **The path**: ``ShardedReplay.batches(32, prefetch=2, group=G)`` from 2 shard actors on this node,
  for each G of ``--groups``, against a local store's ``sample(32)`` of the same transitions.

Each window reports wall time and the CPU time (``/proc``: user + system) of every process this one
started, by role: this process (the caller, the learner), the actors (``ray::Echo``, ``ray::ReplayShard``)
and the rest of Ray (raylet, GCS, idle workers). Ray runs on loopback alone in a temporary directory of
its own and is shut down at the end.

    python benchmarks/lab/ray_call_floor.py --game pong --frame-encoding lz4 --json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mmreplay.testing import atari_frames
from ray_pairs import pair_parser, run_main, two_shards_and_a_store

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before ray's import: loopback alone (Ray 2.60)
_TICK = os.sysconf("SC_CLK_TCK")


def descendants() -> list[int]:
    """This process and every process it started (and theirs), from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def cpu_by_pid(pids: list[int]) -> dict[int, tuple[str, float]]:
    """Each of ``pids``' role (caller, actors, ray) and seconds of CPU (user + system) so far."""
    found = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        # an actor's title is ray::Class, or ray::Class.method while it runs one
        actor = command.startswith(("ray::Echo", "ray::ReplayShard"))
        role = "caller" if pid == os.getpid() else "actors" if actor else "ray"
        found[pid] = (role, (int(fields[11]) + int(fields[12])) / _TICK)
    return found


def timed(call: Callable[[], Any], count: int, pids: list[int]) -> dict[str, float]:
    """``call()`` ``count`` times: wall and CPU by role (a process's role as it was before), in
    microseconds per call."""
    before, began = cpu_by_pid(pids), time.perf_counter()
    for _ in range(count):
        call()
    wall, after = time.perf_counter() - began, cpu_by_pid(pids)
    result = {"wall_us": wall / count * 1e6, "caller_cpu_us": 0.0, "actors_cpu_us": 0.0, "ray_cpu_us": 0.0}
    for pid, (role, seconds) in before.items():
        if pid in after:
            result[f"{role}_cpu_us"] += (after[pid][1] - seconds) / count * 1e6
    result["all_cpu_us"] = result["caller_cpu_us"] + result["actors_cpu_us"] + result["ray_cpu_us"]
    return {name: round(value, 1) for name, value in result.items()}


def floor_windows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The floor's alternating windows: plain calls against a compiled graph, small and group-sized answers."""
    import ray
    from ray.dag import InputNode, MultiOutputNode

    @ray.remote(num_cpus=0)
    class Echo:
        def __init__(self, size: int) -> None:
            self.payload = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)

        def small(self, _: Any = None) -> int:
            return 1

        def answer(self, _: Any = None) -> tuple[np.ndarray, dict[str, int]]:
            return self.payload.copy(), {"epoch": 0}

    size = args.answer_kb * 1000
    plain, compiled = [Echo.remote(size) for _ in range(2)], [Echo.remote(size) for _ in range(2)]
    ray.get([actor.small.remote() for actor in plain + compiled])
    pids = descendants()
    windows = []
    for w in range(args.windows):
        for kind in ("small", "answer"):
            window: dict[str, Any] = {"answer": kind}
            for way in (("plain", "compiled") if w % 2 == 0 else ("compiled", "plain")):
                if way == "plain":
                    def call() -> None:
                        ray.get([getattr(actor, kind).remote() for actor in plain])  # noqa: B023
                    call()
                    window[way] = timed(call, args.calls, pids)
                    continue
                with InputNode() as given:
                    graph = MultiOutputNode([getattr(actor, kind).bind(given) for actor in compiled])
                dag = graph.experimental_compile(_buffer_size_bytes=max(4 * size, 1_000_000))
                try:
                    for _ in range(5):
                        ray.get(dag.execute(0))
                    window[way] = timed(lambda: ray.get(dag.execute(0)), args.calls, pids)  # noqa: B023
                finally:
                    dag.teardown()
            windows.append(window)
    for actor in plain + compiled:
        ray.kill(actor)
    return windows


def path_windows(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """The path's alternating windows: ``batches(32, prefetch=2, group=G)`` against local ``sample(32)``."""
    frames = atari_frames.load(args.game, atari_frames.BENCHMARK_FRAMES)["frames"]
    replay, local = two_shards_and_a_store(work, frames, frame_encoding=args.frame_encoding,
                                           transitions=args.transitions)
    rng = np.random.default_rng(0)
    windows = []
    try:
        pids = descendants()
        for group in args.groups:
            batches = replay.batches(32, prefetch=2, group=group, rng=1)
            for _ in range(2 * group + 64):  # warm up: the first groups
                next(batches)
            for w in range(args.windows):
                window: dict[str, Any] = {"group": group}
                for way in (("actors", "local") if w % 2 == 0 else ("local", "actors")):
                    call = (lambda: next(batches)) if way == "actors" else (lambda: local.sample(32, rng))  # noqa: B023
                    window[way] = timed(call, args.batches, pids)
                windows.append(window)
            batches.close()
    finally:
        replay.close(destroy=True)
        local.close()
    return windows


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(float(np.median(values)), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             _temp_dir=str(work / "ray"))
    try:
        floor = floor_windows(args)
        path = path_windows(args, work)
    finally:
        ray.shutdown()
    results: dict[str, Any] = {"game": args.game, "frame_encoding": args.frame_encoding,
                               "answer_kb": args.answer_kb, "floor": floor, "path": path}
    for kind in ("small", "answer"):
        rows = [w for w in floor if w["answer"] == kind]
        results[f"floor_{kind}"] = {
            f"{way}_{measure}": summary([w[way][measure] / 2 for w in rows])  # two calls a round: per call
            for way in ("plain", "compiled") for measure in ("wall_us", "all_cpu_us", "caller_cpu_us")}
        results[f"floor_{kind}"]["plain_over_compiled_cpu"] = summary(
            [w["plain"]["all_cpu_us"] / w["compiled"]["all_cpu_us"] for w in rows])
    for group in args.groups:
        rows = [w for w in path if w["group"] == group]
        results[f"path_group{group}"] = {
            "rate_over_local": summary([w["local"]["wall_us"] / w["actors"]["wall_us"] for w in rows]),
            **{f"actors_{measure}": summary([w["actors"][measure] for w in rows])
               for measure in ("caller_cpu_us", "actors_cpu_us", "ray_cpu_us", "all_cpu_us")},
            "local_caller_cpu_us": summary([w["local"]["caller_cpu_us"] for w in rows]),
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = pair_parser(__doc__, "benchmarks/lab/ray_call_floor.py --game breakout --groups 64,256 --json",
                         transitions=3000)
    parser.add_argument("--calls", type=int, default=200, help="rounds of two calls a floor window (default 200)")
    parser.add_argument("--answer-kb", type=int, default=400, help="each actor's answer in the floor (default 400)")
    parser.add_argument("--batches", type=int, default=640, help="batches a path window (default 640)")
    parser.add_argument("--groups", type=lambda text: [int(g) for g in text.split(",")], default=[64, 256],
                        help="the path's groups, comma-separated (default 64,256)")
    parser.set_defaults(windows=4)
    return run_main("ray_call_floor", run, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
