"""How many transitions per second does one writer add, on each game, and how do reference frames' adds
compare with plain lz4's (format 6's bounds: one env's >= 0.85x, 8 envs' >= 0.9x)?

Two forms per game, in one process, taking turns in blocks of ``--block`` calls so that a busy machine's
drift hits both alike: one env adding 4-frame stacks with Python ``int``/``float``/``bool`` (what CleanRL
and SB3 pass), and ``--envs`` envs adding ``(envs, 4, 84, 84)`` stacks with numpy arrays (a vector env;
each env replays the stream from its own episode start). Each block's rate is taken in wall time and in
the thread's CPU time (steadier on a machine shared with other jobs); the medians are printed, and with
``--json`` one JSON line per figure. Building the inputs (the stacks) is the env's job and is not timed; the store's automatic commits are
(they happen inside ``add``). ``--encodings`` names the stores' frame
encodings (``default``: the store's default, reference frames for these uint8 frames; ``lz4``; or both,
``lz4,lz4-reference``): each form runs once per encoding, all of them taking turns in the same blocks.

    .venv/bin/python benchmarks/bench_adds.py                      # pong, mspacman, seaquest
    .venv/bin/python benchmarks/bench_adds.py --games mspacman --adds 20000 --json
    .venv/bin/python benchmarks/bench_adds.py --encodings lz4,lz4-reference --adds 16000
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
from encoding_option import add_encodings_argument, create_encoding
from frame_streams import add_data_dir_argument, stream_path
from peers import FrameStream

STACK = 4


class SingleEnv:
    """One env: stacks and Python scalars, the stream in order, cyclically."""

    def __init__(self, stream: FrameStream) -> None:
        self.stream, self.i = stream, 0
        self.per_call = 1

    def next_inputs(self) -> tuple[object, ...]:
        s, j = self.stream, self.i % len(self.stream)
        self.i += 1
        t = s.transition_frame[j]
        return s.stack(t), int(s.action[j]), float(s.reward[j]), s.stack(t + 1), bool(s.terminated[j]), bool(s.truncated[j])


class VectorEnvs:
    """``envs`` envs, each replaying the stream from the episode start nearest ``e / envs`` of the way in."""

    def __init__(self, stream: FrameStream, envs: int) -> None:
        self.stream, self.i, self.per_call = stream, 0, envs
        first = stream.transition_frame
        starts = np.flatnonzero(stream.stack_frames[first, 0] == first)
        wanted = np.arange(envs) * len(stream) // envs
        self.offsets = starts[np.abs(starts[None, :] - wanted[:, None]).argmin(axis=1)].astype(np.int64)

    def next_inputs(self) -> tuple[object, ...]:
        s = self.stream
        j = (self.offsets + self.i) % len(s)
        self.i += 1
        t = s.transition_frame[j]
        return (s.frames[s.stack_frames[t]], s.action[j], s.reward[j], s.frames[s.stack_frames[t + 1]],
                s.terminated[j], s.truncated[j])


def measure(store: ReplayStore, feed: SingleEnv | VectorEnvs, calls: int) -> tuple[float, float]:
    """Transitions/s over ``calls`` adds: (wall, thread CPU), only the add calls timed."""
    wall = cpu = 0.0
    for _ in range(calls):
        inputs = feed.next_inputs()
        start, start_cpu = time.perf_counter(), time.thread_time()
        store.add(*inputs)
        wall += time.perf_counter() - start
        cpu += time.thread_time() - start_cpu
    transitions = calls * feed.per_call
    return transitions / wall, transitions / max(cpu, 1e-9)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", default="pong,mspacman,seaquest")
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--adds", type=int, default=40_000, help="transitions per form and game")
    parser.add_argument("--block", type=int, default=2_000, help="transitions per form per turn")
    parser.add_argument("--envs", type=int, default=8, help="envs of the vector form")
    parser.add_argument("--tmpdir", default=None, help="where the stores live while measured (on disk)")
    add_encodings_argument(parser)
    parser.add_argument("--json", action="store_true", help="also print one JSON line per figure")
    add_data_dir_argument(parser)
    args = parser.parse_args(argv)
    encodings = args.encodings
    import mmreplay

    print(f"mmreplay: {Path(mmreplay.__file__ or '').parent}", flush=True)  # which package (a box's base run)
    print("| game | encoding | form | transitions/s (wall) | transitions/s (thread CPU) |\n|---|---|---|---:|---:|",
          flush=True)
    for game in args.games.split(","):
        stream = FrameStream.load(stream_path(game, args.data_dir))
        with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
            forms: dict[tuple[str, str], tuple[SingleEnv | VectorEnvs, int]] = {}
            stores: dict[tuple[str, str], ReplayStore] = {}
            for e, encoding in enumerate(encodings):
                for k, (name, (feed, envs)) in enumerate({
                    "1 env, stacks, Python scalars": (SingleEnv(stream), 1),
                    f"{args.envs} envs, stacks, numpy arrays": (VectorEnvs(stream, args.envs), args.envs),
                }.items()):
                    stores[encoding, name] = ReplayStore.create(
                        Path(tmp) / f"{e}-{k}.mmr", frame_shape=stream.frames.shape[1:], capacity=args.capacity,
                        stack_size=STACK, num_envs=envs, frame_encoding=create_encoding(encoding))
                    forms[encoding, name] = (feed, envs)
            rates: dict[tuple[str, str], list[tuple[float, float]]] = {key: [] for key in forms}
            for turn in range(max(1, args.adds // args.block)):
                order = list(forms) if turn % 2 == 0 else list(reversed(forms))
                for key in order:
                    feed, envs = forms[key]
                    rates[key].append(measure(stores[key], feed, max(1, args.block // envs)))
            written = {key: store.frame_encoding for key, store in stores.items()}
            for store in stores.values():
                store.close()
        for (encoding, name), blocks in rates.items():
            wall, cpu = statistics.median(b[0] for b in blocks), statistics.median(b[1] for b in blocks)
            stored = written[encoding, name]
            print(f"| {game} | {stored} | {name} | {wall:,.0f} | {cpu:,.0f} |", flush=True)
            if args.json:
                print(json.dumps({"figure": "adds", "game": game, "encoding": stored, "form": name,
                                  "transitions_s": round(wall), "cpu_transitions_s": round(cpu)}), flush=True)


if __name__ == "__main__":
    main()
