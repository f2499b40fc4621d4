"""Many paced actors on one box: the learner's batches/s while N actor processes add, beside its solo rate.

N actor processes (Ray actors, default 100), each adding S steps/s (--rate) of real Pong frames (one
recorded stream put in Ray's object store once; actor k starts at its own offset) through a
``ShardWriter`` into K shards (--shards); a learner draws batches of 32 with ``batches(prefetch=...)`` for
--seconds. In one run: the learner's rate with no actor adding (the solo rate, same shards and contents),
then with every actor adding; ingest achieved against asked; each shard's queue depth, sampled every 0.5 s;
and a synchronous ``sample()``'s latency in both phases. ``--learners actors,direct`` measures, in each
phase, the learner through the shard actors and then with ``direct_read=True`` (its draws read each
shard's last commit outside the shard actor, so they never queue behind its adds). ``--nodes 2`` starts
a second Ray node on this machine (``ray.cluster_utils.Cluster``) and places every shard there, as shards
on other machines would be: the learner's direct draws then go to a reader actor per shard on that node,
not to its own process. Ray runs on loopback alone, in a temporary directory of its own, and is shut down
at the end; every loop is bounded in count and time.

    python benchmarks/bench_ray_actors.py --actors 100 --rate 50 --shards 4 --seconds 20 --json

Prints a summary (``--json``: one JSON object; ``--out FILE`` writes it too). Exits non-zero, with the
error on stderr, when the actors do not start within --start-timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mmreplay.testing import atari_frames


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="example: python "
                                     "benchmarks/bench_ray_actors.py --actors 100 --rate 50 --shards 4 --seconds 20 --json",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actors", type=int, default=100, help="actor processes (default 100)")
    parser.add_argument("--rate", type=float, default=50.0, help="steps/s each actor adds (default 50)")
    parser.add_argument("--shards", type=int, default=4, help="shard actors (default 4)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each phase is measured (default 20)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--group", type=int, default=16, help="batches(group=) (default 16)")
    parser.add_argument("--prefetch", type=int, default=2, help="batches(prefetch=) (default 2)")
    parser.add_argument("--steps-per-send", type=int, default=32, help="the writers' sends (default 32)")
    parser.add_argument("--prefill", type=int, default=4000, help="transitions per shard before the phases")
    parser.add_argument("--learners", default="actors",
                        help="comma-separated ways the learner draws, each measured in turn in both phases: "
                        "'actors' (through the shard actors) and 'direct' (direct_read=True: each shard's last "
                        "commit read outside its actor: in the learner's process, or with --nodes 2 by a reader "
                        "actor on the shards' node) (default actors)")
    parser.add_argument("--nodes", type=int, choices=[1, 2], default=1,
                        help="Ray nodes on this machine: 2 places the shards on a second node (default 1)")
    parser.add_argument("--frame-encoding", choices=["lz4", "lz4-reference"], default=None,
                        help="the shards' (default: ShardedReplay.create's)")
    parser.add_argument("--start-timeout", type=float, default=600.0, help="the longest wait for the actors to start")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also write the JSON object here")
    wants_json = "--json" in (sys.argv[1:] if argv is None else argv)

    def refuse(message: str) -> None:  # argparse's usage error, also as JSON with --json
        if wants_json:
            print(json.dumps({"error": message}))
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)

    parser.error = refuse  # type: ignore[method-assign, assignment]
    args = parser.parse_args(argv)
    for name in ("actors", "shards", "batch_size", "group", "prefetch", "steps_per_send"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    args.learners = [name.strip() for name in args.learners.split(",") if name.strip()]
    unknown = sorted(set(args.learners) - {"actors", "direct"})
    if unknown or not args.learners:
        parser.error(f"--learners takes 'actors' and 'direct'; got {unknown or 'nothing'}")
    if not (args.rate > 0 and args.seconds > 0):
        parser.error(f"--rate and --seconds must be > 0; got {args.rate} and {args.seconds}")
    return args


class DepthPoller:
    """Each shard's queue depth every 0.5 s, asked from a thread through a client of its own (so the
    learner's loop neither waits for these calls nor shares its draw state with them)."""

    def __init__(self, name: str) -> None:
        import threading

        from mmreplay.ray import ShardedReplay

        self.depths: list[int] = []
        self._client = ShardedReplay.connect(name)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        for _ in range(100_000):
            if self._stop.wait(0.5):
                return
            self.depths.extend(info["queued"] for info in self._client.stats() if info is not None)

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join(timeout=120)
        self._client.close()
        return self.depths


def learner_phase(replay: Any, args: argparse.Namespace, seconds: float, *, seed: int, direct: bool) -> dict[str, Any]:
    """The learner's batches/s over ``seconds`` (after what it fetched ahead), the shards' queue depths
    every 0.5 s, then a few synchronous samples' latencies; ``direct``: with ``direct_read=True``."""
    batches = replay.batches(args.batch_size, prefetch=args.prefetch, group=args.group, rng=seed, timeout_s=60,
                             direct_read=direct)
    for _ in range(args.prefetch * args.group):  # what it fetched ahead before the clock starts
        next(batches)
    poller = DepthPoller(replay.name)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds and count < 10_000_000:
        next(batches)
        count += 1
    rate = count / (time.perf_counter() - start)
    latencies = []
    deadline = time.perf_counter() + max(2.0, seconds / 4)
    rng = np.random.default_rng(seed)
    while len(latencies) < 20 and time.perf_counter() < deadline:
        began = time.perf_counter()
        replay.sample(args.batch_size, rng, timeout_s=60, direct_read=direct)
        latencies.append(time.perf_counter() - began)
    depths = poller.stop()
    return {"batches_per_s": round(rate, 1), "batches": count,
            "queued_median": float(np.median(depths)) if depths else None, "queued_max": max(depths, default=None),
            "sample_ms_median": round(1000 * float(np.median(latencies)), 2) if latencies else None,
            "sample_ms_max": round(1000 * max(latencies), 2) if latencies else None, "samples": len(latencies)}


def learner_phases(replay: Any, args: argparse.Namespace, *, seed: int) -> dict[str, dict[str, Any]]:
    """``learner_phase`` for each of ``--learners``, one after another."""
    return {name: learner_phase(replay, args, args.seconds, seed=seed + i, direct=name == "direct")
            for i, name in enumerate(args.learners)}


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    # Loopback alone (tests/ray_loopback.py): set before ray is imported, or Ray 2.60 listens on every interface.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    from mmreplay.ray import ShardedReplay

    stream = atari_frames.load("pong", atari_frames.BENCHMARK_FRAMES)
    cluster = None
    placement: Any = "local"
    if args.nodes == 2:
        from ray.cluster_utils import Cluster

        os.environ["RAY_TMPDIR"] = str(work)  # Cluster writes the head's address under it: ours, not /tmp/ray
        cluster = Cluster(initialize_head=True, connect=True, head_node_args={
            "num_cpus": 2, "include_dashboard": False, "temp_dir": str(work / "ray"), "node_ip_address": "127.0.0.1"})
        placement = [cluster.add_node(num_cpus=2, node_ip_address="127.0.0.1").node_id] * args.shards
        cluster.wait_for_nodes()
    else:
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                 _temp_dir=str(work / "ray"), namespace="mmreplay-bench-actors")
    try:
        per_shard = -(-args.actors // args.shards) + 2
        options: dict[str, Any] = {} if args.frame_encoding is None else {"frame_encoding": args.frame_encoding}
        replay = ShardedReplay.create("actors", str(work / "shards"), num_shards=args.shards, frame_shape=(84, 84),
                                      capacity=args.shards * max(200_000, 64 * per_shard), stack_size=4,
                                      placement=placement, envs_per_shard=per_shard, **options)
        frames_ref = ray.put(stream["frames"])
        frames = stream["frames"]
        for k in range(args.shards):  # the contents both phases draw from
            writer = replay.writer(f"prefill-{k}", shard=k, steps_per_send=256)
            for t in range(args.prefill):
                i = (3000 * k + t) % (len(frames) - 1)
                writer.add(frames[i], t % 6, 0.0, frames[i + 1], False, False)
            writer.flush()
        solo = learner_phases(replay, args, seed=1)

        @ray.remote(num_cpus=0)
        class Actor:
            """One acting process: adds ``rate`` steps/s of the stream from its offset, paced."""

            def __init__(self, key: str, shard: int, frames: np.ndarray, steps_per_send: int) -> None:
                self.writer = ShardedReplay.connect("actors").writer(key, shard=shard, steps_per_send=steps_per_send)
                self.frames = frames
                self.offset = (int(key) * 997) % (len(frames) - 1)

            def ready(self) -> bool:
                return True

            def act(self, start_at: float, seconds: float, rate: float) -> dict[str, float]:
                frames, added, behind = self.frames, 0, 0.0
                while time.time() < start_at:
                    time.sleep(min(0.05, max(0.0, start_at - time.time())))
                limit = int(rate * seconds) + 1
                while added < limit:
                    due = start_at + added / rate
                    now = time.time()
                    if now > start_at + seconds:
                        break
                    if due > now:
                        time.sleep(due - now)
                    else:
                        behind = max(behind, now - due)
                    i = (self.offset + added) % (len(frames) - 1)
                    self.writer.add(frames[i], added % 6, 0.0, frames[i + 1], False, False)
                    added += 1
                self.writer.flush(timeout_s=120)
                return {"added": added, "most_behind_s": behind}

        started = time.perf_counter()
        actors = [Actor.remote(str(k), k % args.shards, frames_ref, args.steps_per_send) for k in range(args.actors)]
        ready, pending = ray.wait([actor.ready.remote() for actor in actors], num_returns=args.actors,
                                  timeout=args.start_timeout)
        if pending:
            raise RuntimeError(f"{len(ready)} of {args.actors} actors started within {args.start_timeout} s")
        start_seconds = time.perf_counter() - started
        warmup = 3.0
        start_at = time.time() + 2.0
        span = warmup + len(args.learners) * (args.seconds + max(2.0, args.seconds / 4)) + 2.0
        runs = [actor.act.remote(start_at, span, args.rate) for actor in actors]
        time.sleep(max(0.0, start_at + warmup - time.time()))
        loaded = learner_phases(replay, args, seed=11)
        done = ray.get(runs, timeout=span + 300)
        added = sum(result["added"] for result in done)
        results = {
            "settings": {key: value for key, value in vars(args).items() if key not in ("out", "json")},
            "actors_started_s": round(start_seconds, 1),
            "solo": solo, "with_actors": loaded,
            "learner_over_solo": {name: round(loaded[name]["batches_per_s"] / solo[name]["batches_per_s"], 3)
                                  for name in args.learners},
            "ingest_asked_per_s": round(args.actors * args.rate), "ingest_per_s": round(added / span),
            "actors_most_behind_s": round(max(result["most_behind_s"] for result in done), 2),
            "shard_len": [info["len"] for info in replay.stats() if info is not None],
        }
        replay.close(destroy=True)
        for actor in actors:
            ray.kill(actor)
        return results
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    work = Path(tempfile.mkdtemp(prefix="mmr-bench-actors-"))
    load_before = os.getloadavg()
    try:
        results = run(args, work)
    except Exception as error:  # noqa: BLE001 - reported on stderr (and as JSON with --json)
        print(f"bench_ray_actors: {type(error).__name__}: {error}", file=sys.stderr)
        if args.json:
            print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["machine"] = {"cpus": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
                          "load_after": [round(x, 2) for x in os.getloadavg()]}
    text = json.dumps(results, indent=None if args.json else 1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
