"""``ShardedReplay.batches(32, prefetch=2, group=64)`` through the shard actors: a group's frames decoded
batch by batch by ``BlockBatches`` (this tree) against ``decode_blocks`` called on each batch's references
(the path before), in alternating windows in one process, beside a local store's ``sample(32)`` of the
same transitions.

Both decodes give the same batch; the one switch is ``GroupBatches.batch`` (a lab harness, not an API).
Each window times --batches batches of each path and of the local store, in turn (new, old, local; the
next window old, new, local). ``--pin`` runs Ray (its raylet and the shard actors) on CPU 1 and the
learner (this process, the local store too) on CPU 0, as a learner whose cores are its own would run;
without it everything shares the machine's cores. Ray runs on loopback alone in a temporary directory of
its own and is shut down at the end.

    python benchmarks/lab/group_decode_pair.py --game pong --frame-encoding lz4-reference --json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from mmreplay import decode_blocks
from mmreplay.testing import atari_frames
from ray_pairs import pair_parser, run_main, two_shards_and_a_store


def old_batch(self: Any, g: int) -> Any:
    """``GroupBatches.batch`` as it was: ``decode_blocks`` on the batch's references, checked at each call."""
    from mmreplay import Batch

    frames = self.frames
    pixels = np.empty((self.batch_size, self.columns, *frames.frame_shape), np.uint8)
    rows = slice(g * self.batch_size, (g + 1) * self.batch_size)
    decode_blocks(frames.sources, frames.refs.take(slice(g * frames.per_batch, (g + 1) * frames.per_batch)),
                  pixels.reshape(-1, *frames.frame_shape), decode_threads=frames.limit)
    size = self.stack_size
    return Batch(obs=pixels[:, :size], next_obs=pixels[:, -size:],
                 **{name: array[rows] for name, array in self.fields.items()},
                 user_fields={name: array[rows] for name, array in self.user_fields.items()})


def per_batch_us(call: Any, count: int) -> float:
    began = time.perf_counter()
    for _ in range(count):
        call()
    return (time.perf_counter() - began) / count * 1e6


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before ray's import: loopback alone (Ray 2.60)
    import ray

    from mmreplay.ray.assembly import GroupBatches

    frames = atari_frames.load(args.game, atari_frames.BENCHMARK_FRAMES)["frames"]
    if args.pin:
        os.sched_setaffinity(0, {1})  # the raylet and every Ray worker it starts inherit CPU 1
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             _temp_dir=str(work / "ray"))
    try:
        replay, local = two_shards_and_a_store(work, frames, frame_encoding=args.frame_encoding,
                                               transitions=args.transitions)
        if args.pin:
            os.sched_setaffinity(0, {0})
        rng = np.random.default_rng(0)
        batches = replay.batches(32, prefetch=2, group=64, rng=1)
        new_batch = GroupBatches.batch
        paths = {"new": new_batch, "old": old_batch}
        for _ in range(256):  # warm up: the readers, the first groups
            next(batches)
        windows = []
        for w in range(args.windows):
            window: dict[str, Any] = {}
            for name in (("new", "old") if w % 2 == 0 else ("old", "new")):
                GroupBatches.batch = paths[name]  # type: ignore[method-assign]
                window[f"{name}_us"] = round(per_batch_us(lambda: next(batches), args.batches), 1)
            GroupBatches.batch = new_batch  # type: ignore[method-assign]
            window["local_us"] = round(per_batch_us(lambda: local.sample(32, rng), args.batches), 1)
            windows.append(window)
        replay.close(destroy=True)
        local.close()
    finally:
        ray.shutdown()

    def summary(values: list[float]) -> dict[str, float]:
        return {"median": round(float(np.median(values)), 3), "min": round(min(values), 3),
                "max": round(max(values), 3)}

    return {"game": args.game, "frame_encoding": args.frame_encoding, "pin": args.pin, "windows": windows,
            "old_over_new": summary([w["old_us"] / w["new_us"] for w in windows]),
            "new_rate_over_local": summary([w["local_us"] / w["new_us"] for w in windows]),
            "old_rate_over_local": summary([w["local_us"] / w["old_us"] for w in windows])}


def main(argv: list[str] | None = None) -> int:
    parser = pair_parser(__doc__, "benchmarks/lab/group_decode_pair.py --game breakout --pin --json", transitions=3000)
    parser.add_argument("--batches", type=int, default=640, help="batches a path a window (default 640)")
    parser.add_argument("--pin", action="store_true", help="Ray on CPU 1, the learner on CPU 0")
    args = parser.parse_args(argv)
    if args.pin and not {0, 1} <= os.sched_getaffinity(0):
        parser.error("--pin needs CPUs 0 and 1")
    return run_main("group_decode_pair", run, args)


if __name__ == "__main__":
    sys.exit(main())
