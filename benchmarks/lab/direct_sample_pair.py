"""A synchronous ``ShardedReplay.sample(32, direct_read=True)``: the decoded draw against the encoded one.

With every shard on the learner's node, ``sample(direct_read=True)`` has each shard's reader draw and
decode its rows and joins them (``Draws.sample_here``); without that step (``sample_here`` answering None,
as it does for a shard on another node) the same draw is gathered encoded and decoded as a group of one.
Both paths give the same batch for the same seed; this times them in alternating windows of --calls
calls in one process (--windows windows), beside a local store's ``sample(32)`` of the same transitions.
Ray runs on loopback alone in a temporary directory of its own and is shut down at the end.

    python benchmarks/lab/direct_sample_pair.py --game pong --frame-encoding lz4-reference --json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from mmreplay.testing import atari_frames
from ray_pairs import pair_parser, run_main, two_shards_and_a_store


def median_us(call: Callable[[], Any], count: int) -> float:
    times = []
    for _ in range(count):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return float(np.median(times) * 1e6)


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before ray's import: loopback alone (Ray 2.60)
    import ray


    frames = atari_frames.load(args.game, atari_frames.BENCHMARK_FRAMES)["frames"]
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             _temp_dir=str(work / "ray"))
    try:
        replay, local = two_shards_and_a_store(work, frames, frame_encoding=args.frame_encoding,
                                               transitions=args.transitions)
        rng = np.random.default_rng(0)
        draws = replay._draws  # the one switch between the two paths: a lab harness, not an API
        decoded = draws.sample_here
        windows = []
        for _ in range(args.windows):
            draws.sample_here = decoded
            new = median_us(lambda: replay.sample(32, rng, direct_read=True), args.calls)
            draws.sample_here = lambda *a, **k: None
            old = median_us(lambda: replay.sample(32, rng, direct_read=True), args.calls)
            draws.sample_here = decoded
            alone = median_us(lambda: local.sample(32, rng), args.calls)
            windows.append({"decoded_us": round(new), "encoded_us": round(old), "local_us": round(alone)})
        replay.close(destroy=True)
        local.close()
    finally:
        ray.shutdown()
    ratios = [w["encoded_us"] / w["decoded_us"] for w in windows]
    return {"game": args.game, "frame_encoding": args.frame_encoding, "windows": windows,
            "encoded_over_decoded": {"median": round(float(np.median(ratios)), 2), "min": round(min(ratios), 2),
                                     "max": round(max(ratios), 2)},
            "decoded_over_local": round(float(np.median([w["decoded_us"] / w["local_us"] for w in windows])), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = pair_parser(__doc__, "benchmarks/lab/direct_sample_pair.py --game pong --json", transitions=2000)
    parser.add_argument("--calls", type=int, default=200, help="calls a window (default 200)")
    args = parser.parse_args(argv)
    return run_main("direct_sample_pair", run, args)


if __name__ == "__main__":
    sys.exit(main())
