"""Plain lz4 against reference frames, paired, per game (issues 28 and 41): bytes per transition, add and sample rates.

For each game, two stores of the same real frame stream (``frame_streams.py``: 20,000 recorded frames,
replayed cyclically), capacity ``--capacity`` (100,000), stack 4, one env, ``frame_encoding="lz4"`` and
``"lz4-reference"``, alive in the same process at once:

- add: both fill to capacity in chunks of ``--chunk`` transitions taken in turns, A B B A in one round
  and B A A B in the next (a drift of the shared VM's speed within a round weighs on both alike), one env
  adding 4-frame stacks with Python ``int``/``float``/``bool`` scalars (what CleanRL and SB3 pass); each
  pair of chunks gives one ratio, reference's transitions/s over plain's; the same with 8 envs (one vector
  add per env step, numpy arrays) on stores of ``--capacity`` as well;
- bytes on disk per transition of the full one-env stores (``bytes_on_disk / len``);
- sample: for each batch size of ``--batches`` (32 and 256), ``--rounds`` rounds of ``--window``-second
  windows of ``sample(batch)``, A B B A / B A A B; one ratio per round;
- encoded: a third as many rounds of ``sample_encoded(32)`` (the first of ``--batches``) and its ``decode()`` (a Ray shard's
  answer and its learner's decode), paired the same way, and the encoded batches' mean bytes;
- beside them, with ``--dopamine-python`` (a Python with ``dopamine-rl``, e.g. a scratch venv under /tmp:
  ``python3 -m venv /tmp/dopa && /tmp/dopa/bin/pip install tensorflow-cpu gin-config absl-py &&
  /tmp/dopa/bin/pip install --no-deps dopamine-rl``), Dopamine's own ``OutOfGraphReplayBuffer`` of the
  same capacity fed the same stream and saved: its checkpoint's bytes per transition (gzip'd arrays; a
  checkpoint cannot be sampled).

Medians of the ratios with their quartiles; ``--json`` writes one JSON line per game. Every sampled batch
of the first and last window is checked against the stream (``MmreplayAdapter.verify``). To pair this tree
against another (the same script run by each tree's package in turn), ``lab/pair_trees.py``.

    python benchmarks/bench_encodings.py                                  # ~8 minutes on 2 busy cores
    python benchmarks/bench_encodings.py --games pong --capacity 20000 --rounds 5 --batches 32   # ~30 s
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frame_streams import add_data_dir_argument, stream_path
from machine import load_average
from mmreplay_adapters import MmreplayAdapter, MmreplayVectorAdapter
from peers import FrameStream
from timing import batches_per_second

ENCODINGS = ("lz4", "lz4-reference")
# format 6's bounds: bytes on disk per transition, and reference frames' rates against plain lz4's
TARGETS = {"pong": 130, "breakout": 135, "mspacman": 330, "seaquest": 280}
RATE_TARGETS = {"add_1_env": 0.85, "add_8_envs": 0.9}


def quartiles(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        return {"median": values[0], "q1": values[0], "q3": values[0]}
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": median, "q1": q1, "q3": q3}


def paired_fill(adapters: dict[str, Any], capacity: int, chunk: int) -> dict[str, Any]:
    """Fill every adapter to ``capacity`` transitions in turns; rates per encoding and ratios per pair."""
    adds = {name: -(-capacity // adapter.transitions_per_add) for name, adapter in adapters.items()}
    done = dict.fromkeys(adapters, 0)
    rates: dict[str, list[float]] = {name: [] for name in adapters}
    round_index = 0
    while any(done[name] < adds[name] for name in adapters):
        order = list(ENCODINGS) if round_index % 2 == 0 else list(reversed(ENCODINGS))
        for name in [*order, *reversed(order)]:
            adapter, count = adapters[name], min(chunk // 2, adds[name] - done[name])
            if count <= 0:
                continue
            inputs = [adapter.inputs(done[name] + i) for i in range(count)]  # built before the clock starts
            start = time.perf_counter()
            for args in inputs:
                adapter.add(*args)
            rates[name].append(count * adapter.transitions_per_add / (time.perf_counter() - start))
            done[name] += count
        round_index += 1
    for adapter in adapters.values():
        adapter.flush()
    pairs = min(len(values) for values in rates.values())
    # chunks 2k and 2k + 1 of each encoding ran in the same round, side by side with the other's
    ratios = [rates["lz4-reference"][i] / rates["lz4"][i] for i in range(pairs)]
    return {
        "per_s": {name: statistics.median(values) for name, values in rates.items()},
        "ratio": quartiles(ratios),
        "pairs": pairs,
    }


def paired_sample(adapters: dict[str, Any], batch: int, rounds: int, window: float) -> dict[str, Any]:
    """``sample(batch)`` batches/s of each adapter, in alternating windows; ratios per round."""
    return paired_calls({name: (lambda adapter=adapter: adapter.sample(batch)) for name, adapter in adapters.items()},
                        rounds, window)


def paired_encoded(adapters: dict[str, Any], batch: int, rounds: int, window: float) -> dict[str, Any]:
    """An encoded batch's round trip, ``sample_encoded(batch)`` then its ``decode()`` (what a Ray shard
    and its learner do), per second, as ``paired_sample``; and the encoded batches' mean bytes."""
    def round_trip(adapter: Any) -> Any:
        return lambda: adapter.store.sample_encoded(batch, rng=adapter.rng).decode()

    result = paired_calls({name: round_trip(adapter) for name, adapter in adapters.items()}, rounds, window)
    result["nbytes"] = {name: statistics.mean(adapter.store.sample_encoded(batch, rng=seed).nbytes for seed in range(20))
                        for name, adapter in adapters.items()}
    return result


def paired_calls(calls: dict[str, Any], rounds: int, window: float) -> dict[str, Any]:
    ratios, rates = [], {name: [] for name in calls}
    for round_index in range(rounds):
        order = list(ENCODINGS) if round_index % 2 == 0 else list(reversed(ENCODINGS))
        got: dict[str, list[float]] = {name: [] for name in calls}
        for name in [*order, *reversed(order)]:
            got[name].append(batches_per_second(calls[name], window, warmup=0.05))
        for name in calls:
            rates[name].append(statistics.mean(got[name]))
        ratios.append(rates["lz4-reference"][-1] / rates["lz4"][-1])
    return {
        "per_s": {name: statistics.median(values) for name, values in rates.items()},
        "ratio": quartiles(ratios),
        "rounds": rounds,
    }


DOPAMINE_WRITER = r"""
import json, os, sys, tempfile
import numpy as np
from dopamine.tf.replay_memory.circular_replay_buffer import OutOfGraphReplayBuffer
path, capacity = sys.argv[1], int(sys.argv[2])
with np.load(path) as data:
    frames, action = data["frames"], data["action"].astype(np.int64)
    start = data["episode_start"].astype(bool)
    reward = data["reward"].astype(np.float32)
    terminated = data["terminated"].astype(bool)
buffer = OutOfGraphReplayBuffer((84, 84), 4, capacity, 32, update_horizon=1, checkpoint_duration=1)
# Dopamine's add takes an observation and the action taken from it: a frame with an action (the stream's
# transitions), cyclically, each episode's last transition terminal, as its agents record them.
steps = np.flatnonzero(action[:-1] >= 0)
added = 0
while added < capacity:
    for t in steps:
        last = bool(start[t + 1]) or action[t + 1] < 0
        buffer.add(frames[t], int(action[t]), float(reward[t]), int(bool(terminated[t]) or last))
        added += 1
        if added == capacity:
            break
folder = tempfile.mkdtemp(prefix="dopamine-size-")
buffer.save(folder, 0)
size = sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder))
print(json.dumps({"checkpoint_bytes": size, "transitions": added, "files": sorted(os.listdir(folder))}))
for name in os.listdir(folder):
    os.unlink(os.path.join(folder, name))
os.rmdir(folder)
"""


def dopamine_bytes(python: str, path: Path, capacity: int, timeout: float) -> dict[str, Any]:
    """Dopamine's checkpoint of ``capacity`` transitions of the stream at ``path``: its bytes per transition."""
    done = subprocess.run([python, "-c", DOPAMINE_WRITER, str(path), str(capacity)], capture_output=True,
                          text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["bytes_per_transition"] = result["checkpoint_bytes"] / result["transitions"]
    return result


def scheme_of(encoding: str, args: argparse.Namespace) -> object:
    """The reference store's ``reference_scheme`` (``--scheme``; None: the store's default), None for plain."""
    if encoding == "lz4" or args.scheme is None:
        return None
    from mmreplay import ReferenceScheme

    group_size, branching = args.scheme
    return ReferenceScheme(group_size=group_size, branching=branching)


def scheme_argument(text: str) -> tuple[int, int]:
    """``--scheme GROUP_SIZE,BRANCHING``: two positive ints, such as ``256,2``."""
    group_size, comma, branching = text.partition(",")
    if not comma or not group_size.strip().isdigit() or not branching.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected GROUP_SIZE,BRANCHING, two ints such as 256,2; got {text!r}")
    return int(group_size), int(branching)


def run_game(game: str, args: argparse.Namespace) -> dict[str, Any]:
    path = stream_path(game, args.data_dir)
    stream = FrameStream.load(path)
    result: dict[str, Any] = {"game": game, "capacity": args.capacity, "stream_frames": len(stream.frames),
                              "batches": args.batches, "load_before": load_average()}
    with tempfile.TemporaryDirectory(prefix="bench-encodings-", dir=args.tmpdir) as tmpdir:
        one = {name: MmreplayAdapter(stream, args.capacity, args.seed, tmpdir=tmpdir, frame_encoding=name,
                                     reference_scheme=scheme_of(name, args))
               for name in ENCODINGS}
        scheme = one["lz4-reference"].store.reference_scheme
        result["scheme"] = {"group_size": scheme.group_size, "branching": scheme.branching}
        try:
            result["add_1_env"] = paired_fill(one, args.capacity, args.chunk)
            result["bytes_per_transition"] = {name: a.bytes_per_transition() for name, a in one.items()}
            bad = sum(adapter.verify(args.batches[0], 3) for adapter in one.values())
            for batch in args.batches:
                result[f"sample_{batch}"] = paired_sample(one, batch, args.rounds, args.window)
            result["encoded"] = paired_encoded(one, args.batches[0], max(3, args.rounds // 3), args.window)
            bad += sum(adapter.verify(args.batches[0], 3) for adapter in one.values())
            result["mismatched_transitions"] = bad
        finally:
            for adapter in one.values():
                adapter.close()
        if args.envs > 1:
            vector = {name: MmreplayVectorAdapter(stream, args.capacity, args.seed, tmpdir=tmpdir, num_envs=args.envs,
                                                  frame_encoding=name, reference_scheme=scheme_of(name, args))
                      for name in ENCODINGS}
            try:
                result[f"add_{args.envs}_envs"] = paired_fill(vector, args.capacity, args.chunk // args.envs)
                result[f"bytes_per_transition_{args.envs}_envs"] = {
                    name: a.bytes_per_transition() for name, a in vector.items()}
            finally:
                for adapter in vector.values():
                    adapter.close()
    if args.dopamine_python:
        result["dopamine"] = dopamine_bytes(args.dopamine_python, path, args.capacity, args.dopamine_timeout)
    result["load_after"] = load_average()
    return result


def report(result: dict[str, Any]) -> str:
    b = result["bytes_per_transition"]
    dopamine = result.get("dopamine", {}).get("bytes_per_transition")
    scheme = result["scheme"]
    lines = [f"{result['game']}: bytes/transition plain {b['lz4']:.0f}, reference {b['lz4-reference']:.0f}"
             f" (scheme: groups of {scheme['group_size']}, branching {scheme['branching']})"
             f" (target <= {TARGETS.get(result['game'], '-')})"
             + (f", Dopamine's checkpoint {dopamine:.0f}" if dopamine else "")]
    for key in [k for k in result if k.startswith(("add_", "sample_"))] + ["encoded"]:
        if key not in result:
            continue
        part = result[key]
        r = part["ratio"]
        target = RATE_TARGETS.get(key)
        lines.append(f"  {key}: plain {part['per_s']['lz4']:,.0f}/s, reference {part['per_s']['lz4-reference']:,.0f}/s,"
                     f" ratio {r['median']:.2f}x [{r['q1']:.2f}, {r['q3']:.2f}]"
                     + (f" ({'meets' if r['median'] >= target else 'below'} {target}x)" if target else ""))
    if "encoded" in result:
        n = result["encoded"]["nbytes"]
        lines.append(f"  encoded batch bytes: plain {n['lz4']:,.0f}, reference {n['lz4-reference']:,.0f}")
    lines.append(f"  mismatched transitions: {result['mismatched_transitions']}; load {result['load_before']} -> "
                 f"{result['load_after']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", nargs="+", default=["pong", "breakout", "mspacman", "seaquest"])
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=2_000, help="transitions per pair of add chunks")
    parser.add_argument("--envs", type=int, default=8, help="envs of the vector-add pairing (1: skip it)")
    parser.add_argument("--batches", type=lambda text: [int(b) for b in text.split(",")], default=[32, 256],
                        help="the sampled batch sizes, comma-separated (the first also for encoded batches)")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--window", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scheme", type=scheme_argument, help="the reference store's scheme as GROUP_SIZE,BRANCHING "
                        "(default: the store's default scheme)")
    parser.add_argument("--tmpdir")
    parser.add_argument("--dopamine-python", help="a Python with dopamine-rl: Dopamine's checkpoint size beside")
    parser.add_argument("--dopamine-timeout", type=float, default=300.0)
    parser.add_argument("--json", type=Path, help="append one JSON line per game to this file")
    add_data_dir_argument(parser)
    args = parser.parse_args(argv)
    np.seterr(all="ignore")
    for game in args.games:
        result = run_game(game, args)
        print(report(result), flush=True)
        if args.json:
            with args.json.open("a") as file:
                file.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
