"""Reference frames against plain lz4 on one tree, per game (issue 41's figures): bytes per transition at
capacity 100,000, one env's and 8 envs' add rates, and uniform sample(32) and sample(256) rates.

For each game, a plain (``frame_encoding="lz4"``) and a reference store (``"lz4-reference"``) of the same
recorded stream (``frame_streams.py``: 20,000 frames replayed cyclically), stack 4, are filled in turns of
``--block`` transitions (one env adding stacks with Python scalars, as CleanRL and SB3 pass them), each
turn's add rate timed; then 8 envs' stores the same way (vector adds of numpy arrays, ``--vector-adds``
transitions); then both one-env stores sample in alternating windows (A B B A, then B A A B) of
``--window`` seconds at each batch size. Every ratio is reference over plain within one turn or window
pair, reported as the median with its range. The script uses the public API only: ``pair_trees.py``
runs it with another tree's package (``PYTHONPATH``) to pair two trees in alternating processes.

    .venv/bin/python benchmarks/bench_frames.py --games pong --json
    .venv/bin/python benchmarks/bench_frames.py --games pong,breakout,mspacman,seaquest --rounds 8
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_adds import SingleEnv, VectorEnvs, measure
from frame_streams import add_data_dir_argument, stream_path
from machine import load_average
from peers import FrameStream
from timing import batches_per_second

from mmreplay import ReplayStore

ENCODINGS = ("lz4", "lz4-reference")
STACK = 4


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "low": min(values), "high": max(values)}


def fill(stores: dict[str, ReplayStore], feeds: dict[str, SingleEnv | VectorEnvs], transitions: int,
         block: int) -> dict[str, list[float]]:
    """Add ``transitions`` to each store in turns of ``block``, alternating the order; each turn's rate."""
    rates: dict[str, list[float]] = {name: [] for name in stores}
    for turn in range(max(1, transitions // block)):
        order = list(stores) if turn % 2 == 0 else list(reversed(stores))
        for name in order:
            feed = feeds[name]
            rates[name].append(measure(stores[name], feed, max(1, block // feed.per_call))[0])
    return rates


def game_figures(game: str, args: argparse.Namespace, tmp: Path) -> list[dict[str, object]]:
    stream = FrameStream.load(stream_path(game, args.data_dir))
    frame_shape = stream.frames.shape[1:]
    rows: list[dict[str, object]] = []

    def stores_of(envs: int, capacity: int, tag: str) -> dict[str, ReplayStore]:
        return {encoding: ReplayStore.create(tmp / f"{game}-{tag}-{encoding}.mmr", frame_shape=frame_shape,
                                             capacity=capacity, stack_size=STACK, num_envs=envs,
                                             frame_encoding=encoding)
                for encoding in ENCODINGS}

    single = stores_of(1, args.capacity, "1")
    rates = fill(single, {e: SingleEnv(stream) for e in ENCODINGS}, args.capacity, args.block)
    ratios = [r / p for r, p in zip(rates["lz4-reference"], rates["lz4"])]
    rows.append({"figure": "add_1_env", "game": game, "ratio": summary(ratios),
                 **{f"{e}_per_s": statistics.median(rates[e]) for e in ENCODINGS}})
    for encoding, store in single.items():
        store.flush()
        rows.append({"figure": "bytes_per_transition", "game": game, "encoding": encoding,
                     "value": store.bytes_on_disk() / len(store), "transitions": len(store)})
    if args.vector_adds > 0:
        vector = stores_of(8, args.capacity, "8")
        rates = fill(vector, {e: VectorEnvs(stream, 8) for e in ENCODINGS}, args.vector_adds, args.block)
        ratios = [r / p for r, p in zip(rates["lz4-reference"], rates["lz4"])]
        rows.append({"figure": "add_8_envs", "game": game, "ratio": summary(ratios),
                     **{f"{e}_per_s": statistics.median(rates[e]) for e in ENCODINGS}})
        for store in vector.values():
            store.close()
    rng = {encoding: np.random.default_rng(7) for encoding in ENCODINGS}
    for batch in args.batches:
        windows: dict[str, list[float]] = {e: [] for e in ENCODINGS}
        for turn in range(args.rounds):
            order = [*ENCODINGS, *reversed(ENCODINGS)] if turn % 2 == 0 else [*reversed(ENCODINGS), *ENCODINGS]
            rates_now: dict[str, list[float]] = {e: [] for e in ENCODINGS}
            for encoding in order:
                store = single[encoding]
                rates_now[encoding].append(batches_per_second(
                    lambda store=store, encoding=encoding: store.sample(batch, rng=rng[encoding]), args.window))
            for encoding in ENCODINGS:
                windows[encoding].append(statistics.mean(rates_now[encoding]))
        ratios = [r / p for r, p in zip(windows["lz4-reference"], windows["lz4"])]
        rows.append({"figure": f"sample_{batch}", "game": game, "ratio": summary(ratios),
                     **{f"{e}_per_s": statistics.median(windows[e]) for e in ENCODINGS}})
    for store in single.values():
        store.close()
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", default="pong,breakout,mspacman,seaquest")
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--block", type=int, default=2_000, help="transitions per store per turn of adds")
    parser.add_argument("--vector-adds", type=int, default=40_000, help="transitions of the 8-env stores (0: none)")
    parser.add_argument("--batches", type=lambda text: [int(b) for b in text.split(",")], default=[32, 256])
    parser.add_argument("--rounds", type=int, default=6, help="window pairs per batch size")
    parser.add_argument("--window", type=float, default=0.3, help="seconds a store samples per window")
    parser.add_argument("--tmpdir", help="where the stores live while measured (on disk)")
    parser.add_argument("--json", action="store_true", help="print one JSON line per figure")
    add_data_dir_argument(parser)
    args = parser.parse_args(argv)
    import mmreplay

    print(f"mmreplay: {Path(mmreplay.__file__ or '').parent}; load {load_average():.2f}", flush=True)
    for game in args.games.split(","):
        with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
            started = time.monotonic()
            for row in game_figures(game, args, Path(tmp)):
                if args.json:
                    print(json.dumps(row), flush=True)
                else:
                    print(row, flush=True)
            print(f"{game}: {time.monotonic() - started:.0f} s, load {load_average():.2f}", flush=True)


if __name__ == "__main__":
    main()
