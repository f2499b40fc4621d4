"""Sampling speed ratios measured in pairs: mmreplay and one peer alive at once, sampling in turns.

bench_core measures each buffer in its own process, one after another, and takes medians. On a shared
VM whose speed drifts by 2x over tens of seconds, a ratio of two such medians moves with the drift:
the same code gave 0.90x and 1.12x the numpy ring in two runs. Here both buffers are built first (each
in a worker process, filled with the same real-frame stream as in bench_core), then they sample in
short alternating windows, A B B A in one round and B A A B in the next, so that a drift within a
round weighs on both alike. Each round gives one ratio (mmreplay's batches over the peer's); the
report is the median ratio with its quartiles and how many rounds met the speed target.

    .venv/bin/python benchmarks/bench_paired.py                                  # pong, 100,000, all peers
    .venv/bin/python benchmarks/bench_paired.py --capacity 1000000 --rounds 30 --json paired.json

Only one peer is alive beside mmreplay at a time (at 1,000,000 the peers take 7 to 15 GiB each); a
peer that would not fit is measured at the largest capacity that does, as in bench_core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import (
    MALLOC_STEADY_ENV,
    SAMPLE_TARGET_VS_PEER,
    check_shared_args,
    make_adapter,
    plan_buffers,
)
from frame_streams import add_data_dir_argument, data_dir_arguments, stream_path
from machine import load_average
from peers import PEERS, FrameStream
from timing import batches_per_second

WINDOW_WARMUP = 0.1  # seconds of untimed sampling at the start of each window: the other process ran last


class Worker:
    """A buffer in its own process, built at start, that samples for a given time on request."""

    def __init__(self, args: argparse.Namespace, name: str, capacity: int) -> None:
        command = [
            sys.executable, __file__, "--worker", name, "--game", args.game, "--capacity", str(capacity),
            "--batch-size", str(args.batch_size), *data_dir_arguments(args.data_dir), "--seed", str(args.seed),
        ]
        if args.tmpdir:
            command += ["--tmpdir", args.tmpdir]
        env = dict(os.environ, **(MALLOC_STEADY_ENV if args.malloc == "steady" else {}))
        self.name, self.capacity = name, capacity
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.built = self._reply()

    def _reply(self) -> dict[str, object]:
        line = self.process.stdout.readline()  # type: ignore[union-attr]
        if not line:
            code = self.process.wait()
            raise RuntimeError(f"{self.name}: the worker exited with status {code} (its stderr is above)")
        return json.loads(line)

    def sample(self, seconds: float) -> float:
        self.process.stdin.write(f"{seconds}\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]
        return float(self._reply()["batches_per_s"])  # type: ignore[arg-type]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()  # type: ignore[union-attr]
            self.process.wait(timeout=120)


def serve(args: argparse.Namespace) -> None:
    """The worker: build the buffer, say so, then answer each line (seconds to sample) with batches/s."""
    stream = FrameStream.load(stream_path(args.game, args.data_dir))
    args.frame_encoding, args.reuse_out, args.vector_envs = "lz4", False, 0  # make_adapter's other options
    adapter = make_adapter(args, stream)
    try:
        started = time.perf_counter()
        for i in range(args.capacity):
            adapter.add(*adapter.inputs(i))
        if hasattr(adapter, "flush"):
            adapter.flush()
        print(json.dumps({"transitions": len(adapter), "build_seconds": time.perf_counter() - started}), flush=True)
        for line in sys.stdin:
            rate = batches_per_second(lambda: adapter.sample(args.batch_size), float(line), warmup=WINDOW_WARMUP)
            print(json.dumps({"batches_per_s": rate}), flush=True)
    finally:
        adapter.close()


def duel(mmreplay: Worker, peer: Worker, rounds: int, window: float) -> dict[str, object]:
    """``rounds`` rounds of four windows, A B B A then B A A B; per round, mmreplay's batches over the peer's."""
    ratios, rates = [], {"mmreplay": [], peer.name: []}
    for r in range(rounds):
        order = [mmreplay, peer, peer, mmreplay] if r % 2 == 0 else [peer, mmreplay, mmreplay, peer]
        got: dict[str, list[float]] = {"mmreplay": [], peer.name: []}
        for worker in order:
            got[worker.name].append(worker.sample(window))
        ratios.append(sum(got["mmreplay"]) / sum(got[peer.name]))
        for name, values in got.items():
            rates[name] += values
    q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    target = SAMPLE_TARGET_VS_PEER.get(peer.name)
    return {
        "peer": peer.name,
        "peer_capacity": peer.capacity,
        "rounds": rounds,
        "ratio_median": median,
        "ratio_quartiles": [q1, q3],
        "ratio_range": [min(ratios), max(ratios)],
        "ratios": ratios,
        "mmreplay_batches_per_s": statistics.median(rates["mmreplay"]),
        "peer_batches_per_s": statistics.median(rates[peer.name]),
        "target": target,
        "rounds_meeting_target": None if target is None else sum(ratio >= target for ratio in ratios),
    }


def markdown(result: dict[str, object]) -> str:
    lines = [
        f"## mmreplay vs peers, sampling in turns: {result['game']}, capacity {result['capacity']:,}",
        "",
        (f"Batch {result['batch_size']}, stack 4, uniform. {result['rounds']} rounds of four {result['window']:g} s "
         "windows per peer (A B B A, then B A A B), both buffers alive in their own processes; a round's ratio is "
         "mmreplay's batches over the peer's in that round."),
        "",
        ("| peer | peer capacity | mmreplay batches/s | peer batches/s | ratio: median | quartiles | range | "
         "rounds >= target |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for d in result["duels"]:  # type: ignore[union-attr]
        met = "" if d["target"] is None else f"{d['rounds_meeting_target']} of {d['rounds']} (>= {d['target']}x)"
        lines.append(
            f"| {d['peer']} | {d['peer_capacity']:,} | {d['mmreplay_batches_per_s']:,.0f} | "
            f"{d['peer_batches_per_s']:,.0f} | {d['ratio_median']:.2f}x | {d['ratio_quartiles'][0]:.2f}-"
            f"{d['ratio_quartiles'][1]:.2f}x | {d['ratio_range'][0]:.2f}-{d['ratio_range'][1]:.2f}x | {met} |"
        )
    lines += ["", "Speed targets (sample), on the median of the paired ratios:", ""]
    for d in result["duels"]:  # type: ignore[union-attr]
        if d["target"] is not None:
            verdict = "met" if d["ratio_median"] >= d["target"] else "NOT met"
            lines.append(f"- sample >= {d['target']}x {d['peer']}: {d['ratio_median']:.2f}x **{verdict}**")
    if result["notes"]:
        lines += ["", "Notes:", ""] + [f"- {note}" for note in result["notes"]]  # type: ignore[union-attr]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", choices=("pong", "breakout", "mspacman"), default="pong")
    parser.add_argument("--capacity", type=int, default=100_000, help="transitions each buffer is filled to")
    parser.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, of {','.join(PEERS)}")
    parser.add_argument("--rounds", type=int, default=20, help="rounds of four sampling windows per peer")
    parser.add_argument("--window", type=float, default=0.5, help="seconds each buffer samples per window")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    add_data_dir_argument(parser)
    parser.add_argument("--tmpdir", help="directory (on disk) for mmreplay's temporary store")
    parser.add_argument("--memory-fraction", type=float, default=0.6,
                        help="share of MemAvailable one peer may use before its capacity is reduced")
    parser.add_argument("--malloc", choices=("steady", "default"), default="steady",
                        help="glibc allocator settings for the workers (bench_core's MALLOC_STEADY_ENV)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", choices=("mmreplay", *PEERS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    check_shared_args(parser, args)
    if args.rounds < 1 or args.window <= 0:
        parser.error(f"--rounds must be >= 1 and --window > 0; got {args.rounds} and {args.window}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        serve(args)
        return
    args.vector_envs = 0  # plan_buffers' option: no vector-env store here
    capacities, notes = plan_buffers(args)
    load_start = load_average()
    print(f"building mmreplay at {args.capacity:,}", file=sys.stderr, flush=True)
    mmreplay = Worker(args, "mmreplay", args.capacity)
    duels = []
    try:
        for name in (p for p in args.peers if p in capacities):
            print(f"building {name} at {capacities[name]:,}", file=sys.stderr, flush=True)
            peer = Worker(args, name, capacities[name])
            try:
                duels.append(duel(mmreplay, peer, args.rounds, args.window))
            finally:
                peer.close()
            d = duels[-1]
            print(f"{name}: ratio median {d['ratio_median']:.2f}x, quartiles {d['ratio_quartiles'][0]:.2f}-"
                  f"{d['ratio_quartiles'][1]:.2f}x", file=sys.stderr, flush=True)
    finally:
        mmreplay.close()
    notes.append(f"one-minute load average {load_start:.2f} at the start, {load_average():.2f} at the end "
                 f"({os.cpu_count()} CPUs)")
    result = {
        "game": args.game, "capacity": args.capacity, "batch_size": args.batch_size, "rounds": args.rounds,
        "window": args.window, "duels": duels, "notes": notes,
    }
    result["markdown"] = markdown(result)
    print(result["markdown"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
