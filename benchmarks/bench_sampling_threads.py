"""Sampling batches/s by decode threads, against the in-RAM numpy frame ring in the same run.

For each game and batch size: a store of ``--capacity`` transitions (stacks of 4, the game's recorded
frames added one env step at a time) and a numpy ring of the same transitions (Dopamine's layout: each
frame once in RAM, a batch one fancy-index gather of 5 frames a row, obs and next_obs views of it).
The store is opened read-only once per decode-thread cap (``decode_threads=``: 1, 2, 4, 8 and ``all``,
the cores this process may use) and sampled in alternating windows with the ring (the first of each
pair alternating), so that a busy machine slows both alike. Prints a table per game (batches/s of each,
the median of the windows' ratios, the threads the policy gave a batch under each cap) and, with
``--json``, one JSON line per figure. Run it with glibc's allocator kept steady, as bench_core runs its
workers (``MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=268435456``; cores_box.sh does):
otherwise each batch of 256 stacks (9 MB) is a fresh mmap that both buffers page-fault in again.
``--encodings`` names the stores' frame encodings (``default``: the store's default, reference frames for
these uint8 frames; ``lz4``; or both): one store per encoding, each against the same ring.

    .venv/bin/python benchmarks/bench_sampling_threads.py                       # 3 games x 2 batches x 5 caps
    .venv/bin/python benchmarks/bench_sampling_threads.py --games pong --batches 32 --caps 1,2 --seconds 0.3
    .venv/bin/python benchmarks/bench_sampling_threads.py --data-dir .devcarry/frames --json
    .venv/bin/python benchmarks/bench_sampling_threads.py --encodings lz4,lz4-reference --caps 2,all
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mmreplay import ReplayStore
from mmreplay.frames.threads import batch_threads, thread_limit, usable_cores

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encoding_option import add_encodings_argument, create_encoding
from frame_streams import add_data_dir_argument, stream_path
from peers import FrameStream, NumpyFrameRing

STACK = 4


def ring_sampler(ring: NumpyFrameRing, batch_size: int, seed: int) -> Callable[[], object]:
    """A batch of the ring as Dopamine gathers it: the (B, 5) frame slots of obs and next_obs in one
    fancy index, obs and next_obs views of that one array."""
    rng = np.random.default_rng(seed)
    offsets = np.arange(-STACK + 1, 2)

    def sample() -> object:
        oldest = max(0, ring.frames_written - ring.capacity)
        chosen = np.empty(0, np.int64)
        while len(chosen) < batch_size:
            steps = rng.integers(oldest, ring.frames_written - 1, size=batch_size + batch_size // 4 + 4)
            slots = steps % ring.capacity
            ok = ring.has_action[slots] & (np.maximum(steps - STACK + 1, ring.episode_first[slots]) >= oldest)
            chosen = np.concatenate([chosen, steps[ok]])
        slots = chosen[:batch_size] % ring.capacity
        window = np.maximum(chosen[:batch_size, None] + offsets, ring.episode_first[slots][:, None]) % ring.capacity
        frames = ring.frames[window]
        return (frames[:, :-1], ring.action[slots], ring.reward[slots], frames[:, 1:], ring.terminated[slots],
                ring.truncated[slots])

    return sample


def fill(stream: FrameStream, capacity: int, store: ReplayStore, ring: NumpyFrameRing) -> float:
    """The stream's transitions, cyclically, into both (stacks and Python scalars into the store, as
    CleanRL and SB3 add; single frames into the ring); the store's adds per second."""
    seconds = 0.0
    for i in range(capacity):
        j = i % len(stream)
        t = stream.transition_frame[j]
        action, reward = int(stream.action[j]), float(stream.reward[j])
        terminated, truncated = bool(stream.terminated[j]), bool(stream.truncated[j])
        obs, next_obs = stream.stack(t), stream.stack(t + 1)
        start = time.perf_counter()
        store.add(obs, action, reward, next_obs, terminated, truncated)
        seconds += time.perf_counter() - start
        ring.add(stream.frames[t], action, reward, stream.frames[t + 1], terminated, truncated)
    store.flush()
    return capacity / seconds


def open_with_cap(path: Path, cap: int | None) -> ReplayStore:
    """The store opened read-only with decode threads capped at ``cap`` (None: all usable cores)."""
    try:
        return ReplayStore.open(path, "r", decode_threads=cap)  # type: ignore[call-arg]
    except TypeError:  # a build from before decode_threads= reached open: set the reader's limit
        store = ReplayStore.open(path, "r")
        store._reader.thread_limit = thread_limit(cap)  # type: ignore[attr-defined]
        return store


def paired(first: Callable[[], object], second: Callable[[], object], *, seconds: float,
           rounds: int) -> tuple[float, float, float]:
    """Batches/s of each in alternating windows (medians) and the median of the windows' ratios."""
    def window(sample: Callable[[], object]) -> float:
        count, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            sample()
            count += 1
        return count / elapsed

    window(first), window(second)  # warm-up: page faults, the allocator, the pool's helpers
    pairs = []
    for r in range(rounds):
        if r % 2 == 0:
            a, b = window(first), window(second)
        else:
            b, a = window(second), window(first)
        pairs.append((a, b))
    return (statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs),
            statistics.median(a / b for a, b in pairs))


def parse_caps(text: str) -> list[int | None]:
    return [None if cap == "all" else int(cap) for cap in text.split(",")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", default="pong,mspacman,seaquest")
    parser.add_argument("--batches", default="32,256")
    parser.add_argument("--caps", default="1,2,4,8,all", help="decode_threads caps; 'all': the usable cores")
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=0.4, help="per window")
    parser.add_argument("--rounds", type=int, default=4, help="window pairs per cell")
    parser.add_argument("--tmpdir", default=None, help="where the stores live while measured (on disk)")
    add_encodings_argument(parser)
    parser.add_argument("--json", action="store_true", help="also print one JSON line per figure")
    add_data_dir_argument(parser)
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    caps = parse_caps(args.caps)
    cores = usable_cores()
    malloc = "steady" if os.environ.get("MALLOC_MMAP_THRESHOLD_") else "glibc's default"
    print(f"usable cores {cores}; capacity {args.capacity:,}; stacks of {STACK}; windows of {args.seconds:g} s, "
          f"{args.rounds} pairs per cell; allocator {malloc}", flush=True)
    for game in args.games.split(","):
        stream = FrameStream.load(stream_path(game, args.data_dir))
        with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
            for e, encoding in enumerate(args.encodings):
                path = Path(tmp) / f"{game}-{e}.mmr"
                ring = NumpyFrameRing(args.capacity)
                with ReplayStore.create(path, frame_shape=stream.frames.shape[1:], capacity=args.capacity,
                                        stack_size=STACK, frame_encoding=create_encoding(encoding)
                                        ) as store:
                    adds = fill(stream, args.capacity, store, ring)
                    stored = store.frame_encoding
                print(f"\n{game}, {stored} frames: {args.capacity:,} transitions; adds (stacks, Python scalars) "
                      f"{adds:,.0f}/s while filling")
                print("| batch | decode_threads | threads a batch takes | mmreplay batches/s | ring batches/s | ratio |")
                print("|---:|---|---:|---:|---:|---:|", flush=True)
                row_nbytes = (STACK + 1) * stream.frames[0].nbytes
                for batch in batches:
                    for cap in caps:
                        store = open_with_cap(path, cap)
                        rng = np.random.default_rng(1)
                        threads = batch_threads(batch * row_nbytes, thread_limit(cap))
                        mm, peer, ratio = paired(functools.partial(store.sample, batch, rng),
                                                 ring_sampler(ring, batch, 2), seconds=args.seconds, rounds=args.rounds)
                        store.close()
                        label = "all" if cap is None else str(cap)
                        print(f"| {batch} | {label} | {threads} | {mm:,.0f} | {peer:,.0f} | {ratio:.2f}x |", flush=True)
                        if args.json:
                            print(json.dumps({"figure": "sampling", "game": game, "encoding": stored, "batch": batch,
                                              "decode_threads": label, "threads": threads, "cores": cores,
                                              "mmreplay_batches_s": round(mm), "ring_batches_s": round(peer),
                                              "ratio": round(ratio, 3)}), flush=True)
                del ring


if __name__ == "__main__":
    main()
