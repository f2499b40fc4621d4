"""How much of a Python-bound learner does a background feed take through the GIL (the GPU-feed
benchmark's eager learner), measured without a GPU?

An eager PyTorch learner is launch-bound: its thread runs Python between ~40-100 kernel launches an update,
and each launch gives up the GIL for a few microseconds. A feed thread in the same process (decoding with
the GIL released, but running Python before and after) takes the GIL at those moments, and every time it
does, the learner waits: for the feed's Python, and for the wake-up of its own thread. This benchmark keeps
that shape on the CPU: the "learner" is ``--ops`` small torch ops an update on the main thread (each gives
up the GIL, as a launch does), fed one batch an update by

- ``prefetch``: ``store.batches(B, reuse=True)`` (numpy batches from a background thread);
- ``device-cpu``: ``store.batches(B, device="cpu")`` (the device pipeline, tensors, no copy; a uniform
  sampler's batches of 32 read 8 at a time by default);
- ``device-cpu-g<N>``: the same with ``group=N`` (``device-cpu-g1``: one batch a read, as before
  the default read several);
- ``ring-threads``: the numpy ring through a Python-thread pipeline (gpu_feeds.RingThreads on the CPU).

*Kept* = updates/s fed / updates/s of the learner alone (the same ops, no feed), measured in turns, alone
and each feed, ``--rounds`` times; the medians and quartiles are printed (``--json``: one JSON line per
feed). On 2 cores the feed's decode shares the machine with the learner: its one decode thread (the
store's decode_threads=1) leaves the learner a core.

    .venv/bin/python benchmarks/bench_feed_gil.py                          # pong and mspacman, ~1 minute
    .venv/bin/python benchmarks/bench_feed_gil.py --games pong --rounds 9 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_feeds  # noqa: E402
from bench_gpu_feed import fill  # noqa: E402
from frame_streams import add_data_dir_argument, stream_path  # noqa: E402
from machine import ThreadWindow, load_average  # noqa: E402
from peers import FrameStream, NumpyFrameRing  # noqa: E402

from mmreplay import ReplayStore  # noqa: E402

FEEDS = ("prefetch", "device-cpu", "device-cpu-g1", "ring-threads")


class Learner:
    """``ops`` torch ops on ``elements`` floats an update: each gives up the GIL while it runs."""

    def __init__(self, ops: int, elements: int) -> None:
        self.ops = ops
        self.a, self.b, self.c = torch.zeros(elements), torch.ones(elements), torch.empty(elements)

    def updates_per_s(self, feed: Iterator[Any] | None, seconds: float, window: ThreadWindow | None = None) -> float:
        """Updates a second over ``seconds``; ``window``, if given, adds what this thread spent on them."""
        clock, updates = time.perf_counter, 0
        if window is not None:
            window.start()
        start = clock()
        while clock() - start < seconds:
            if feed is not None:
                next(feed)
            for _ in range(self.ops):
                torch.add(self.a, self.b, out=self.c)
            updates += 1
        elapsed = clock() - start
        if window is not None:
            window.stop()
        return updates / elapsed


def open_feed(name: str, store: ReplayStore, ring: NumpyFrameRing, batch_size: int, seed: int, prefetch: int) -> Any:
    if name == "prefetch":
        return store.batches(batch_size, rng=seed, reuse=True, prefetch=prefetch)
    if name == "device-cpu":
        return store.batches(batch_size, rng=seed, device="cpu", prefetch=prefetch)
    if name.startswith("device-cpu-g") and name.removeprefix("device-cpu-g").isdigit():
        return store.batches(batch_size, rng=seed, device="cpu", prefetch=prefetch,
                             group=int(name.removeprefix("device-cpu-g")))
    if name == "ring-threads":
        return gpu_feeds.RingThreads(ring, batch_size, torch.device("cpu"), seed, threads=1)
    raise ValueError(f"feed {name!r}; expected one of {', '.join(FEEDS)} or device-cpu-g<N>")


def quartiles(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        return {"median": values[0], "q1": values[0], "q3": values[0]}
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": median, "q1": q1, "q3": q3}


def run_game(game: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    stream = FrameStream.load(stream_path(game, args.data_dir))
    learner = Learner(args.ops, args.elements)
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as directory:
        store, ring = fill(stream, args.capacity, directory, decode_threads=args.decode_threads or None)
        feeds = args.feeds.split(",")
        kept: dict[str, list[float]] = {name: [] for name in feeds}
        alone: list[float] = []
        # the learner thread's CPU time and context switches an update, alone and beside each feed
        windows = {name: ThreadWindow() for name in ["alone", *feeds]}
        updates = dict.fromkeys(windows, 0.0)
        for round_ in range(args.rounds):
            order = feeds if round_ % 2 == 0 else feeds[::-1]
            for name in order:
                base = learner.updates_per_s(None, args.seconds, windows["alone"])
                feed = open_feed(name, store, ring, args.batch_size, args.seed + round_, args.prefetch)
                try:
                    next(feed)
                    learner.updates_per_s(feed, args.warmup)
                    fed = learner.updates_per_s(feed, args.seconds, windows[name])
                finally:
                    feed.close()
                alone.append(base)
                kept[name].append(fed / base)
                updates["alone"] += base * args.seconds
                updates[name] += fed * args.seconds
        store.close()
    results = []
    for name in feeds:
        results.append({"game": game, "feed": name, "batch_size": args.batch_size, "ops": args.ops,
                        "prefetch": args.prefetch, "decode_threads": args.decode_threads,
                        "learner_alone_per_s": statistics.median(alone), "kept": quartiles(kept[name]),
                        "learner_thread": windows[name].per_call(round(updates[name])),
                        "learner_thread_alone": windows["alone"].per_call(round(updates["alone"])),
                        "rounds": args.rounds, "load": load_average()})
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", default="pong,mspacman")
    parser.add_argument("--feeds", default=",".join(FEEDS))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--capacity", type=int, default=50_000)
    parser.add_argument("--decode-threads", type=int, default=1,
                        help="the store's decode_threads (0: the store's default, all usable cores)")
    parser.add_argument("--prefetch", type=int, default=2, help="batches(prefetch=...): batches kept ready")
    parser.add_argument("--ops", type=int, default=400, help="torch ops an update (launches of an eager learner)")
    parser.add_argument("--elements", type=int, default=4096, help="floats each op adds (its time without the GIL)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--warmup", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmpdir")
    parser.add_argument("--json", action="store_true", help="one JSON line per feed instead of the table")
    add_data_dir_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the learner's ops on its own thread: the feed's decode has the other core
    rows: list[dict[str, Any]] = []
    for game in args.games.split(","):
        rows += run_game(game, args)
        if args.json:
            for row in rows[-len(args.feeds.split(",")):]:
                print(json.dumps(row), flush=True)
    if not args.json:
        print("| game | feed | learner alone (updates/s) | kept median [q1, q3] | learner thread an update: CPU us, "
              "voluntary / involuntary switches (alone) |")
        print("|---|---|---:|---:|---|")
        for row in rows:
            k, fed, alone = row["kept"], row["learner_thread"], row["learner_thread_alone"]
            print(f"| {row['game']} | {row['feed']} | {row['learner_alone_per_s']:,.0f} | "
                  f"{k['median']:.3f} [{k['q1']:.3f}, {k['q3']:.3f}] | {fed['cpu_us']:.0f}, {fed['voluntary']:.2f} / "
                  f"{fed['involuntary']:.2f} ({alone['cpu_us']:.0f}, {alone['voluntary']:.2f} / "
                  f"{alone['involuntary']:.2f}) |")


if __name__ == "__main__":
    main()
