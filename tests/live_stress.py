"""Readers and the command line against a live store: a writer appends and wraps while readers, which
the harness deschedules in bursts (SIGSTOP, then SIGCONT), open, refresh, read, sample, list episodes,
verify and export it.

    python tests/live_stress.py --seconds 60 --readers 4      # prints the outcome counts as JSON

Every outcome is counted by operation and kind: ``ok``, ``evicted`` (``StepsEvictedError``: the
writer evicted the steps while they were read, the one error a healthy live store may give) or the
exception's class (each of those is a failure). The store is healthy throughout, so a corruption error
is always wrong. ``mmreplay verify``, ``info``, ``episodes`` and ``export`` run as commands too.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mmreplay import ReplayStore
from mmreplay.cli import verify_store
from mmreplay.errors import MmreplayError
from mmreplay.hdf5 import export_hdf5

fork = multiprocessing.get_context("fork")
SHAPE = (12, 12)
CAPACITY = 600


def frame(step: int) -> np.ndarray:
    return np.full(SHAPE, step % 251, np.uint8)


def writer(path: Path, stop: multiprocessing.synchronize.Event, rate: float) -> None:
    """Append one env's episodes (lengths 1 to 60) at about ``rate`` transitions a second, committing often."""
    rng = random.Random(1)
    store = ReplayStore.open(path, "r+", commit_every=7, commit_interval_s=None)
    step, length, started = 0, rng.randint(1, 60), time.monotonic()
    obs = np.stack([frame(step), frame(step + 1)])
    while not stop.is_set():
        next_obs = np.stack([obs[1], frame(step + 2)])
        length -= 1
        store.add(obs, step % 5, 1.0, next_obs, length == 0, False)
        step += 1
        obs = next_obs if length else np.stack([frame(step), frame(step + 1)])
        length = length or rng.randint(1, 60)
        delay = started + step / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    store.close()


def _kind(error: BaseException) -> str:
    if type(error).__name__ == "StepsEvictedError":
        return "evicted"
    return type(error).__name__ if isinstance(error, MmreplayError) else f"{type(error).__name__}: {error}"[:200]


def reader(path: Path, seconds: float, seed: int, results: multiprocessing.Queue, scratch: Path) -> None:
    rng = random.Random(seed)
    counts: collections.Counter[str] = collections.Counter()
    deadline = time.monotonic() + seconds
    store = ReplayStore.open(path)
    operations = {
        "open": lambda: ReplayStore.open(path).close(),
        "refresh": lambda: store.refresh(),
        "len": lambda: (len(store), store.stored_steps),
        "read newest": lambda: store.read(store.stored_steps[-10:]),
        "sample": lambda: store.sample(8, rng=rng.randrange(1 << 30)),
        "episodes": lambda: store.episodes(),
        "bytes_on_disk": lambda: store.bytes_on_disk,
        "verify": lambda: _verify(path),
        "export": lambda: _export(store, scratch / f"export-{seed}.h5"),
    }
    names = list(operations)
    weights = [10, 10, 10, 10, 10, 5, 10, 1, 1]
    while time.monotonic() < deadline:
        name = rng.choices(names, weights)[0]
        try:
            operations[name]()
            counts[f"{name}: ok"] += 1
        except Exception as error:  # noqa: BLE001 - counted, and a failure unless "evicted"
            counts[f"{name}: {_kind(error)}"] += 1
    store.close()
    results.put(dict(counts))


def _verify(path: Path) -> None:
    report = verify_store(str(path))
    if report["problems"]:
        raise AssertionError(f"verify found problems in a healthy store: {report['problems'][:3]}")


def _export(store: ReplayStore, target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    try:
        export_hdf5(store, target)
    finally:
        if target.exists():
            target.unlink()


def commands(path: Path, scratch: Path, rounds: int) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for round in range(rounds):
        for arguments in (["verify", "--no-progress"], ["info"], ["episodes"], ["export", "--no-progress"]):
            extra = [str(scratch / f"cli-{round}.h5")] if arguments[0] == "export" else []
            done = subprocess.run([sys.executable, "-m", "mmreplay", arguments[0], str(path), *extra, *arguments[1:]],
                                  capture_output=True, text=True, timeout=120)
            lines = done.stderr.strip().splitlines()
            evicted = "evicted" in done.stderr
            kind = "ok" if done.returncode == 0 else "evicted" if evicted and len(lines) == 1 else (
                f"exit {done.returncode}: {done.stderr.strip()[-200:]}")
            counts[f"mmreplay {arguments[0]}: {kind}"] += 1
    return counts


def run(seconds: float, readers: int, rate: float, cli_rounds: int) -> dict[str, int]:
    scratch = Path(tempfile.mkdtemp(prefix="mmreplay-live-"))
    try:
        path = scratch / "live.mmr"
        ReplayStore.create(path, frame_shape=SHAPE, capacity=CAPACITY, stack_size=2).close()
        stop = fork.Event()
        writing = fork.Process(target=writer, args=(path, stop, rate))
        writing.start()
        time.sleep(0.5)
        results: multiprocessing.Queue = fork.Queue()
        procs = [fork.Process(target=reader, args=(path, seconds, i, results, scratch)) for i in range(readers)]
        for proc in procs:
            proc.start()
        rng = random.Random(0)
        bursts = 0
        deadline = time.monotonic() + seconds
        cli = fork.Process(target=lambda: results.put(dict(commands(path, scratch, cli_rounds))))
        cli.start()
        while time.monotonic() < deadline:
            victim = rng.choice(procs)
            try:
                os.kill(victim.pid, signal.SIGSTOP)  # type: ignore[arg-type]
                # Mostly short stops; one in ten long enough for the writer to wrap its row ring.
                time.sleep(rng.uniform(0.005, 0.15) if rng.random() < 0.9 else rng.uniform(1.0, 4.0))
            finally:
                os.kill(victim.pid, signal.SIGCONT)  # type: ignore[arg-type]
            bursts += 1
            time.sleep(rng.uniform(0.0, 0.05))
        counts: collections.Counter[str] = collections.Counter()
        for _ in range(readers + 1):
            counts.update(results.get(timeout=300))
        for proc in [*procs, cli]:
            proc.join()
        stop.set()
        writing.join()
        counts["SIGSTOP bursts"] = bursts
        counts["transitions written"] = ReplayStore.open(path).transitions_added
        return dict(sorted(counts.items()))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def failures(counts: dict[str, int]) -> dict[str, int]:
    """The outcomes that are failures: neither ok nor evicted (nor the run's own counts)."""
    return {key: value for key, value in counts.items()
            if ": " in key and key.split(": ", 1)[1] not in ("ok", "evicted")}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--rate", type=float, default=3000.0, help="the writer's transitions per second")
    parser.add_argument("--cli-rounds", type=int, default=5)
    options = parser.parse_args()
    print(json.dumps(run(options.seconds, options.readers, options.rate, options.cli_rounds), indent=1))
