"""Does mmreplay stay flat at scale? Build a store of 10,000,000 real transitions and watch it.

Feeds a real frame stream (20,000 frames recorded with ALE, see ``frame_streams.py``; ~19,980 transitions, cycled, one
env, one add per env step, nothing varied: every pass adds the same frames again) into a store of
capacity ``--transitions``, so nothing is evicted, and reports:

* add throughput per ``--interval`` transitions (1,000,000 by default): it should stay flat;
* this process's anonymous memory (``RssAnon``) growth since just before the store was created, at
  each interval: it should stay flat in capacity (frames and tables are memory-mapped files);
* disk bytes (allocated blocks of the store's files) and the time to build (adds + final flush);
* sample throughput (uniform batches of ``--batch-size`` 4-stacks) with a warm page cache, against a
  store of ``--baseline`` (100,000) transitions built in the same run, the two measured in alternating
  rounds so that machine load hits both alike (target: the large store within 20% of the small one);
* sample throughput with a cold page cache: the store closed, every file's pages dropped with
  ``posix_fadvise(POSIX_FADV_DONTNEED)`` (no root needed; ``mincore`` then counts what stayed
  resident), reopened and sampled for ``--cold-seconds`` from the first batch on, no warm-up.

    .venv/bin/python benchmarks/bench_scale.py                             # 10M pong transitions, ~4 GB
    .venv/bin/python benchmarks/bench_scale.py --transitions 200000        # a quick check
    .venv/bin/python benchmarks/bench_scale.py --dir /big/disk --keep --json benchmarks/results/scale.json

Progress goes to stderr, the markdown report to stdout.
"""

from __future__ import annotations

import argparse
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
from machine import (
    evict_from_page_cache,
    load_average,
    on_tmpfs,
    read_ahead_kb,
    read_into_page_cache,
    resident_bytes,
    rss_anon,
)
from frame_streams import add_data_dir_argument, data_dir_arguments, stream_path
from peers import FRAME_SHAPE, STACK_SIZE, FrameStream
from timing import batches_per_second

WARM_TARGET = 0.8  # the speed target: sampling the large store within 20% of the small one
MiB = 2**20


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build(path: Path, stream: FrameStream, transitions: int, interval: int, *, quiet: bool = False) -> dict:
    """Fill a new store of capacity ``transitions``; figures per interval and for the whole build.

    Anonymous memory growth is counted from just before the store is created (the frame stream is
    already loaded), so it is the store's own: run it in a fresh process (``build_in_subprocess``).
    """
    from mmreplay import ReplayStore

    clock = time.perf_counter
    rss_before = rss_anon()
    began = clock()
    store = ReplayStore.create(path, frame_shape=FRAME_SHAPE, capacity=transitions, stack_size=STACK_SIZE)
    intervals, add_seconds_total = [], 0.0
    try:
        for first in range(0, transitions, interval):
            last = min(first + interval, transitions)
            add_seconds, wall = 0.0, clock()
            for i in range(first, last):
                inputs = stream.single_frame_inputs(i)
                start = clock()
                store.add(*inputs)
                add_seconds += clock() - start
            wall = clock() - wall
            add_seconds_total += add_seconds
            row = {"transitions": last, "add_per_s": (last - first) / add_seconds, "wall_per_s": (last - first) / wall,
                   "rss_anon_growth": rss_anon() - rss_before, "disk_bytes": store.bytes_on_disk}
            intervals.append(row)
            if not quiet:
                elapsed = clock() - began
                log(f"[{elapsed:7.0f}s] {last:>12,} transitions  add {row['add_per_s']:9,.0f}/s  "
                    f"anon +{row['rss_anon_growth'] / MiB:7.1f} MiB  disk {row['disk_bytes'] / 2**30:6.2f} GiB  "
                    f"eta {elapsed / last * (transitions - last):5.0f}s  load {load_average():.2f}")
        start = clock()
        store.flush()
        add_seconds_total += clock() - start
        return {
            "transitions": len(store), "build_seconds": clock() - began, "add_seconds": add_seconds_total,
            "add_per_s": transitions / add_seconds_total, "rss_anon_growth": rss_anon() - rss_before,
            "disk_bytes": store.bytes_on_disk, "intervals": intervals,
        }
    finally:
        store.close()


def build_in_subprocess(args: argparse.Namespace, path: Path, transitions: int, interval: int, *,
                        quiet: bool) -> dict:
    """``build`` in a fresh Python process, so its anonymous memory starts clean (progress passes through)."""
    command = [sys.executable, __file__, "--build-worker", str(path), "--transitions", str(transitions),
               "--interval", str(interval), "--game", args.game, *data_dir_arguments(args.data_dir)]
    if quiet:
        command.append("--quiet")
    done = subprocess.run(command, check=False, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building {path} failed with exit status {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def open_store(path: Path) -> tuple[object, float]:
    from mmreplay import ReplayStore

    start = time.perf_counter()
    store = ReplayStore.open(path, "r")
    return store, time.perf_counter() - start


def sample_warm(small: Path, large: Path, *, batch_size: int, seconds: float, rounds: int) -> dict:
    """Both stores' pages read into the page cache, then sampled in alternating rounds; medians."""
    read_into_page_cache(small)
    read_into_page_cache(large)
    stores = {"small": open_store(small)[0], "large": open_store(large)[0]}
    rates: dict[str, list[float]] = {"small": [], "large": []}
    try:
        rng = np.random.default_rng(0)
        for round_ in range(rounds):
            for name, store in stores.items():
                rates[name].append(batches_per_second(lambda s=store: s.sample(batch_size, rng=rng), seconds))
            log(f"warm round {round_ + 1}/{rounds}: small {rates['small'][-1]:,.0f} batches/s, "
                f"large {rates['large'][-1]:,.0f} batches/s")
    finally:
        for store in stores.values():
            store.close()
    return {"small": statistics.median(rates["small"]), "large": statistics.median(rates["large"]),
            "rounds": rates, "resident_bytes_large": resident_bytes(large)}


def sample_cold(path: Path, *, batch_size: int, seconds: float) -> dict:
    """Drop the store's pages from the page cache, reopen it, and sample from the first batch on."""
    files, size = evict_from_page_cache(path)
    resident_after_evict = resident_bytes(path)
    store, open_seconds = open_store(path)
    try:
        rng = np.random.default_rng(1)
        clock = time.perf_counter
        times, start = [], clock()
        while clock() - start < seconds:
            store.sample(batch_size, rng=rng)
            times.append(clock() - start)
    finally:
        store.close()
    first_second = sum(1 for t in times if t <= 1.0)
    return {"files": files, "file_bytes": size, "resident_after_evict": resident_after_evict,
            "open_seconds": open_seconds, "batches": len(times), "seconds": times[-1],
            "sample_per_s": len(times) / times[-1], "first_second_batches": first_second,
            "resident_after_sampling": resident_bytes(path), "read_ahead_kb": read_ahead_kb(path)}


def report(args: argparse.Namespace, result: dict) -> str:
    big, small = result["build"], result["baseline_build"]
    warm, cold = result["warm"], result["cold"]
    n = big["transitions"]
    lines = [
        (f"## mmreplay at scale: {args.game}, {n:,} transitions (one env, the ~{result['stream_transitions']:,}"
        f"-transition stream cycled {n / result['stream_transitions']:.0f} times), stack {STACK_SIZE}, "
        f"batch {args.batch_size}"),
        "",
        ("| transitions | add (transitions/s, this interval) | add incl. input (transitions/s) | "
        "anon memory growth (MiB) | disk (GiB) | disk bytes/transition |"),
        "|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {r['transitions']:,} | {r['add_per_s']:,.0f} | {r['wall_per_s']:,.0f} | "
              f"{r['rss_anon_growth'] / MiB:,.1f} | {r['disk_bytes'] / 2**30:,.2f} | "
              f"{r['disk_bytes'] / r['transitions']:,.0f} |" for r in big["intervals"]]
    rates = [r["add_per_s"] for r in big["intervals"]]
    ratio = warm["large"] / warm["small"]
    lines += [
        "",
        (f"- build: {big['build_seconds']:,.0f} s for {n:,} transitions; add {big['add_per_s']:,.0f} transitions/s "
        f"overall (add calls and the final flush), intervals from {min(rates):,.0f} to {max(rates):,.0f} "
        f"(last/first {rates[-1] / rates[0]:.2f}x); the {args.baseline:,}-transition store: "
        f"{small['add_per_s']:,.0f}/s"),
        (f"- anonymous memory growth: {big['rss_anon_growth'] / MiB:,.1f} MiB at {n:,} transitions "
        f"({big['rss_anon_growth'] / n:,.1f} bytes/transition), {small['rss_anon_growth'] / MiB:,.1f} MiB at "
        f"{args.baseline:,}"),
        (f"- disk: {big['disk_bytes'] / 2**30:,.2f} GiB, {big['disk_bytes'] / n:,.0f} bytes/transition "
        f"({small['disk_bytes'] / small['transitions']:,.0f} at {args.baseline:,})"),
        (f"- sample, warm page cache (median of {args.rounds} alternating rounds of {args.sample_seconds:g} s): "
        f"{warm['large']:,.0f} batches/s at {n:,} vs {warm['small']:,.0f} at {args.baseline:,}: {ratio:.2f}x, "
        f"target >= {WARM_TARGET}x {'met' if ratio >= WARM_TARGET else 'NOT met'} "
        f"({warm['resident_bytes_large'] / 2**30:,.2f} GiB of the large store resident after)"),
        (f"- sample, cold page cache: {cold['sample_per_s']:,.0f} batches/s over the first {cold['seconds']:.1f} s "
        f"({cold['first_second_batches']:,} batches in the first second; {cold['sample_per_s'] / warm['small']:.2f}x "
        f"the warm {args.baseline:,} store); reopening took {cold['open_seconds'] * 1e3:,.0f} ms"),
        (f"- cold cache: how: store closed (its maps released), then fsync + posix_fadvise(POSIX_FADV_DONTNEED) on "
        f"each of its {cold['files']} files ({cold['file_bytes'] / 2**30:,.2f} GiB of file size); resident after "
        f"eviction (mincore): {cold['resident_after_evict'] / MiB:,.1f} MiB; after cold sampling: "
        f"{cold['resident_after_sampling'] / MiB:,.1f} MiB. The disk's own cache and the hypervisor's are not "
        "dropped, so on a VM 'cold' may still be faster than a real disk read. The disk's read-ahead is "
         f"{cold.get('read_ahead_kb')} KiB: a page fault on a mapped file reads about that much around it"),
        (f"- load average {result['load_before']:.2f} at the start, {result['load_after']:.2f} at the end "
        f"({os.cpu_count()} CPUs); store in {result['directory']}"),
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transitions", type=int, default=10_000_000, help="transitions in the large store")
    parser.add_argument("--dir", type=Path, help="where the stores are built (on disk); default a temp dir in /tmp")
    parser.add_argument("--keep", action="store_true", help="keep the stores afterwards (default: delete them)")
    parser.add_argument("--game", choices=("pong", "breakout", "mspacman"), default="pong")
    parser.add_argument("--baseline", type=int, default=100_000, help="transitions in the small store compared with")
    parser.add_argument("--interval", type=int, help="transitions per reported add rate (default 1,000,000, "
                        "or a tenth of --transitions when smaller)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--sample-seconds", type=float, default=2.0, help="seconds per warm sampling round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating warm sampling rounds")
    parser.add_argument("--cold-seconds", type=float, default=5.0, help="seconds of cold-cache sampling")
    add_data_dir_argument(parser)
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    parser.add_argument("--build-worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.transitions < 10_000 or args.baseline < 10_000:
        parser.error("--transitions and --baseline must be >= 10,000")
    if args.interval is None:
        args.interval = min(1_000_000, max(1, args.transitions // 10))
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    stream = FrameStream.load(stream_path(args.game, args.data_dir))
    if args.build_worker:
        print(json.dumps(build(args.build_worker, stream, args.transitions, args.interval, quiet=args.quiet)))
        return
    parent = args.dir or Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="mmreplay-scale-", dir=parent))
    if on_tmpfs(str(directory)):
        log(f"warning: {directory} is on a tmpfs (RAM): disk and cold-cache figures mean nothing there")
    free = shutil.disk_usage(directory).free
    if free < args.transitions * 500:
        log(f"warning: {free / 2**30:.1f} GiB free in {parent}; the store needs about "
            f"{args.transitions * 400 / 2**30:.1f} GiB")
    result: dict[str, object] = {"directory": str(directory), "load_before": load_average(),
                                 "stream_transitions": len(stream), "settings": {
                                     k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    small, large = directory / f"baseline-{args.baseline}.mmr", directory / f"store-{args.transitions}.mmr"
    try:
        log(f"building the {args.baseline:,}-transition baseline store in {directory}")
        result["baseline_build"] = build_in_subprocess(args, small, args.baseline, args.baseline, quiet=True)
        log(f"building the {args.transitions:,}-transition store")
        result["build"] = build_in_subprocess(args, large, args.transitions, args.interval, quiet=False)
        log("sampling with a warm page cache")
        result["warm"] = sample_warm(small, large, batch_size=args.batch_size, seconds=args.sample_seconds,
                                     rounds=args.rounds)
        log("sampling with a cold page cache")
        result["cold"] = sample_cold(large, batch_size=args.batch_size, seconds=args.cold_seconds)
        result["load_after"] = load_average()
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    result["markdown"] = report(args, result)
    print(result["markdown"])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        log(f"wrote {args.json}")


if __name__ == "__main__":
    main()
