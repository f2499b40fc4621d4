"""How long does decoding one sampled batch of distinct frames take, per path and thread count?

Decodes batches of distinct real frames (Pong, MsPacman) from one in-memory segment through
``codec.decode_batch``: the compiled extension on one and two threads, and the python-lz4 fallback.
Prints the median time per batch over repeats, and per frame. Run: ``python benchmarks/bench_decode.py``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from mmreplay.frames import lz4_codec as codec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frame_streams import stream_path  # noqa: E402


def encode_segment(frames: np.ndarray) -> tuple[memoryview, dict[str, np.ndarray]]:
    payloads = [codec.compress(frame) for frame in frames]
    lengths = np.array([len(p) for p in payloads], np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    steps = np.arange(len(frames), dtype=np.int64)
    checksums = np.array([codec.checksum(p, int(s)) for p, s in zip(payloads, steps)], np.uint32)
    return memoryview(b"".join(payloads)), {"offsets": offsets, "lengths": lengths, "checksums": checksums,
                                           "seeds": steps}


def time_batches(view, table, picks, out, repeats, **options) -> float:
    """Median seconds per batch; each repeat decodes a different random set of frames."""
    times = []
    segments = np.zeros(picks.shape[1], np.int64)
    for batch in picks[:repeats]:
        columns = {name: column[batch] for name, column in table.items()}
        start = time.perf_counter()
        bad = codec.decode_batch(segments, columns["offsets"], columns["lengths"], columns["checksums"],
                                 columns["seeds"], out, views=[view], **options)
        times.append(time.perf_counter() - start)
        assert bad == -1
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64, 160, 320])
    parser.add_argument("--repeats", type=int, default=400)
    parser.add_argument("--frames", type=int, default=5000, help="frames of each game to encode")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"accelerated extension built: {codec.ACCELERATED}")
    print("| game | frames/batch | path | median us/batch | us/frame |")
    print("|---|---|---|---|---|")
    for game in ("pong", "mspacman"):
        frames = np.load(stream_path(game))["frames"][: args.frames]
        view, table = encode_segment(frames)
        for size in args.sizes:
            picks = np.stack([rng.choice(len(frames), size, replace=False) for _ in range(args.repeats)])
            out = np.empty((size, *frames.shape[1:]), np.uint8)
            paths = {"python-lz4 fallback": {"accelerated": False}}
            if codec.ACCELERATED:
                paths = {"extension, 1 thread": {"threads": 1}, "extension, 2 threads": {"threads": 2},
                         "extension, default": {}, **paths}
            for name, options in paths.items():
                seconds = time_batches(view, table, picks, out, args.repeats, **options)
                print(f"| {game} | {size} | {name} | {seconds * 1e6:.1f} | {seconds * 1e6 / size:.2f} |")


if __name__ == "__main__":
    main()
