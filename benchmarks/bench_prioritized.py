"""Two questions about prioritized replay and sequences, answered in one run:

1. Prioritized replay: how many ``sample(32)`` + ``update_priorities(32)`` operations per second does
   mmreplay do, against cpprb's ``PrioritizedReplayBuffer`` (a C++ segment tree), measured in the same
   run? At capacity 1,000,000 with tiny (1x1) frames, so that the sampler dominates, and at 100,000 with
   real 84x84 Pong frames (stacks of 4).
2. Sequences for recurrent agents: ``sample_sequences(32, 80)`` (stack 1) frames/s against uniform
   ``sample(32)`` frames/s on real Pong frames. A frame here is one delivered obs frame: each valid
   (mask True) transition of a window counts ``stack_size`` frames, each sampled transition as many.

The prioritized buffers are measured in the same process, both alive, in alternating windows of
``--seconds`` (``--repeats`` windows each, the first of each pair alternating), so that a busy machine
slows both alike: each figure is the median of its windows, in operations per wall-clock second and per
CPU second of the measuring thread (both are single-threaded; on a machine shared with other jobs the
CPU figure is the steadier), and the ratio is the median of the windows' ratios. Sequences: the median
over ``--repeats`` timed runs of ``--seconds`` each (after an untimed warm-up). ``--json`` adds one JSON
line per figure on stdout.

    .venv/bin/python benchmarks/bench_prioritized.py                 # ~3 minutes on 2 cores
    .venv/bin/python benchmarks/bench_prioritized.py --repeats 3 --seconds 1
    .venv/bin/python benchmarks/bench_prioritized.py --no-pong                 # the sampler alone, ~1 minute
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mmreplay import PrioritizedSampler, ReplayStore, UniformSampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frame_streams import add_data_dir_argument, stream_path  # noqa: E402

BATCH = 32


def rate(operation: Callable[[], int], *, seconds: float, repeats: int) -> float:
    """Median over ``repeats`` of units/s, where ``operation`` returns the units it did."""
    deadline = time.perf_counter() + min(0.25, seconds)
    while time.perf_counter() < deadline:  # warm-up: caches, page faults
        operation()
    rates = []
    for _ in range(repeats):
        units, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            units += operation()
        rates.append(units / elapsed)
    return statistics.median(rates)


# -- stores ----------------------------------------------------------------------------------------


def fill_tiny(store: ReplayStore, count: int) -> None:
    """``count`` transitions of 1x1 frames from ``store.num_envs`` envs, each in one long episode."""
    envs = store.num_envs
    base = np.zeros((envs, 1, 1), np.uint8)
    zeros, flags = np.zeros(envs, np.int64), np.zeros(envs, bool)
    for i in range(count // envs):
        store.add(base + i % 200, zeros, zeros.astype(np.float32), base + (i + 1) % 200, flags, flags)


def pong_transitions(path: Path) -> dict[str, np.ndarray]:
    stream = np.load(path)
    frames, action = stream["frames"], stream["action"]
    t = np.flatnonzero(action >= 0)
    return {
        "frames": frames,
        "t": t,
        "action": action[t].astype(np.int64),
        "reward": stream["reward"][t].astype(np.float32),
        "terminated": stream["terminated"][t],
        "truncated": stream["truncated"][t],
    }


def fill_pong(store: ReplayStore, pong: dict[str, np.ndarray], count: int) -> None:
    """The Pong stream's transitions, fed cyclically, one add per env step (single frames)."""
    frames, t = pong["frames"], pong["t"]
    n = len(t)
    for i in range(count):
        j = i % n
        store.add(frames[t[j]], pong["action"][j], pong["reward"][j], frames[t[j] + 1],
                  pong["terminated"][j], pong["truncated"][j])


# -- prioritized: mmreplay and cpprb ---------------------------------------------------------------


def mmreplay_per_op(store: ReplayStore, seed: int) -> Callable[[], int]:
    rng = np.random.default_rng(seed)

    def op() -> int:
        batch = store.sample(BATCH, rng, beta=0.4)
        store.update_priorities(batch.index, rng.random(BATCH) + 0.01)
        return 1

    return op


def cpprb_per(capacity: int, frame_shape: tuple[int, ...], stack: int, fill: Callable[[object], None]):
    import cpprb

    shape = (stack, *frame_shape) if stack > 1 else frame_shape
    env_dict = {"obs": {"shape": shape, "dtype": np.uint8}, "act": {"dtype": np.int64},
                "rew": {}, "done": {}}
    kwargs = {"next_of": "obs"}
    if stack > 1:
        kwargs["stack_compress"] = "obs"
    buffer = cpprb.PrioritizedReplayBuffer(capacity, env_dict, alpha=0.6, eps=1e-6, **kwargs)
    fill(buffer)
    return buffer


def cpprb_per_op(buffer, seed: int) -> Callable[[], int]:
    np.random.seed(seed)  # cpprb samples with numpy's global generator
    rng = np.random.default_rng(seed)

    def op() -> int:
        sample = buffer.sample(BATCH, beta=0.4)
        buffer.update_priorities(sample["indexes"], rng.random(BATCH) + 0.01)
        return 1

    return op


def fill_cpprb_tiny(buffer, count: int) -> None:
    chunk = 10_000
    for lo in range(0, count, chunk):
        i = np.arange(lo, lo + chunk)
        buffer.add(obs=(i % 200).astype(np.uint8).reshape(-1, 1, 1),
                   next_obs=((i + 1) % 200).astype(np.uint8).reshape(-1, 1, 1),
                   act=np.zeros(chunk, np.int64), rew=np.zeros(chunk, np.float32), done=np.zeros(chunk))


def fill_cpprb_pong(buffer, pong: dict[str, np.ndarray], count: int, stack: int) -> None:
    """Stacks of ``stack`` frames (repeating an episode's first frame), consecutive steps per add call
    as stack_compress requires; ``on_episode_end`` at every episode end."""
    frames, t = pong["frames"], pong["t"]
    n = len(t)
    starts = np.zeros(len(frames), bool)
    starts[t] = False
    first = np.zeros(len(frames), np.int64)
    episode_first = 0
    for k in range(len(frames)):  # an episode's first frame: a frame with no transition into it
        if k == 0 or not np.any(t == k - 1):
            episode_first = k
        first[k] = episode_first
    offsets = np.arange(-stack + 1, 1)

    def stacks(frame_index: np.ndarray) -> np.ndarray:
        window = np.maximum(frame_index[:, None] + offsets, first[frame_index][:, None])
        return frames[window]

    ends = pong["terminated"] | pong["truncated"] | np.append(t[1:] != t[:-1] + 1, True)
    added, j = 0, 0
    while added < count:
        k = j
        while k < n - 1 and not ends[k] and k - j < 999:
            k += 1
        rows = np.arange(j, k + 1)[: count - added]
        buffer.add(obs=stacks(t[rows]), next_obs=stacks(t[rows] + 1), act=pong["action"][rows],
                   rew=pong["reward"][rows], done=pong["terminated"][rows].astype(np.float32))
        added += len(rows)
        if ends[rows[-1]]:
            buffer.on_episode_end()
        j = (rows[-1] + 1) % n


# -- the two questions -----------------------------------------------------------------------------


def paired_rates(first: Callable[[], int], second: Callable[[], int], *, seconds: float,
                 repeats: int) -> dict[str, float]:
    """Operations/s of two operations in alternating windows (the first of each pair alternating): the
    median wall-clock and thread-CPU rate of each, and the medians of the windows' ratios first/second."""
    def window(operation: Callable[[], int]) -> tuple[float, float]:
        units, wall, cpu = 0, time.perf_counter(), time.thread_time()
        while time.perf_counter() - wall < seconds:
            for _ in range(20):
                units += operation()
        return units / (time.perf_counter() - wall), units / max(time.thread_time() - cpu, 1e-9)

    for operation in (first, second):  # warm-up: caches, page faults
        window(operation)
    rows: list[tuple[float, float, float, float]] = []
    for round_ in range(repeats):
        if round_ % 2 == 0:
            a, b = window(first), window(second)
        else:
            b, a = window(second), window(first)
        rows.append((*a, *b))
    wall_a, cpu_a, wall_b, cpu_b = (statistics.median(column) for column in zip(*rows))
    return {"first_wall": wall_a, "first_cpu": cpu_a, "second_wall": wall_b, "second_cpu": cpu_b,
            "ratio_wall": statistics.median(r[0] / r[2] for r in rows),
            "ratio_cpu": statistics.median(r[1] / r[3] for r in rows)}


def prioritized_rows(args: argparse.Namespace, pong: dict[str, np.ndarray] | None) -> list[tuple[str, dict[str, float]]]:
    rows = []
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
        started = time.perf_counter()
        store = ReplayStore.create(Path(tmp) / "tiny.mmr", frame_shape=(1, 1), capacity=args.capacity,
                                   stack_size=1, num_envs=256, sampler=PrioritizedSampler())
        fill_tiny(store, args.capacity)
        print(f"filled mmreplay, 1x1 frames, {len(store):,} transitions in {time.perf_counter() - started:.0f} s",
              file=sys.stderr)
        buffer = cpprb_per(args.capacity, (1, 1), 1, lambda b: fill_cpprb_tiny(b, args.capacity))
        figures = paired_rates(mmreplay_per_op(store, 0), cpprb_per_op(buffer, 0), seconds=args.seconds,
                               repeats=args.repeats)
        del buffer
        store.close()
    rows.append((f"1x1 frames, capacity {args.capacity:,}", figures))
    if pong is not None:
        with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
            started = time.perf_counter()
            store = ReplayStore.create(Path(tmp) / "pong.mmr", frame_shape=(84, 84), capacity=args.pong_capacity,
                                       stack_size=4, sampler=PrioritizedSampler())
            fill_pong(store, pong, args.pong_capacity)
            print(f"filled mmreplay, Pong, {len(store):,} transitions in {time.perf_counter() - started:.0f} s",
                  file=sys.stderr)
            buffer = cpprb_per(args.pong_capacity, (84, 84), 4,
                               lambda b: fill_cpprb_pong(b, pong, args.pong_capacity, 4))
            figures = paired_rates(mmreplay_per_op(store, 1), cpprb_per_op(buffer, 1), seconds=args.seconds,
                                   repeats=args.repeats)
            del buffer
            store.close()
        rows.append((f"Pong 84x84 stack 4, capacity {args.pong_capacity:,}", figures))
    return rows


def sequence_rows(args: argparse.Namespace, pong: dict[str, np.ndarray]) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
        store = ReplayStore.create(Path(tmp) / "seq.mmr", frame_shape=(84, 84), capacity=args.pong_capacity,
                                   stack_size=1, sampler=UniformSampler())
        fill_pong(store, pong, args.pong_capacity)
        rng = np.random.default_rng(2)
        valid = []

        def sequences() -> int:
            batch = store.sample_sequences(BATCH, args.length, rng)
            count = int(batch.mask.sum())
            valid.append(count / batch.mask.size)
            return count * store.stack_size

        def uniform() -> int:
            store.sample(BATCH, rng)
            return BATCH * store.stack_size

        seq = rate(sequences, seconds=args.seconds, repeats=args.repeats)
        uni = rate(uniform, seconds=args.seconds, repeats=args.repeats)
        store.close()
    return seq, uni, float(np.mean(valid))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacity", type=int, default=1_000_000, help="tiny-frame prioritized stores")
    parser.add_argument("--pong-capacity", type=int, default=100_000, help="real-frame stores")
    parser.add_argument("--length", type=int, default=80, help="sequence length")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0, help="per timed run")
    add_data_dir_argument(parser)
    parser.add_argument("--tmpdir", default=None, help="where stores live while measured (on disk)")
    parser.add_argument("--no-pong", action="store_true", help="skip the real-frame measurements")
    parser.add_argument("--no-sequences", action="store_true", help="skip question 2 (sequences)")
    parser.add_argument("--json", action="store_true", help="also print one JSON line per figure")
    args = parser.parse_args(argv)
    pong = None
    if not args.no_pong:
        pong = pong_transitions(stream_path("pong", args.data_dir))

    print(f"\nPrioritized sample({BATCH}) + update_priorities({BATCH}), operations/s (median of {args.repeats} "
          f"alternating windows of {args.seconds:g} s each, alpha 0.6, beta 0.4; wall-clock / thread CPU)\n")
    print("| store | mmreplay | cpprb PrioritizedReplayBuffer | mmreplay / cpprb |")
    print("|---|---:|---:|---:|")
    for name, f in prioritized_rows(args, pong):
        print(f"| {name} | {f['first_wall']:,.0f} / {f['first_cpu']:,.0f} | {f['second_wall']:,.0f} / "
              f"{f['second_cpu']:,.0f} | {f['ratio_wall']:.2f}x / {f['ratio_cpu']:.2f}x |", flush=True)
        if args.json:
            print(json.dumps({"figure": "prioritized", "store": name, "mmreplay_ops_s": round(f["first_wall"]),
                              "cpprb_ops_s": round(f["second_wall"]), "ratio": round(f["ratio_wall"], 3),
                              "mmreplay_cpu_ops_s": round(f["first_cpu"]), "cpprb_cpu_ops_s": round(f["second_cpu"]),
                              "ratio_cpu": round(f["ratio_cpu"], 3)}), flush=True)
    if pong is not None and not args.no_sequences:
        seq, uni, valid = sequence_rows(args, pong)
        print(f"\nSequences vs uniform on Pong frames, stack 1, capacity {args.pong_capacity:,}, "
              f"delivered obs frames/s (median of {args.repeats} x {args.seconds:g} s)\n")
        print("| sampling | frames/s |")
        print("|---|---:|")
        print(f"| sample_sequences({BATCH}, {args.length}) ({valid:.1%} of window steps valid) | {seq:,.0f} |")
        print(f"| sample({BATCH}) uniform | {uni:,.0f} |")
        print(f"| ratio sequences / uniform | {seq / uni:.2f}x |")


if __name__ == "__main__":
    main()
