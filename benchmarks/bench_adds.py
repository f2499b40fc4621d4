"""How many transitions per second does one writer add, on each game (issue 25, item 3: >= 50,000/s for
stack adds with Python scalars, MsPacman included)?

Two forms per game, in one process, taking turns in blocks of ``--block`` calls so that a busy machine's
drift hits both alike: one env adding 4-frame stacks with Python ``int``/``float``/``bool`` (what CleanRL
and SB3 pass), and ``--envs`` envs adding ``(envs, 4, 84, 84)`` stacks with numpy arrays (a vector env;
each env replays the stream from its own episode start). Each block's rate is taken in wall time and in
the thread's CPU time (steadier on a machine shared with other jobs); the medians are printed, and with
``--json`` one JSON line per figure. Where the store compresses one env's new frame ahead on a helper
(from 4 usable cores), a third form adds the same way with that switched off (the writer's private
``_continuing.ahead_threads``; ``switch_helper_off``), so that the run shows what the helper buys; for reference stores a line after each
form says what the frames encoded ahead did (asked, posted to a helper, run on one, taken, taken back,
and the nanoseconds the adds waited for helpers: near 0 where a helper hides the whole encode).
Building the inputs (the stacks) is the env's job and is not timed; the store's automatic commits are
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

from mmreplay import ReplayStore, extensions

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


def ahead_counts(store: ReplayStore) -> dict[str, int] | None:
    """For a reference store, what its frames encoded ahead did (``groups_ahead_counts``: asked, posted to a
    helper, run on one, taken by the add, taken back, nanoseconds the adds waited); None for a plain store or
    an older build."""
    groups = getattr(getattr(store._role, "_encoder", None), "groups", None)  # type: ignore[attr-defined]
    counts = getattr(extensions.load("_lz4batch"), "groups_ahead_counts", None)
    return None if groups is None or counts is None else dict(counts(groups))


def switch_helper_off(helped: ReplayStore, unhelped: ReplayStore) -> bool:
    """Switch off ``unhelped``'s helper for one env's new frames where ``helped`` (a store like it) has one;
    False where it has none. The setting is the writer's private ``_continuing.ahead_threads`` since
    0f306cb and ``_ahead_threads`` before: adds_box.sh runs this script with older trees' packages too."""
    def owner(store: ReplayStore) -> tuple[object, str]:
        writer = store._role
        continuing = getattr(writer, "_continuing", None)
        return (writer, "_ahead_threads") if continuing is None else (continuing, "ahead_threads")

    source, name = owner(helped)
    if getattr(source, name) <= 1:
        return False
    setattr(*owner(unhelped), 1)
    return True


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
                    "1 env, stacks, Python scalars, no helper": (SingleEnv(stream), 1),
                    f"{args.envs} envs, stacks, numpy arrays": (VectorEnvs(stream, args.envs), args.envs),
                }.items()):
                    stores[encoding, name] = ReplayStore.create(
                        Path(tmp) / f"{e}-{k}.mmr", frame_shape=stream.frames.shape[1:], capacity=args.capacity,
                        stack_size=STACK, num_envs=envs, frame_encoding=create_encoding(encoding))
                    forms[encoding, name] = (feed, envs)
                helped, unhelped = (encoding, "1 env, stacks, Python scalars"), (encoding, "1 env, stacks, Python scalars, no helper")
                if not switch_helper_off(stores[helped], stores[unhelped]):
                    # no helper to switch off (under 2 or 4 usable cores): the form would repeat the first
                    stores.pop(unhelped).close()
                    forms.pop(unhelped)
            rates: dict[tuple[str, str], list[tuple[float, float]]] = {key: [] for key in forms}
            for turn in range(max(1, args.adds // args.block)):
                order = list(forms) if turn % 2 == 0 else list(reversed(forms))
                for key in order:
                    feed, envs = forms[key]
                    rates[key].append(measure(stores[key], feed, max(1, args.block // envs)))
            written = {key: store.frame_encoding for key, store in stores.items()}
            aheads = {key: ahead_counts(store) for key, store in stores.items()}
            for store in stores.values():
                store.close()
        for (encoding, name), blocks in rates.items():
            wall, cpu = statistics.median(b[0] for b in blocks), statistics.median(b[1] for b in blocks)
            stored = written[encoding, name]
            print(f"| {game} | {stored} | {name} | {wall:,.0f} | {cpu:,.0f} |", flush=True)
            counts = aheads[encoding, name]
            if counts is not None:
                print(f"|   | {stored} | ahead: {counts} |  |  |", flush=True)
            if args.json:
                print(json.dumps({"figure": "adds", "game": game, "encoding": stored, "form": name,
                                  "transitions_s": round(wall), "cpu_transitions_s": round(cpu),
                                  "ahead": counts}), flush=True)


if __name__ == "__main__":
    main()
