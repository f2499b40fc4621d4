"""How fast does mmreplay add and sample, and how little does it keep, against in-RAM peers, on real frames?

Feeds the real Atari frame stream in ``../shared/data/atari_<game>.npz`` (20,000 frames, episode
boundaries from the file) cyclically into each buffer, one add per env step, until it holds
``--capacity`` transitions; then samples uniform batches of ``--batch-size`` 4-frame stacks. Each
buffer is measured in a fresh subprocess per repeat, so its anonymous memory (``RssAnon``) starts clean
and one buffer's memory never weighs on another's. Prints medians over ``--repeats`` and mmreplay's
ratio against each peer as markdown; ``--json`` also writes them machine-readable.

    .venv/bin/python benchmarks/bench_core.py                     # pong, capacity 100,000, all peers
    .venv/bin/python benchmarks/bench_core.py --game mspacman --capacity 1000000 --peers numpy

A peer whose package is missing is skipped with a note; a peer whose arrays would not fit in memory at
``--capacity`` is measured at the largest capacity that fits, and the output says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import ESTIMATED_BYTES_PER_TRANSITION, FRAME_SHAPE, PEER_PACKAGES, PEERS, STACK_SIZE, FrameStream  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
GAMES = ("pong", "breakout", "mspacman")
BUFFERS = ("mmreplay", "sb3", "cpprb", "numpy")
# Targets from the core issue (bytes on disk per transition; sample >= 0.5x the numpy ring; add).
BYTES_TARGET = {"pong": 320, "mspacman": 2_100}
SAMPLE_TARGET_VS_NUMPY = 0.5
ADD_TARGET = 20_000
# A batch of 4-stacks is ~0.9 MB per array. With glibc's defaults such arrays fall either side of the
# dynamic mmap threshold and the heap top is trimmed after each batch, so every batch page-faults its
# output in again: on this VM that made the numpy ring 7x slower (1,550 vs 220 us a batch) and swung
# each buffer by a different amount, measuring the allocator rather than the buffer. "steady" fixes
# both thresholds at 256 MiB for every worker alike; "--malloc default" measures glibc as it comes.
MALLOC_STEADY_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 28), "MALLOC_TRIM_THRESHOLD_": str(1 << 28)}


class MmreplayAdapter:
    """mmreplay's ReplayStore in a temporary directory on disk, fed single frames."""

    name = "mmreplay"

    def __init__(self, stream: FrameStream, capacity: int, seed: int, *, tmpdir: str | None):
        from mmreplay import ReplayStore

        self.stream = stream
        self.directory = Path(tempfile.mkdtemp(prefix="mmreplay-bench-", dir=tmpdir))
        try:
            self.store = ReplayStore.create(
                self.directory / "store", frame_shape=FRAME_SHAPE, capacity=capacity, stack_size=STACK_SIZE
            )
        except BaseException:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise
        self.rng = np.random.default_rng(seed)

    def inputs(self, i: int) -> tuple[object, ...]:
        s = self.stream
        j = i % len(s)
        t = s.transition_frame[j]
        return s.frames[t], s.action[j], s.reward[j], s.frames[t + 1], s.terminated[j], s.truncated[j]

    def add(self, *inputs: object) -> None:
        self.store.add(*inputs)

    def flush(self) -> None:
        self.store.flush()

    def sample(self, batch_size: int) -> object:
        return self.store.sample(batch_size, rng=self.rng)

    def __len__(self) -> int:
        return len(self.store)

    def bytes_per_transition(self) -> float | None:
        return self.store.bytes_on_disk() / max(1, len(self.store))

    def verify(self, batch_size: int, batches: int) -> int:
        """Compare sampled batches with the stream they came from; the number of mismatching transitions."""
        bad = 0
        for _ in range(batches):
            batch = self.store.sample(batch_size, rng=self.rng)
            obs, next_obs = self.stream.expected(batch.index)
            j = batch.index % len(self.stream)
            bad += int(
                np.sum(
                    (batch.obs != obs).any(axis=(1, 2, 3))
                    | (batch.next_obs != next_obs).any(axis=(1, 2, 3))
                    | (batch.action != self.stream.action[j])
                    | (batch.reward != self.stream.reward[j])
                    | (batch.terminated != self.stream.terminated[j])
                    | (batch.truncated != self.stream.truncated[j])
                )
            )
        return bad

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


# -- one measurement, in its own process -------------------------------------------------------------


def rss_anon() -> int:
    """This process's anonymous resident memory in bytes (``RssAnon`` in /proc/self/status)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("RssAnon not found in /proc/self/status")


def measure(args: argparse.Namespace) -> dict[str, object]:
    name = args.worker
    stream = FrameStream.load(args.data_dir / f"atari_{args.game}.npz")
    if name != "mmreplay":
        __import__(PEER_PACKAGES[name])  # imports are not the buffer's memory
        if name == "sb3":
            import gymnasium  # noqa: F401
            import torch  # noqa: F401
    else:
        import mmreplay  # noqa: F401
    rss_before = rss_anon()
    if name == "mmreplay":
        adapter = MmreplayAdapter(stream, args.capacity, args.seed, tmpdir=args.tmpdir)
    else:
        adapter = PEERS[name](stream, args.capacity, args.seed)
    try:
        add_seconds = 0.0
        clock = time.perf_counter
        for i in range(args.capacity):
            inputs = adapter.inputs(i)
            start = clock()
            adapter.add(*inputs)
            add_seconds += clock() - start
        if name == "mmreplay":
            start = clock()
            adapter.flush()  # the commit that makes the fill durable counts as add time
            add_seconds += clock() - start
        rss_after = rss_anon()
        stored = len(adapter)
        bytes_per_transition = adapter.bytes_per_transition()

        # Warm up untimed: the first batches pay for page faults and for the allocator's growing
        # mmap threshold (a batch is ~1.8 MB), not for the buffer.
        start = clock()
        while clock() - start < min(0.25, args.sample_seconds):
            adapter.sample(args.batch_size)
        batches, start = 0, clock()
        while (elapsed := clock() - start) < args.sample_seconds:
            for _ in range(10):
                adapter.sample(args.batch_size)
            batches += 10
        mismatches = adapter.verify(args.batch_size, 20) if name == "mmreplay" and args.verify else None
    finally:
        adapter.close()
    return {
        "buffer": name,
        "capacity": args.capacity,
        "transitions": stored,
        "add_per_s": args.capacity / add_seconds,
        "sample_per_s": batches / elapsed,
        "bytes_per_transition": bytes_per_transition,
        "rss_anon_growth": rss_after - rss_before,
        "verify_mismatches": mismatches,
    }


# -- the run: every buffer, every repeat -------------------------------------------------------------


def mem_available() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("MemAvailable not found in /proc/meminfo")


def plan_buffers(args: argparse.Namespace) -> tuple[dict[str, int], list[str]]:
    """The capacity each buffer runs at, and notes on peers skipped or shrunk."""
    notes: list[str] = []
    capacities = {"mmreplay": args.capacity}
    budget = int(mem_available() * args.memory_fraction)
    for name in args.peers:
        if importlib.util.find_spec(PEER_PACKAGES[name]) is None:
            notes.append(f"{name}: skipped, package {PEER_PACKAGES[name]!r} is not installed "
                         f"(`.venv/bin/pip install -e '.[peers]'`)")
            continue
        needed = args.capacity * ESTIMATED_BYTES_PER_TRANSITION[name]
        if needed <= budget:
            capacities[name] = args.capacity
            continue
        fits = budget // ESTIMATED_BYTES_PER_TRANSITION[name] // 10_000 * 10_000
        if fits < 10_000:
            notes.append(f"{name}: skipped, not even 10,000 transitions fit in {budget / 2**30:.1f} GiB")
            continue
        capacities[name] = fits
        notes.append(
            f"{name}: measured at capacity {fits:,}, not {args.capacity:,}: it needs about "
            f"{needed / 2**30:.1f} GiB of RAM and {args.memory_fraction:.0%} of MemAvailable is "
            f"{budget / 2**30:.1f} GiB"
        )
    tmp = args.tmpdir or tempfile.gettempdir()
    free = shutil.disk_usage(tmp).free
    if free < args.capacity * 3_000:
        notes.append(f"mmreplay: only {free / 2**30:.1f} GiB free in {tmp}; the store may not fit")
    if _on_tmpfs(tmp):
        notes.append(f"mmreplay: {tmp} is a tmpfs (RAM), not disk; pass --tmpdir on a disk")
    return capacities, notes


def _on_tmpfs(path: str) -> bool:
    path = os.path.realpath(path)
    best, fstype = "", ""
    with open("/proc/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if (path == fields[1] or path.startswith(fields[1].rstrip("/") + "/")) and len(fields[1]) > len(best):
                best, fstype = fields[1], fields[2]
    return fstype in ("tmpfs", "ramfs")


def run_worker(args: argparse.Namespace, name: str, capacity: int, repeat: int) -> dict[str, object]:
    command = [
        sys.executable, __file__, "--worker", name, "--game", args.game, "--capacity", str(capacity),
        "--batch-size", str(args.batch_size), "--sample-seconds", str(args.sample_seconds),
        "--data-dir", str(args.data_dir), "--seed", str(args.seed + repeat),
    ]
    if args.tmpdir:
        command += ["--tmpdir", args.tmpdir]
    if not args.verify:
        command.append("--no-verify")
    env = dict(os.environ)
    if args.malloc == "steady":
        env.update(MALLOC_STEADY_ENV)
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{name} (repeat {repeat + 1}) failed with exit status {done.returncode}:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarize(runs: list[dict[str, object]]) -> dict[str, object]:
    def median(key: str) -> float | None:
        values = [r[key] for r in runs if r[key] is not None]
        return statistics.median(values) if values else None

    summary = {key: median(key) for key in ("add_per_s", "sample_per_s", "bytes_per_transition", "rss_anon_growth")}
    summary["capacity"] = runs[0]["capacity"]
    summary["transitions"] = runs[0]["transitions"]
    summary["anon_bytes_per_transition"] = summary["rss_anon_growth"] / max(1, summary["transitions"])
    mismatches = [r["verify_mismatches"] for r in runs if r["verify_mismatches"] is not None]
    summary["verify_mismatches"] = sum(mismatches) if mismatches else None
    return summary


def _num(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or not b:
        return "n/a"
    ratio = a / b
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.4f}x"


def report(args: argparse.Namespace, results: dict[str, dict[str, object]], notes: list[str]) -> str:
    lines = [
        f"## mmreplay vs peers: {args.game}, capacity {args.capacity:,}, stack {STACK_SIZE}, "
        f"batch {args.batch_size}, median of {args.repeats} repeats, malloc {args.malloc}",
        "",
        "| buffer | capacity | add (transitions/s) | sample (batches/s) | bytes/transition | "
        "anon memory growth (MiB) | anon bytes/transition |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        stored = r["bytes_per_transition"]
        bytes_cell = _num(stored) if stored is not None else f"{_num(r['anon_bytes_per_transition'])} (anon)"
        lines.append(
            f"| {name} | {r['capacity']:,} | {_num(r['add_per_s'])} | {_num(r['sample_per_s'])} | "
            f"{bytes_cell} | {_num(r['rss_anon_growth'] / 2**20, 1)} | {_num(r['anon_bytes_per_transition'])} |"
        )
    mm = results.get("mmreplay")
    peers = [name for name in results if name != "mmreplay"]
    if mm and peers:
        lines += [
            "",
            "| mmreplay vs | add (higher: mmreplay faster) | sample (higher: faster) | "
            "bytes/transition (lower: smaller) | anon bytes/transition (lower: smaller) |",
            "|---|---:|---:|---:|---:|",
        ]
        for name in peers:
            p = results[name]
            peer_bytes = p["bytes_per_transition"] or p["anon_bytes_per_transition"]
            lines.append(
                f"| {name} | {_ratio(mm['add_per_s'], p['add_per_s'])} | "
                f"{_ratio(mm['sample_per_s'], p['sample_per_s'])} | "
                f"{_ratio(mm['bytes_per_transition'], peer_bytes)} | "
                f"{_ratio(mm['anon_bytes_per_transition'], p['anon_bytes_per_transition'])} |"
            )
    if mm:
        lines += ["", "Targets (core issue):"]
        lines.append(f"- add >= {ADD_TARGET:,} transitions/s: {_num(mm['add_per_s'])} "
                     f"{'met' if mm['add_per_s'] >= ADD_TARGET else 'NOT met'}")
        if args.game in BYTES_TARGET:
            target = BYTES_TARGET[args.game]
            lines.append(f"- bytes on disk/transition <= {target:,}: {_num(mm['bytes_per_transition'])} "
                         f"{'met' if mm['bytes_per_transition'] <= target else 'NOT met'}")
        if "numpy" in results:
            ratio = mm["sample_per_s"] / results["numpy"]["sample_per_s"]
            lines.append(f"- sample >= {SAMPLE_TARGET_VS_NUMPY}x the numpy ring: {ratio:.2f}x "
                         f"{'met' if ratio >= SAMPLE_TARGET_VS_NUMPY else 'NOT met'}")
        mismatches = mm["verify_mismatches"]
        if mismatches is not None:
            verdict = "yes" if mismatches == 0 else f"NO, {mismatches} mismatching transitions"
            lines.append(f"- sampled batches equal the stream they came from: {verdict}")
    if notes:
        lines += ["", "Notes:"] + [f"- {note}" for note in notes]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", choices=GAMES, default="pong", help="which frame stream to replay")
    parser.add_argument("--capacity", type=int, default=100_000, help="transitions each buffer is filled to")
    parser.add_argument("--repeats", type=int, default=5, help="fresh-process measurements per buffer")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--peers", default=",".join(PEERS),
                        help=f"comma-separated peers to measure beside mmreplay, of {','.join(PEERS)}; '' for none")
    parser.add_argument("--no-mmreplay", dest="mmreplay", action="store_false", help="measure only the peers")
    parser.add_argument("--sample-seconds", type=float, default=1.0, help="time spent sampling per measurement")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="where atari_<game>.npz live")
    parser.add_argument("--tmpdir", help="directory (on disk) for mmreplay's temporary store")
    parser.add_argument("--memory-fraction", type=float, default=0.6,
                        help="share of MemAvailable a peer may use before its capacity is reduced")
    parser.add_argument("--no-verify", dest="verify", action="store_false",
                        help="skip checking mmreplay's sampled batches against the stream")
    parser.add_argument("--malloc", choices=("steady", "default"), default="steady",
                        help="glibc allocator settings for the workers (see MALLOC_STEADY_ENV)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", choices=BUFFERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.peers = [p for p in (s.strip() for s in args.peers.split(",")) if p]
    unknown = sorted(set(args.peers) - set(PEERS))
    if unknown:
        parser.error(f"--peers: unknown {unknown}; choose from {list(PEERS)}")
    if args.capacity < 1_000:
        parser.error(f"--capacity must be >= 1,000; got {args.capacity}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(measure(args)))
        return
    if not (args.data_dir / f"atari_{args.game}.npz").exists():
        sys.exit(f"no frame stream at {args.data_dir / f'atari_{args.game}.npz'}; pass --data-dir")
    capacities, notes = plan_buffers(args)
    if not args.mmreplay:
        del capacities["mmreplay"]
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    runs: dict[str, list[dict[str, object]]] = {name: [] for name in capacities}
    started = time.perf_counter()
    for repeat in range(args.repeats):
        for name, capacity in capacities.items():  # interleaved, so drift on a busy machine hits all alike
            t0 = time.perf_counter()
            run = run_worker(args, name, capacity, repeat)
            runs[name].append(run)
            print(
                f"[{time.perf_counter() - started:6.0f}s] repeat {repeat + 1}/{args.repeats} {name:8s} "
                f"add {run['add_per_s']:9,.0f}/s  sample {run['sample_per_s']:7,.0f}/s  "
                f"({time.perf_counter() - t0:.1f}s)",
                file=sys.stderr,
                flush=True,
            )
    results = {name: summarize(r) for name, r in runs.items()}
    print(report(args, results, notes))
    if args.json:
        payload = {
            "game": args.game, "capacity": args.capacity, "stack_size": STACK_SIZE, "batch_size": args.batch_size,
            "repeats": args.repeats, "sample_seconds": args.sample_seconds, "malloc": args.malloc, "notes": notes,
            "results": results, "runs": runs,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"\nwrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
