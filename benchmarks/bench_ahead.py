"""Does compressing one env's frame ahead on a helper pay for a game's frames (issue 25)?

One process fills two plain stores of the same real frame stream, one env, capacity ``--capacity``,
each with a helper as from 4 usable cores (``Writer._continuing.ahead_threads = 2``, a private switch, so that a
2-core machine can run it): "always" compresses every frame ahead, "gated" only where the env's recent
frames compressed to ``threads.AHEAD_MIN_FRAME_BYTES`` or more, the store's policy. The stores take
turns, ``--chunk`` adds each, A B B A then B A A B, so a drift of the machine's speed hits both alike;
one ratio (gated / always) per pair of chunks. Prints the median rates and the ratio with its quartiles;
``--json`` appends one JSON line per game.

On 2 cores the helper shares a core with the caller's process and others; the box figures that set the
threshold are in threads.py (16 cores).

    .venv/bin/python benchmarks/bench_ahead.py                       # pong and mspacman, ~1 minute
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frame_streams import add_data_dir_argument, stream_path
from machine import load_average
from mmreplay_adapters import MmreplayAdapter
from peers import FrameStream

from mmreplay.frames.threads import AHEAD_MIN_FRAME_BYTES

POLICIES = {"always": 0, "gated": AHEAD_MIN_FRAME_BYTES}


def run_game(game: str, args: argparse.Namespace) -> dict[str, Any]:
    stream = FrameStream.load(stream_path(game, args.data_dir))
    adapters = {}
    for name, least in POLICIES.items():
        adapter = MmreplayAdapter(stream, args.capacity, 0, tmpdir=args.tmpdir, frame_encoding="lz4")
        adapter.store._role._continuing.ahead_threads = 2  # a helper, as from 4 usable cores
        adapter.store._role._continuing.ahead_min_bytes = least
        adapters[name] = adapter
    done = dict.fromkeys(adapters, 0)
    rates: dict[str, list[float]] = {name: [] for name in adapters}
    load_before = load_average()
    try:
        for round_index in range(args.rounds):
            order = list(POLICIES) if round_index % 2 == 0 else list(reversed(POLICIES))
            for name in [*order, *reversed(order)]:
                adapter = adapters[name]
                inputs = [adapter.inputs(done[name] + i) for i in range(args.chunk)]  # built before the clock
                start = time.perf_counter()
                for item in inputs:
                    adapter.add(*item)
                rates[name].append(args.chunk / (time.perf_counter() - start))
                done[name] += args.chunk
        frame_bytes = adapters["gated"].store._role._continuing.recent_frame_bytes
    finally:
        for adapter in adapters.values():
            adapter.close()
    ratios = sorted(g / a for g, a in zip(rates["gated"], rates["always"]))
    quarter = len(ratios) // 4
    return {
        "game": game, "per_s": {name: statistics.median(values) for name, values in rates.items()},
        "ratio": {"median": statistics.median(ratios), "q1": ratios[quarter], "q3": ratios[-1 - quarter]},
        "recent_frame_bytes": frame_bytes, "threshold": AHEAD_MIN_FRAME_BYTES, "chunks": len(ratios),
        "load_before": load_before, "load_after": load_average(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", nargs="+", default=["pong", "mspacman"])
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=1_500, help="adds a store makes in one turn")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--tmpdir")
    parser.add_argument("--json", type=Path, help="append one JSON line per game to this file")
    add_data_dir_argument(parser)
    args = parser.parse_args(argv)
    for game in args.games:
        result = run_game(game, args)
        r = result["ratio"]
        print(f"{game}: frames ~{result['recent_frame_bytes']:,.0f} bytes compressed (threshold {result['threshold']:,}); "
              f"always ahead {result['per_s']['always']:,.0f}/s, gated {result['per_s']['gated']:,.0f}/s, "
              f"gated/always {r['median']:.2f}x [{r['q1']:.2f}, {r['q3']:.2f}]; load {result['load_before']} -> "
              f"{result['load_after']}", flush=True)
        if args.json:
            with args.json.open("a") as file:
                file.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
