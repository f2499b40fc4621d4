"""Where do reference frames stop paying? Plain lz4 against reference frames on small uint8 frames.

``ReplayStore.create`` gives uint8 frames reference frames by default only from
``encodings.REFERENCE_MIN_FRAME_BYTES`` (64 bytes, 8x8) on. This measures why: for each side length, the
recorded Pong, MsPacman and Seaquest frames subsampled to side x side (every ``84 // side``-th pixel; 1x1
is one pixel of each frame), added one env step at a time into a plain and a reference store (capacity
``--capacity``, stacks of 4, an episode end every 1,000 steps), then each store's bytes per transition
on disk and the time of a uniform ``sample(32)``: windows of ``--seconds`` alternating between the two
stores, ``--rounds`` pairs, medians. One line per (side, game), and with ``--json`` one JSON line each.

    .venv/bin/python benchmarks/bench_small_frames.py                         # sides 1 2 4 8 16 21 84
    .venv/bin/python benchmarks/bench_small_frames.py --sides 1,8 --games pong --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mmreplay import ReplayStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frame_streams import add_data_dir_argument, stream_path

ENCODINGS = ("lz4", "lz4-reference")


def small_frames(frames: np.ndarray, side: int) -> np.ndarray:
    """The frames subsampled to ``side`` x ``side`` (every ``84 // side``-th row and column)."""
    step = frames.shape[1] // side
    return np.ascontiguousarray(frames[:, ::step, ::step][:, :side, :side])


def filled(directory: Path, frames: np.ndarray, encoding: str, capacity: int) -> ReplayStore:
    store = ReplayStore.create(directory / encoding, frame_shape=frames.shape[1:], capacity=capacity, stack_size=4,
                               frame_encoding=encoding)
    for i in range(min(len(frames) - 1, capacity + capacity // 10)):
        store.add(frames[i], 0, 0.0, frames[i + 1], i % 1000 == 999, False)
    store.flush()
    return store


def sample_microseconds(stores: list[ReplayStore], *, seconds: float, rounds: int) -> list[float]:
    """Median microseconds of a ``sample(32)`` of each store, in alternating windows."""
    generators = [np.random.default_rng(k) for k in range(len(stores))]
    times: list[list[float]] = [[] for _ in stores]
    for r in range(rounds + 1):  # the first round warms up
        order = range(len(stores)) if r % 2 == 0 else reversed(range(len(stores)))
        for k in order:
            count, start = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - start) < seconds:
                stores[k].sample(32, generators[k])
                count += 1
            if r > 0:
                times[k].append(elapsed / count * 1e6)
    return [statistics.median(t) for t in times]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sides", default="1,2,4,8,16,21,84")
    parser.add_argument("--games", default="pong,mspacman,seaquest")
    parser.add_argument("--capacity", type=int, default=3_000)
    parser.add_argument("--seconds", type=float, default=0.2, help="per window")
    parser.add_argument("--rounds", type=int, default=4, help="window pairs")
    parser.add_argument("--json", action="store_true", help="also print one JSON line per figure")
    add_data_dir_argument(parser)
    args = parser.parse_args(argv)
    streams = {game: np.load(stream_path(game, args.data_dir))["frames"] for game in args.games.split(",")}
    print("| side | frame bytes | game | bytes/transition plain | reference | sample(32) us plain | reference |")
    print("|---:|---:|---|---:|---:|---:|---:|", flush=True)
    for side in (int(s) for s in args.sides.split(",")):
        for game, frames in streams.items():
            small = small_frames(frames, side)
            with tempfile.TemporaryDirectory() as tmp:
                stores = [filled(Path(tmp), small, encoding, args.capacity) for encoding in ENCODINGS]
                nbytes = [store.bytes_on_disk / len(store) for store in stores]
                micros = sample_microseconds(stores, seconds=args.seconds, rounds=args.rounds)
                for store in stores:
                    store.close()
            print(f"| {side} | {small[0].nbytes} | {game} | {nbytes[0]:.1f} | {nbytes[1]:.1f} | {micros[0]:.1f} | "
                  f"{micros[1]:.1f} |", flush=True)
            if args.json:
                print(json.dumps({"figure": "small_frames", "side": side, "frame_bytes": int(small[0].nbytes),
                                  "game": game, "bytes_per_transition": dict(zip(ENCODINGS, nbytes)),
                                  "sample_32_us": dict(zip(ENCODINGS, micros))}), flush=True)


if __name__ == "__main__":
    main()
