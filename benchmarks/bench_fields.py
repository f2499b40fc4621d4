"""What does a user field cost? A 2x512 float16 recurrent state per transition, in the store or beside it.

Three buffers take the same real Pong transitions (single frames, one env, the stream's numpy scalars)
and a float16 state of 2x512 per transition (a random walk squashed by tanh: rows of a GRU's hidden
state compress to 0.996x with lz4, see mmreplay/rows/fields.py, so its bytes do not matter here):

* ``no field``: a store without fields (add's fast path, the baseline);
* ``field in store``: a store created with ``fields={"state": ((2, 512), np.float16)}``, every add
  passing ``fields={"state": ...}`` and every batch returning ``batch.fields["state"]``;
* ``field in numpy``: a store without fields plus a numpy ring ``(capacity, 2, 512)`` float16 written at
  ``step % capacity`` after each add and gathered with ``batch.index % capacity`` after each sample.

The buffers take turns, ``--block`` adds each, so the machine's drift hits each alike; the median block
rate is reported. Then each samples batches of 32 for ``--seconds``, in turns, ``--rounds`` times (median).
Bytes per transition: the store's bytes on disk over its transitions, plus 2,048 in RAM for the numpy ring.

    .venv/bin/python benchmarks/bench_fields.py                 # pong, 20,000 adds each
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frame_streams import add_data_dir_argument, stream_path
from peers import FrameStream
from timing import batches_per_second

from mmreplay import ReplayStore

SHAPE = (2, 512)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adds", type=int, default=20_000)
    parser.add_argument("--block", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    add_data_dir_argument(parser)
    arguments = parser.parse_args()
    stream = FrameStream.load(stream_path("pong", arguments.data_dir))
    adds = min(arguments.adds, len(stream))
    rng = np.random.default_rng(0)
    states = np.tanh(np.cumsum(rng.normal(0, 0.1, (adds, *SHAPE)), axis=0)).astype(np.float16)
    work = Path(tempfile.mkdtemp(prefix="bench-fields-"))
    try:
        stores = {
            "no field": ReplayStore.create(work / "plain.mmr", frame_shape=(84, 84), capacity=adds),
            "field in store": ReplayStore.create(work / "field.mmr", frame_shape=(84, 84), capacity=adds,
                                                 fields={"state": (SHAPE, np.float16)}),
            "field in numpy": ReplayStore.create(work / "ring.mmr", frame_shape=(84, 84), capacity=adds),
        }
        ring = np.zeros((adds, *SHAPE), np.float16)
        rates: dict[str, list[float]] = {name: [] for name in stores}
        frames, t = stream.frames, stream.transition_frame
        for start in range(0, adds, arguments.block):
            stop = min(adds, start + arguments.block)
            for name, store in stores.items():
                began = time.perf_counter()
                for i in range(start, stop):
                    frame = t[i]
                    transition = (frames[frame], stream.action[i], stream.reward[i], frames[frame + 1],
                                  stream.terminated[i], stream.truncated[i] or (stream.ends_episode[i] and not stream.terminated[i]))
                    if name == "field in store":
                        store.add(*transition, fields={"state": states[i]})
                    else:
                        step = store.transitions_added
                        store.add(*transition)
                        if name == "field in numpy":
                            ring[step % adds] = states[i]
                rates[name].append((stop - start) / (time.perf_counter() - began))
        samplers = {
            "no field": lambda: stores["no field"].sample(32, rng=rng),
            "field in store": lambda: stores["field in store"].sample(32, rng=rng).fields["state"],
            "field in numpy": lambda: ring[stores["field in numpy"].sample(32, rng=rng).index % adds],
        }
        sampled: dict[str, list[float]] = {name: [] for name in stores}
        for _ in range(arguments.rounds):
            for name, sample in samplers.items():
                sampled[name].append(batches_per_second(sample, arguments.seconds))
        for store in stores.values():
            store.flush()
        print(f"pong, {adds:,} transitions, capacity {adds:,}, single frames, one env; medians of "
              f"{len(rates['no field'])} add blocks and {arguments.rounds} sampling rounds")
        print("| buffer | add (transitions/s) | sample (batches of 32/s) | bytes/transition |")
        print("|---|---:|---:|---:|")
        for name, store in stores.items():
            size = store.bytes_on_disk / len(store) + (SHAPE[0] * SHAPE[1] * 2 if name == "field in numpy" else 0)
            where = " (disk + RAM)" if name == "field in numpy" else " (disk)"
            print(f"| {name} | {statistics.median(rates[name]):,.0f} | {statistics.median(sampled[name]):,.0f} | "
                  f"{size:,.0f}{where} |")
        for store in stores.values():
            store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
