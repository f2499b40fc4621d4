"""Reverb 0.14.0 beside ``ShardedReplay`` in one run, in alternating windows, on the same recorded Pong frames.

Both replays are alive for the whole run and are measured in turns (Reverb's window, then mmreplay's,
round after round), with the same transitions (the Pong stream's complete episodes: 84x84 uint8 frames
in stacks of 4, stacks repeating an episode's first frame), the same capacity and batches of 32:

a. insert: transitions/s from ``--writers`` writer processes, each adding the stream once, timed from
   the first add until every writer's flush returned (Reverb: one ``TrajectoryWriter`` per process;
   mmreplay: one ``ShardWriter`` per Ray actor, each writing to its own shard);
b. uniform, prefetched: batches/s of Reverb's ``TrajectoryDataset`` batched and prefetched with tf.data
   against ``ShardedReplay.batches(prefetch=, group=)``;
c. one call a batch: ``Client.sample(table, 32)`` against ``ShardedReplay.sample(32)``;
d. prioritized (exponent 0.6), prefetched as in b, with a priority update of the batch's 32 items after
   each batch (``Client.mutate_priorities``; ``ShardedReplay.update_priorities``);
e. memory: the Reverb server process's resident memory per transition (its growth over the inserts)
   against mmreplay's bytes on disk per transition and its shard processes' resident memory.

Reverb runs in its own venv (``--reverb-venv``, made from ``benchmarks/requirements-reverb.txt`` when
missing) in a subprocess, ``reverb_worker.py``, that holds the server and the learner's clients; it
runs in a network namespace of its own where only loopback exists, since Reverb's server listens on
every interface and cannot be told otherwise. Ray runs on 127.0.0.1 alone. Run with the Ray venv:

    PYTHONPATH=. .venv-ray/bin/python benchmarks/bench_reverb.py --rounds 3 --seconds 3 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.append(str(Path(__file__).resolve().parent))
import frame_streams  # noqa: E402

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements-reverb.txt"
BATCH = 32
MEASURES = ("prefetched", "one_call", "prioritized")


def ensure_reverb_venv(venv: Path) -> Path:
    """The Python of ``venv``, made with python3.11 and ``requirements-reverb.txt`` first if it is missing."""
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"bench_reverb: making Reverb's venv in {venv} (dm-reverb, tensorflow-cpu) ...", file=sys.stderr)
        subprocess.run(["python3.11", "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=True)
    check = subprocess.run([str(python), "-c", "import reverb, tensorflow"], capture_output=True, text=True)
    if check.returncode:
        raise SystemExit(f"bench_reverb: {python} cannot import reverb and tensorflow:\n{check.stderr[-2000:]}")
    return python


class ReverbSide:
    """The Reverb worker process (server, writers, learner) and its line protocol."""

    def __init__(self, python: Path, stream: Path, work: Path, args: argparse.Namespace) -> None:
        (work / "reverb-tmp").mkdir()
        self.log = open(work / "reverb.log", "w")
        command = [str(python), str(HERE / "reverb_worker.py"), "--server", "--stream", str(stream),
                   "--capacity", str(args.capacity), "--writers", str(args.writers), "--prefetch", str(args.prefetch),
                   "--in-flight", str(args.reverb_in_flight), "--sample-workers", str(args.reverb_sample_workers)]
        if not args.no_netns:  # a network namespace with loopback alone (Reverb listens on [::]:port)
            command = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *command]
        env = {**os.environ, "TMPDIR": str(work / "reverb-tmp"), "TF_CPP_MIN_LOG_LEVEL": "2"}
        env.pop("PYTHONPATH", None)
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        text=True, env=env)
        self.ready = self.read()

    def read(self) -> dict[str, Any]:
        for line in self.process.stdout:
            if line.startswith("@@ "):
                return json.loads(line[3:])
        self.log.flush()
        tail = Path(self.log.name).read_text()[-3000:]
        raise RuntimeError(f"the Reverb worker ended (exit {self.process.wait()}):\n{tail}")

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()  # by its pid: the process this object started
            self.process.wait()
        self.log.close()


def descendants(root: int) -> list[int]:
    """The pids of ``root``'s descendant processes, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def uses(pid: int, root: Path) -> bool:
    """Whether process ``pid`` has a file under ``root`` open or mapped."""
    prefix = str(root) + os.sep
    try:
        if prefix in Path(f"/proc/{pid}/maps").read_text():
            return True
        return any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def shard_rss_kib(root: Path) -> dict[str, int]:
    """Summed /proc status memory fields (KiB) of this process's Ray shard actors whose stores are under ``root``."""
    total = {"processes": 0, "VmRSS": 0, "RssAnon": 0, "RssFile": 0}
    for pid in descendants(os.getpid()):
        try:
            if not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::ReplayShard") or not uses(pid, root):
                continue
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            continue
        total["processes"] += 1
        for line in lines:
            name, _, value = line.partition(":")
            if name in total:
                total[name] += int(value.split()[0])
    return total


def allocated_bytes(root: Path) -> int:
    """Bytes of allocated blocks under ``root`` (as ``ReplayStore.bytes_on_disk`` counts them)."""
    return sum(os.stat(Path(folder) / name).st_blocks * 512 for folder, _, names in os.walk(root) for name in names)


def host_listeners() -> list[str]:
    """``ss -ltnp`` lines of sockets held by this process's descendants (Ray's)."""
    mine = {str(pid) for pid in descendants(os.getpid())}
    lines = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout.splitlines()
    return [line for line in lines if any(f"pid={pid}," in line for pid in mine)]


class MmreplaySide:
    """``ShardedReplay``s (uniform and prioritized) on a loopback Ray cluster, with their writer actors."""

    def __init__(self, stream: Path, work: Path, args: argparse.Namespace, count: int) -> None:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before ray's import: loopback alone
        import ray
        from ray._private import ray_constants

        from mmreplay import PrioritizedSampler
        from mmreplay.ray import ShardedReplay

        if ray_constants.ENABLE_RAY_CLUSTER:
            raise RuntimeError("ray was imported before RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 was set")
        self.ray, self.args, self.work = ray, args, work
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                 _temp_dir=str(work / "ray"), namespace="mmreplay-bench-reverb")
        common = {"num_shards": args.shards, "frame_shape": (84, 84), "capacity": args.capacity,
                  "placement": "local", "envs_per_shard": 2}
        self.replays = {
            "uniform": ShardedReplay.create("uniform", str(work / "uniform"), **common),
            "prioritized": ShardedReplay.create("prioritized", str(work / "prioritized"),
                                                sampler=PrioritizedSampler(alpha=0.6), **common),
        }

        @ray.remote(num_cpus=0)
        class Writer:
            def __init__(self, key: str, shard: int) -> None:
                with np.load(stream) as data:
                    self.stream = {name: data[name] for name in ("frames", "action", "reward", "terminated", "truncated")}
                self.writers = {name: ShardedReplay.connect(name).writer(key, shard=shard) for name in ("uniform", "prioritized")}

            def insert(self, table: str, count: int) -> int:
                s, add = self.stream, self.writers[table].add
                for t in np.flatnonzero(s["action"] >= 0)[:count].tolist():
                    add(s["frames"][t], np.int64(s["action"][t]), np.float32(s["reward"][t]), s["frames"][t + 1],
                        np.bool_(s["terminated"][t]), np.bool_(s["truncated"][t]))
                self.writers[table].flush()
                return count

        self.writers = [Writer.remote(f"w{k}", k % args.shards) for k in range(args.writers)]
        ray.get([writer.insert.remote("uniform", 0) for writer in self.writers])  # started and connected
        self.count = count
        self.rng = np.random.default_rng(0)
        self.iterators: dict[str, Any] = {}

    def insert(self, table: str) -> dict[str, Any]:
        started = time.perf_counter()
        inserted = sum(self.ray.get([writer.insert.remote(table, self.count) for writer in self.writers]))
        seconds = time.perf_counter() - started
        return {"transitions": inserted, "seconds": seconds, "per_s": inserted / seconds}

    def measure(self, op: str, seconds: float) -> dict[str, Any]:
        args = self.args
        if op == "one_call":
            replay = self.replays["uniform"]
            step: Any = lambda: replay.sample(BATCH, self.rng)
            warmup = 1
        else:
            table = "uniform" if op == "prefetched" else "prioritized"
            if table not in self.iterators:
                self.iterators[table] = self.replays[table].batches(BATCH, prefetch=args.prefetch, group=args.group, rng=1)
            iterator, replay = self.iterators[table], self.replays[table]
            # What the iterator fetched ahead meanwhile is taken untimed, so only its steady state counts.
            warmup = args.prefetch * args.group
            if op == "prefetched":
                step = lambda: next(iterator)
            else:
                step = lambda: replay.update_priorities(next(iterator).index, self.rng.uniform(0.1, 2.0, BATCH))
        for _ in range(warmup):
            step()
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            step()
            count += 1
        return {"per_s": count / (time.perf_counter() - started)}

    def memory(self) -> dict[str, Any]:
        return {"rss_kib": shard_rss_kib(self.work / "uniform"), "bytes_on_disk": allocated_bytes(self.work / "uniform"),
                "transitions": len(self.replays["uniform"])}

    def close(self) -> None:
        for replay in self.replays.values():
            replay.close(destroy=True)
        self.ray.shutdown()


def spread(values: list[float]) -> dict[str, float]:
    return {"median": float(np.median(values)), "min": float(min(values)), "max": float(max(values))}


def figures(reverb: list[float], mine: list[float]) -> dict[str, Any]:
    """Median and range of each side's rates and of the per-round ratio mmreplay / Reverb."""
    return {"reverb": spread(reverb), "mmreplay": spread(mine), "ratio": spread([m / r for m, r in zip(mine, reverb)]),
            "reverb_rounds": reverb, "mmreplay_rounds": mine}


def run(args: argparse.Namespace) -> dict[str, Any]:
    python = ensure_reverb_venv(args.reverb_venv)
    stream = frame_streams.stream_path("pong", args.data_dir)
    with np.load(stream) as data:
        ended = (data["terminated"] | data["truncated"])[np.flatnonzero(data["action"] >= 0)]
    count = int(np.flatnonzero(ended)[-1]) + 1  # the complete episodes' transitions, so that rounds repeat them whole
    work = Path(tempfile.mkdtemp(prefix="mmr-bench-reverb-"))
    results: dict[str, Any] = {"uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
                               "cpus": os.cpu_count(), "transitions_per_writer": count,
                               "settings": {k: str(v) for k, v in vars(args).items()}}
    reverb = mine = None
    try:
        reverb = ReverbSide(python, stream, work, args)
        mine = MmreplaySide(stream, work, args, count)
        listening, ray_sockets = reverb.call("listening"), host_listeners()
        results["listening"] = {
            "reverb_netns": not args.no_netns, "reverb_ss": listening["ss"], "reverb_interfaces": listening["interfaces"],
            "ray_ss": ray_sockets, "ray_loopback_only": all(line.split()[3].startswith(("127.", "[::ffff:127."))
                                                            for line in ray_sockets)}
        base = {"reverb": reverb.call("memory"), "mmreplay": mine.memory()}
        inserts: dict[str, list[float]] = {"reverb": [], "mmreplay": []}
        for _ in range(args.rounds):
            inserts["reverb"].append(reverb.call("insert", table="uniform", count=count)["per_s"])
            inserts["mmreplay"].append(mine.insert("uniform")["per_s"])
        results["insert"] = figures(inserts["reverb"], inserts["mmreplay"])
        after = {"reverb": reverb.call("memory"), "mmreplay": mine.memory()}
        # Reverb's items are the stream's transitions, stacked as mmreplay stacks them (untimed).
        checked = results["reverb_items_checked"] = reverb.call("check", count=args.check)
        if checked["matched"] != checked["checked"]:
            raise RuntimeError(f"only {checked['matched']} of {checked['checked']} sampled Reverb items are transitions "
                               "of the stream: its items are not what mmreplay stores, so the comparison would be wrong")
        results["memory"] = memory_figures(base, after)
        results["prioritized_fill"] = {"reverb": reverb.call("insert", table="prioritized", count=count),
                                       "mmreplay": mine.insert("prioritized")}
        rates: dict[str, dict[str, list[float]]] = {op: {"reverb": [], "mmreplay": []} for op in MEASURES}
        for _ in range(args.rounds):
            for op in MEASURES:
                rates[op]["reverb"].append(reverb.call(op, seconds=args.seconds)["per_s"])
                rates[op]["mmreplay"].append(mine.measure(op, args.seconds)["per_s"])
        for op in MEASURES:
            results[op] = figures(rates[op]["reverb"], rates[op]["mmreplay"])
        results["reverb_memory_end"] = reverb.call("memory")
    finally:
        if mine is not None:
            mine.close()
        if reverb is not None:
            reverb.close()
        results["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        shutil.rmtree(work, ignore_errors=True)
    return results


def memory_figures(base: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Bytes per transition: Reverb server's RSS growth; mmreplay's disk and its shards' RSS (growth and total)."""
    stored = after["reverb"]["table_sizes"]["uniform"]
    transitions = after["mmreplay"]["transitions"]
    grown = {k: 1024 * (after["reverb"]["rss_kib"][k] - base["reverb"]["rss_kib"][k]) for k in ("VmRSS", "RssAnon")}
    shards, shards_base = after["mmreplay"]["rss_kib"], base["mmreplay"]["rss_kib"]
    return {
        "reverb_items": stored, "mmreplay_transitions": transitions,
        "reverb_server_rss_mib_before": base["reverb"]["rss_kib"]["VmRSS"] / 1024,
        "reverb_server_rss_bytes_per_transition": grown["VmRSS"] / stored,
        "reverb_server_anon_bytes_per_transition": grown["RssAnon"] / stored,
        "mmreplay_disk_bytes_per_transition": after["mmreplay"]["bytes_on_disk"] / transitions,
        "mmreplay_shard_processes": shards["processes"],
        "mmreplay_shards_rss_mib": shards["VmRSS"] / 1024, "mmreplay_shards_rss_file_mib": shards["RssFile"] / 1024,
        "mmreplay_shards_anon_bytes_per_transition": 1024 * (shards["RssAnon"] - shards_base["RssAnon"]) / transitions,
        "mmreplay_shards_rss_bytes_per_transition": 1024 * (shards["VmRSS"] - shards_base["VmRSS"]) / transitions,
    }


def table(results: dict[str, Any]) -> str:
    rows = [f"{results['uptime_before']}", "measure | Reverb median (range) | mmreplay median (range) | mmreplay/Reverb (range)"]
    for name, label in (("insert", "insert, transitions/s"), ("prefetched", "uniform prefetched, batches/s"),
                        ("one_call", "one call a batch, batches/s"), ("prioritized", "prioritized + update, batches/s")):
        f = results[name]
        cells = [f"{f[s]['median']:,.0f} ({f[s]['min']:,.0f}-{f[s]['max']:,.0f})" for s in ("reverb", "mmreplay")]
        rows.append(f"{label} | {cells[0]} | {cells[1]} | {f['ratio']['median']:.2f} "
                    f"({f['ratio']['min']:.2f}-{f['ratio']['max']:.2f})")
    rows += [f"{key}: {value:,.1f}" if isinstance(value, float) else f"{key}: {value}"
             for key, value in results["memory"].items()]
    rows.append(f"Reverb items equal to a stream transition: {results['reverb_items_checked']['matched']} of "
                f"{results['reverb_items_checked']['checked']}")
    rows.append(results["uptime_after"])
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="example: PYTHONPATH=. "
                                     ".venv-ray/bin/python benchmarks/bench_reverb.py --rounds 3 --seconds 3 --json",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reverb-venv", type=Path, default=HERE.parent / ".venv-reverb",
                        help="Reverb's venv, made from requirements-reverb.txt if missing (default: .venv-reverb)")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each sampling window")
    parser.add_argument("--rounds", type=int, default=3, help="windows of each measure per side (medians reported)")
    parser.add_argument("--capacity", type=int, default=200_000, help="each table's and each replay's capacity")
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--prefetch", type=int, default=3, help="batches in flight (tf.data) / groups in flight")
    parser.add_argument("--group", type=int, default=64, help="ShardedReplay.batches' group")
    parser.add_argument("--reverb-in-flight", type=int, default=2 * BATCH,
                        help="TrajectoryDataset's max_in_flight_samples_per_worker")
    parser.add_argument("--reverb-sample-workers", type=int, default=-1,
                        help="TrajectoryDataset's num_workers_per_iterator (-1: Reverb's choice)")
    parser.add_argument("--no-netns", action="store_true", help="run Reverb without its own network namespace "
                        "(its server then listens on every interface)")
    parser.add_argument("--check", type=int, default=256, help="Reverb items sampled and compared with the stream")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    frame_streams.add_data_dir_argument(parser)
    args = parser.parse_args(argv)
    for name in ("seconds", "rounds", "capacity", "writers", "shards", "prefetch", "group", "reverb_in_flight"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0; got {getattr(args, name)}")
    needed = args.rounds * args.writers * 20_000
    if args.capacity < needed:
        print(f"bench_reverb: --capacity {args.capacity} is below the {needed:,} transitions the inserts may add: "
              "the oldest are removed (FIFO) in both", file=sys.stderr)
    try:
        results = run(args)
    except (RuntimeError, subprocess.CalledProcessError) as error:
        print(json.dumps({"error": str(error)}) if args.json else f"bench_reverb: {error}", file=sys.stderr)
        return 1
    text = json.dumps(results, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text if args.json else table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
