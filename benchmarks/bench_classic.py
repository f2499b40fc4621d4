"""The classic replay-buffer benchmark, on CartPole-v1: a deque, a numpy buffer, SB3 and mmreplay.

Where people learn replay buffers, the buffer is a ``collections.deque`` of namedtuples sampled with
``random.sample``, or a set of numpy arrays, and the benchmark that decides between them inserts
2,000,000 CartPole transitions into a buffer of 1,000,000 and samples 10,000 batches of 50. This
script runs that benchmark with four buffers in the same run:

* ``deque``: ``deque(maxlen=capacity)`` of ``Transition(obs, action, reward, next_obs, done)``
  namedtuples; a batch is ``random.sample(buffer, 50)`` turned into five numpy arrays.
* ``numpy``: five preallocated arrays written at a cursor; a batch is one fancy index per array.
* ``sb3``: Stable-Baselines3's ``ReplayBuffer`` (``Box((4,), float32)``, ``Discrete(2)``, CPU); a batch
  is its ``ReplayBufferSamples`` of torch tensors.
* ``mmreplay``: ``ReplayStore.create(frame_shape=(4,), frame_dtype=np.float32, stack_size=1)`` on disk;
  a batch is ``store.sample(50, rng=rng)`` (numpy arrays).

The transitions are real env steps, recorded once (gymnasium ``CartPole-v1``, a seeded uniform random
policy, reset at each termination or truncation) and replayed to every buffer: each buffer gets what a
training loop hands it (obs and next_obs as float32 (4,) arrays, the action as the ``np.int64`` that
``action_space.sample()`` returns, the reward as a float, the flags as bools), and a new array for
every next_obs, as an env makes one per step. Each buffer runs in its own process: insertion of
``--transitions`` into ``--capacity`` (transitions/s, timed as one loop), then ``--repeats`` rounds of
``--batches`` batches of ``--batch-size`` (batches/s, the median round; the deque, at ~50 batches/s
for 1,000,000 transitions, runs ``--deque-repeats``), RSS growth (VmRSS from just
before the buffer is made to after insertion; file-backed pages of mmreplay's maps count here too)
and bytes on disk. For mmreplay it then profiles insertion on a fresh store (``--profile-transitions``):
the share of add spent in validation, frame compression, checksums and the rest.

    .venv/bin/python benchmarks/bench_classic.py                       # 2,000,000 into 1,000,000
    .venv/bin/python benchmarks/bench_classic.py --transitions 200000 --capacity 100000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque, namedtuple
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import load_average, proc_field

BUFFERS = ("deque", "numpy", "sb3", "mmreplay")
Transition = namedtuple("Transition", ["obs", "action", "reward", "next_obs", "done"])
SAMPLE_TARGET_VS_DEQUE = 10.0  # the classic benchmark's target: mmreplay samples >= 10x the deque's batches/s
SAMPLE_TARGET_VS_NUMPY = 0.5  # ... and >= 0.5x the numpy buffer's, in the same run


# -- the transitions -------------------------------------------------------------------------------


def record(path: Path, transitions: int, seed: int) -> float:
    """Play CartPole-v1 with a seeded random policy for ``transitions`` env steps and save them to
    ``path`` (.npz); returns the seconds it took."""
    import gymnasium as gym

    start = time.perf_counter()
    env = gym.make("CartPole-v1")
    env.action_space.seed(seed)
    obs_rows = np.empty((transitions, 4), np.float32)
    next_rows = np.empty((transitions, 4), np.float32)
    actions = np.empty(transitions, np.int64)
    rewards = np.empty(transitions, np.float32)
    terminated = np.empty(transitions, bool)
    truncated = np.empty(transitions, bool)
    obs, _ = env.reset(seed=seed)
    for i in range(transitions):
        action = env.action_space.sample()
        next_obs, reward, ended, cut, _ = env.step(action)
        obs_rows[i], next_rows[i], actions[i], rewards[i], terminated[i], truncated[i] = (
            obs, next_obs, action, reward, ended, cut)
        obs = env.reset()[0] if ended or cut else next_obs
    np.savez(path, obs=obs_rows, next_obs=next_rows, action=actions, reward=rewards,
             terminated=terminated, truncated=truncated)
    return time.perf_counter() - start


class Feed:
    """The recorded transitions as a training loop's values: numpy int64 actions (what Discrete.sample()
    returns) and Python floats and bools, converted once, before any buffer's memory is measured (a
    list of 2,000,000 numpy scalars alone takes ~60 MiB)."""

    def __init__(self, data: dict[str, np.ndarray]) -> None:
        self.obs_rows, self.next_rows = data["obs"], data["next_obs"]
        self.actions = [np.int64(a) for a in data["action"].tolist()]
        self.rewards = data["reward"].tolist()
        self.terminated, self.truncated = data["terminated"].tolist(), data["truncated"].tolist()


def replay(feed: Feed) -> Any:
    """Yield each transition as a training loop has it: (obs, action, reward, next_obs, terminated,
    truncated), a new next_obs array each step and obs the previous next_obs within an episode."""
    obs_rows, next_rows, actions, rewards = feed.obs_rows, feed.next_rows, feed.actions, feed.rewards
    terminated, truncated = feed.terminated, feed.truncated
    obs = obs_rows[0].copy()
    for i in range(len(actions)):
        next_obs = next_rows[i].copy()
        yield obs, actions[i], rewards[i], next_obs, terminated[i], truncated[i]
        obs = obs_rows[i + 1].copy() if (terminated[i] or truncated[i]) and i + 1 < len(actions) else next_obs


# -- the buffers -----------------------------------------------------------------------------------


class DequeBuffer:
    """The textbook buffer: a deque of namedtuples, ``random.sample`` for a batch."""

    def __init__(self, capacity: int, seed: int, _: Path) -> None:
        self.buffer: deque[Transition] = deque(maxlen=capacity)
        self.random = random.Random(seed)

    def add(self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: bool, truncated: bool) -> None:
        self.buffer.append(Transition(obs, action, reward, next_obs, terminated))

    def sample(self, batch_size: int) -> Any:
        obs, action, reward, next_obs, done = zip(*self.random.sample(self.buffer, batch_size))
        return (np.array(obs), np.array(action), np.array(reward, np.float32), np.array(next_obs),
                np.array(done))

    def bytes_on_disk(self) -> int:
        return 0

    def close(self) -> None:
        pass


class NumpyBuffer:
    """Five preallocated arrays written at a cursor; a batch is one fancy index per array."""

    def __init__(self, capacity: int, seed: int, _: Path) -> None:
        self.obs = np.zeros((capacity, 4), np.float32)
        self.next_obs = np.zeros((capacity, 4), np.float32)
        self.action = np.zeros(capacity, np.int64)
        self.reward = np.zeros(capacity, np.float32)
        self.done = np.zeros(capacity, bool)
        self.capacity, self.cursor, self.size = capacity, 0, 0
        self.rng = np.random.default_rng(seed)

    def add(self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: bool, truncated: bool) -> None:
        i = self.cursor
        self.obs[i], self.action[i], self.reward[i], self.next_obs[i], self.done[i] = (
            obs, action, reward, next_obs, terminated)
        self.cursor = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int) -> Any:
        index = self.rng.integers(0, self.size, batch_size)
        return self.obs[index], self.action[index], self.reward[index], self.next_obs[index], self.done[index]

    def bytes_on_disk(self) -> int:
        return 0

    def close(self) -> None:
        pass


class SB3Buffer:
    """Stable-Baselines3's ReplayBuffer, fed as its off-policy algorithms feed it (one env)."""

    def __init__(self, capacity: int, seed: int, _: Path) -> None:
        from gymnasium import spaces
        from stable_baselines3.common.buffers import ReplayBuffer

        np.random.seed(seed)  # SB3 samples with np.random
        self.buffer = ReplayBuffer(capacity, spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(2),
                                   device="cpu", handle_timeout_termination=True)

    def add(self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: bool, truncated: bool) -> None:
        self.buffer.add(obs[None], next_obs[None], np.array([action]), np.array([reward]),
                        np.array([terminated or truncated]), [{"TimeLimit.truncated": truncated}])

    def sample(self, batch_size: int) -> Any:
        return self.buffer.sample(batch_size)

    def bytes_on_disk(self) -> int:
        return 0

    def close(self) -> None:
        pass


class MmreplayBuffer:
    """A ReplayStore of float32 (4,) frames, one frame per obs, on disk."""

    def __init__(self, capacity: int, seed: int, directory: Path) -> None:
        from mmreplay import ReplayStore

        self.store = ReplayStore.create(directory / "cartpole.mmr", frame_shape=(4,), capacity=capacity,
                                        stack_size=1, frame_dtype=np.float32, action_dtype=np.int64)
        self.rng = np.random.default_rng(seed)
        self.add = self.store.add  # what a training loop calls

    def sample(self, batch_size: int) -> Any:
        return self.store.sample(batch_size, rng=self.rng)

    def bytes_on_disk(self) -> int:
        self.store.flush()
        return self.store.bytes_on_disk

    def close(self) -> None:
        self.store.close()


MAKERS = {"deque": DequeBuffer, "numpy": NumpyBuffer, "sb3": SB3Buffer, "mmreplay": MmreplayBuffer}


# -- one buffer, in its own process ----------------------------------------------------------------


def vm_rss() -> int:
    return proc_field("/proc/self/status", "VmRSS:")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Insert, sample, measure memory and disk for ``args.worker``; mmreplay also profiles its adds."""
    with np.load(args.data) as archive:
        data = {name: archive[name][: args.transitions] for name in archive.files}
    if args.worker == "sb3":
        import stable_baselines3  # noqa: F401  (imports are not the buffer's memory)
        import torch  # noqa: F401
    if args.worker == "mmreplay":
        import mmreplay  # noqa: F401
    directory = Path(tempfile.mkdtemp(prefix="classic-", dir=args.tmpdir))
    feed = Feed(data)
    start = time.perf_counter()
    for _ in replay(feed):  # the feed alone: what every buffer's insertion time includes
        pass
    feed_seconds = time.perf_counter() - start
    rss_before = vm_rss()
    buffer = MAKERS[args.worker](args.capacity, args.seed, directory)
    try:
        add = buffer.add
        start = time.perf_counter()
        # The arrays are made as the loop goes, as an env makes them: a buffer that keeps them holds them.
        for transition in replay(feed):
            add(*transition)
        insert_seconds = time.perf_counter() - start
        rss_growth = vm_rss() - rss_before
        disk = buffer.bytes_on_disk()
        sample = buffer.sample
        rounds = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            for _ in range(args.batches):
                sample(args.batch_size)
            rounds.append(args.batches / (time.perf_counter() - start))
        check = _check(buffer, data, args) if args.worker == "mmreplay" else None
        paired = _paired_with_numpy(buffer, data, args) if args.worker == "mmreplay" else None
    finally:
        buffer.close()
        shutil.rmtree(directory, ignore_errors=True)
    result = {
        "buffer": args.worker, "transitions": args.transitions, "capacity": args.capacity,
        "insert_per_s": args.transitions / insert_seconds, "feed_per_s": args.transitions / feed_seconds,
        "sample_per_s": statistics.median(rounds),
        "sample_rounds": rounds, "rss_growth": rss_growth, "bytes_on_disk": disk, "check": check,
        "paired_ratios": paired,
    }
    if args.worker == "mmreplay":
        result["profile"] = profile_adds(data, args)
    return result


def _check(buffer: Any, data: dict[str, np.ndarray], args: argparse.Namespace) -> str:
    """The newest stored transitions read back equal the recorded ones, bit for bit."""
    store = buffer.store
    steps = np.arange(store.transitions_added - 1000, store.transitions_added)
    batch = store.read(steps)
    ok = (batch.next_obs[:, 0].tobytes() == data["next_obs"][steps].tobytes()
          and np.array_equal(batch.action, data["action"][steps]) and np.array_equal(batch.reward, data["reward"][steps]))
    return "the newest 1,000 transitions read back bit-exact" if ok else "MISMATCH in the newest 1,000 transitions"


def _paired_with_numpy(buffer: Any, data: dict[str, np.ndarray], args: argparse.Namespace) -> list[float]:
    """mmreplay's batches/s over the numpy buffer's, both holding the same transitions in this process
    and sampling in alternating rounds of ``--batches // 10``: the load of other processes on the
    machine then weighs on both alike. One ratio per pair of rounds."""
    peer = NumpyBuffer(args.capacity, args.seed, Path())
    for transition in replay(Feed(data)):
        peer.add(*transition)
    batches = max(1, args.batches // 10)
    ratios = []
    for _ in range(2 * args.repeats + 5):
        rates = []
        for sample in (buffer.sample, peer.sample):
            start = time.perf_counter()
            for _ in range(batches):
                sample(args.batch_size)
            rates.append(batches / (time.perf_counter() - start))
        ratios.append(rates[0] / rates[1])
    return ratios


def profile_adds(data: dict[str, np.ndarray], args: argparse.Namespace) -> dict[str, float]:
    """Microseconds per add on a fresh store, and what its parts cost when each is timed alone on the
    same transitions (CPU time of this thread, so other processes on the machine count less).

    ``validation``: ``parse_single_frames``, the check add's fast path makes. ``frame write``: the
    frame ring's ``append_frames`` of each new frame alone (one compiled call: lz4 compression, the
    frame's CRC-32, its frame-table entry and the ``pwrite`` of its bytes), on a scratch store.
    ``compression`` and ``frame CRC-32``: liblz4 (through python-lz4) and the extension's CRC-32 on the
    same frames, minus each call's cost on an empty input (the Python call itself). The rest of an add
    is the transition row (with its checksum), episode bookkeeping, the commits every 5 s and the
    Python between them.
    """
    import lz4.block

    from mmreplay import ReplayStore
    from mmreplay.frames import lz4_codec as codec
    from mmreplay.rows.transitions import TERMINATED, TRUNCATED
    from mmreplay.store.writing.add_arguments import parse_single_frames

    count = min(args.profile_transitions, len(data["action"]))
    feed = list(replay(Feed({name: values[:count] for name, values in data.items()})))
    frames = [transition[3] for transition in feed]
    directory = Path(tempfile.mkdtemp(prefix="classic-profile-", dir=args.tmpdir))
    clock = time.thread_time

    def per_item(function: Any, inputs: list[Any]) -> float:
        start = clock()
        for value in inputs:
            function(value)
        return (clock() - start) / len(inputs) * 1e6

    try:
        store = ReplayStore.create(directory / "p.mmr", frame_shape=(4,), capacity=args.capacity, stack_size=1,
                                   frame_dtype=np.float32, action_dtype=np.int64)
        add = store.add
        add_us = per_item(lambda transition: add(*transition), feed)
        shapes = store._role._add_shapes
        validation_us = per_item(lambda transition: parse_single_frames(
            shapes, *transition, terminated_bit=TERMINATED, truncated_bit=TRUNCATED), feed)
        store.close()
        scratch = ReplayStore.create(directory / "scratch.mmr", frame_shape=(4,), capacity=args.capacity,
                                     stack_size=1, frame_dtype=np.float32)
        ring, one = scratch._files.frames, [1]
        write_us = per_item(lambda frame: ring.append_frames(frame, one), frames)
        scratch.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    payloads = [codec.compress(frame) for frame in frames]
    empty = np.zeros(0, np.float32)
    compress = per_item(lambda f: lz4.block.compress(f, store_size=False), frames)
    compress -= per_item(lambda f: lz4.block.compress(f, store_size=False), [empty] * len(frames))
    crc = per_item(lambda p: codec.checksum(p, 12345), payloads) - per_item(lambda p: codec.checksum(p, 12345), [b""] * len(payloads))
    return {
        "add_us": add_us, "validation_us": validation_us, "frame_write_us": write_us,
        "compression_us": max(compress, 0.0), "frame_crc_us": max(crc, 0.0),
        "rest_us": add_us - validation_us - write_us,
        "payload_bytes": float(np.mean([len(p) for p in payloads])),
    }


# -- the driver ------------------------------------------------------------------------------------


def run_worker(args: argparse.Namespace, name: str, data: Path, tmpdir: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", name, "--data", str(data), "--tmpdir", tmpdir,
               "--transitions", str(args.transitions), "--capacity", str(args.capacity),
               "--batches", str(args.batches), "--batch-size", str(args.batch_size), "--repeats", str(args.deque_repeats if name == "deque" else args.repeats),
               "--seed", str(args.seed), "--profile-transitions", str(args.profile_transitions)]
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace, recorded_s: float) -> str:
    lines = [
        f"CartPole-v1, {args.transitions:,} transitions into capacity {args.capacity:,}, "
        f"{args.batches:,} batches of {args.batch_size} (median of {args.repeats} rounds, the deque's of {args.deque_repeats}); "
        f"recording took {recorded_s:.1f} s; load average {load_average():.2f} at the end; the feed alone "
        f"(making each step's arrays, no buffer) runs at {statistics.median(r['feed_per_s'] for r in results.values()):,.0f}"
        " transitions/s and is included in every insert rate",
        "",
        "| buffer | insert (transitions/s) | sample (batches/s) | RSS growth | disk |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, result in results.items():
        lines.append(f"| {name} | {result['insert_per_s']:,.0f} | {result['sample_per_s']:,.0f} | "
                     f"{result['rss_growth'] / 2**20:,.0f} MiB | {result['bytes_on_disk'] / 2**20:,.1f} MiB |")
    mine = results.get("mmreplay")
    if mine is not None:
        lines.append("")
        for peer, target in (("deque", SAMPLE_TARGET_VS_DEQUE), ("numpy", SAMPLE_TARGET_VS_NUMPY)):
            if peer in results:
                ratio = mine["sample_per_s"] / results[peer]["sample_per_s"]
                verdict = "met" if ratio >= target else "NOT met"
                lines.append(f"- mmreplay samples {ratio:.2f}x the {peer} buffer's batches/s (target >= {target}x: {verdict})")
        ratios = sorted(mine["paired_ratios"])
        lines.append(f"- paired (mmreplay and a numpy buffer of the same transitions in one process, sampling in "
                     f"alternating rounds): mmreplay at {statistics.median(ratios):.2f}x the numpy buffer's batches/s "
                     f"(median of {len(ratios)} pairs; quartiles {ratios[len(ratios) // 4]:.2f}-{ratios[3 * len(ratios) // 4]:.2f})")
        lines.append(f"- check: {mine['check']}")
        p = mine["profile"]
        lines.append(
            f"- mmreplay's add, timed part by part on {args.profile_transitions:,} transitions (thread CPU time): "
            f"{p['add_us']:.1f} us an add; validation {p['validation_us']:.1f} us "
            f"({p['validation_us'] / p['add_us']:.0%}); the frame write {p['frame_write_us']:.1f} us "
            f"({p['frame_write_us'] / p['add_us']:.0%}), of which lz4 compression ~{p['compression_us']:.2f} us and the "
            f"frame CRC-32 ~{p['frame_crc_us']:.2f} us ({p['payload_bytes']:.0f}-byte payloads; the rest of it is the "
            f"pwrite and the entry); the rest {p['rest_us']:.1f} us ({p['rest_us'] / p['add_us']:.0%}: the row with its "
            "checksum, episode bookkeeping, commits, Python)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transitions", type=int, default=2_000_000, help="transitions inserted (default %(default)s)")
    parser.add_argument("--capacity", type=int, default=1_000_000, help="buffer capacity (default %(default)s)")
    parser.add_argument("--batches", type=int, default=10_000, help="batches per sampling round (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=50, help="transitions per batch (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="sampling rounds; the median is reported")
    parser.add_argument("--deque-repeats", type=int, default=1, help="the deque's sampling rounds (default %(default)s)")
    parser.add_argument("--buffers", nargs="+", choices=BUFFERS, default=list(BUFFERS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile-transitions", type=int, default=200_000,
                        help="transitions of mmreplay's add profile (default %(default)s)")
    parser.add_argument("--tmpdir", help="where mmreplay's store goes (default: the system's temporary directory)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--worker", choices=BUFFERS, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args)))
        return
    scratch = tempfile.mkdtemp(prefix="bench-classic-", dir=args.tmpdir)
    try:
        data = Path(scratch) / "cartpole.npz"
        recorded_s = record(data, args.transitions, args.seed)
        print(f"recorded {args.transitions:,} CartPole-v1 steps in {recorded_s:.1f} s", file=sys.stderr)
        results = {}
        for name in args.buffers:
            results[name] = run_worker(args, name, data, args.tmpdir or tempfile.gettempdir())
            print(f"{name}: {results[name]['insert_per_s']:,.0f} transitions/s, "
                  f"{results[name]['sample_per_s']:,.0f} batches/s", file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    text = report(results, args, recorded_s)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"arguments": vars(args), "results": results, "report": text}, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
