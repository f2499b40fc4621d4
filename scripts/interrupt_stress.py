"""Interrupt stress: SIGINT a writer at random moments of its adds, flushes and clears; nothing may wedge.

Each run starts a writer process that appends real Atari frames (``mmreplay.testing.atari_frames``) to a small
store in a stream fixed by the run's seed: one-env or vector adds (some with ``env_mask``), single frames
or stacks, plain or reference frames, a uniform or a prioritized sampler, ``add_encoded`` sends (one
env), and now and then a ``flush`` or a ``clear``. The parent sends it SIGINT after random delays. The
writer catches each ``KeyboardInterrupt`` the way a training loop would and goes on; its SIGINT handler
raises only during its store calls (a signal between calls waits for the next one), so every interrupt
lands inside one (or just as it returns). After each interrupted call the writer decides from the store's counts whether the call took
place (whole) or not, and feeds a naive reference model (``tests/reference.py``) what took place; every
so often, and at the end, it compares every stored transition with the model. At the end it closes the
store (which commits), reopens it read-only and compares again: every add that returned must be there,
bit-exact. A run fails on any mismatch, any error other than the interrupt, or a writer that stops
answering.

    python scripts/interrupt_stress.py --runs 8 --seconds 20 --seed 0 [--json [PATH]]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for directory in (REPO, REPO / "tests"):
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))

from reference import ReferenceStore, assert_store_matches  # noqa: E402  (the tests' naive model)

from mmreplay import PrioritizedSampler, ReplayStore, encode_frames  # noqa: E402
from mmreplay.testing import atari_frames  # noqa: E402

STACK = 4


@dataclass(frozen=True)
class Variant:
    num_envs: int
    stacked: bool
    frame_encoding: str
    prioritized: bool
    capacity: int
    encoded: bool


def draw_variant(seed: int) -> Variant:
    rng = np.random.default_rng([seed, 0])
    num_envs = int(rng.choice([1, 1, 3]))
    return Variant(num_envs=num_envs, stacked=bool(rng.random() < 0.5),
                   frame_encoding=str(rng.choice(["lz4", "lz4-reference"])), prioritized=bool(rng.random() < 0.3),
                   capacity=int(rng.integers(30, 300)), encoded=num_envs == 1 and bool(rng.random() < 0.4))


class Stream:
    """Each env walks the game's frames from its own place; episodes end where the game's do, or are cut."""

    def __init__(self, variant: Variant, frames: np.ndarray, seed: int) -> None:
        self.variant, self.frames = variant, frames
        self.rng = np.random.default_rng([seed, 1])
        self.t = [int(t) for t in self.rng.integers(0, len(frames) - 2, variant.num_envs)]

    def _obs(self, t: int) -> np.ndarray:
        if not self.variant.stacked:
            return self.frames[t]
        return np.stack([self.frames[max(0, s)] for s in range(t - STACK + 1, t + 1)])

    def one(self, env: int) -> tuple[Any, ...]:
        t = self.t[env]
        end = bool(self.rng.random() < 0.02) or t + 2 >= len(self.frames)
        obs, next_obs = self._obs(t), self._obs(t + 1)
        self.t[env] = int(self.rng.integers(0, len(self.frames) - 2)) if end else t + 1
        return obs, t, float(t % 7), next_obs, end, False

    def add(self) -> tuple[Any, ...]:
        columns = [self.one(env) for env in range(self.variant.num_envs)]
        if self.variant.num_envs == 1:
            return columns[0]
        return tuple(np.array([c[i] for c in columns]) for i in range(6))


def _send(adds: list[tuple[Any, ...]]) -> tuple[Any, ...] | None:
    """``add_encoded``'s arguments for consecutive single-frame adds that continue each other (else None)."""
    if any(adds[i][3].tobytes() != adds[i + 1][0].tobytes() or adds[i][4] for i in range(len(adds) - 1)):
        return None
    frames = np.stack([a[0] for a in adds] + [adds[-1][3]])
    n = len(adds)
    return (encode_frames(frames), np.arange(n), np.array([a[1] for a in adds]), np.array([a[2] for a in adds],
            np.float32), np.arange(1, n + 1), np.array([a[4] for a in adds]), np.zeros(n, bool))


@dataclass
class Report:
    interrupts: int = 0
    calls: int = 0
    done: int = 0
    undone: int = 0
    kept_of_sends: int = 0
    checked: int = 0
    by_call: dict[str, int] = field(default_factory=dict)
    failure: str | None = None


def _masked(arguments: tuple[Any, ...], mask: np.ndarray, ref: ReferenceStore) -> None:
    for env in np.flatnonzero(mask):
        obs, action, reward, next_obs, terminated, truncated = (np.asarray(a)[env] for a in arguments)
        ref._add_one(int(env), obs, action, reward, next_obs, bool(terminated), bool(truncated))


def writer(path: Path, variant: Variant, seed: int, seconds: float) -> Report:
    """The writer process's loop (SIGINT unblocked only around its store calls)."""
    frames = atari_frames.load("pong", 3000)["frames"]
    sampler = PrioritizedSampler() if variant.prioritized else None
    options = dict(frame_shape=frames.shape[1:], capacity=variant.capacity, stack_size=STACK,
                   num_envs=variant.num_envs, frame_encoding=variant.frame_encoding)
    store = ReplayStore.create(path, sampler=sampler, commit_interval_s=0.05, **options)
    ref = ReferenceStore(**options)
    stream, rng, report = Stream(variant, frames, seed), np.random.default_rng([seed, 2]), Report()
    # SIGINT raises KeyboardInterrupt only inside a store call (the handler runs in the main thread, between
    # bytecodes, wherever the signal arrived): one that arrives between calls waits for the next call.
    calling, pending = [False], [False]

    def on_sigint(signum: int, frame: object) -> None:
        if calling[0]:
            raise KeyboardInterrupt
        pending[0] = True

    signal.signal(signal.SIGINT, on_sigint)
    print("ready", flush=True)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            roll = rng.random()
            if roll < 0.03:
                kind, effects = "flush", []
                call = store.flush
            elif roll < 0.035:
                kind, effects = "clear", [("clear", None)]
                call = store.clear
            elif variant.encoded and roll < 0.3:
                adds = [stream.add() for _ in range(int(rng.integers(1, 9)))]
                send = _send(adds) if not variant.stacked else None
                if send is None:
                    kind, effects = "add", [("add", a) for a in adds[:1]]
                    call = lambda a=adds[0]: store.add(*a)  # noqa: E731
                else:
                    kind, effects = "add_encoded", [("add", a) for a in adds]
                    call = lambda s=send: store.add_encoded(*s)  # noqa: E731
            elif variant.num_envs > 1 and roll < 0.5:
                arguments, mask = stream.add(), rng.random(variant.num_envs) < 0.6
                kind, effects = "add with env_mask", [("masked", (arguments, mask))]
                call = lambda a=arguments, m=mask: store.add(*a, env_mask=m)  # noqa: E731
            else:
                arguments = stream.add()
                kind, effects = "add", [("add", arguments)]
                call = lambda a=arguments: store.add(*a)  # noqa: E731
            before = (store.transitions_added, len(store))
            report.calls += 1
            interrupted = False
            try:
                calling[0] = True
                if pending[0]:
                    pending[0] = False
                    raise KeyboardInterrupt
                call()
                calling[0] = False
            except KeyboardInterrupt:
                calling[0] = False
                interrupted = True
                report.interrupts += 1
                report.by_call[kind] = report.by_call.get(kind, 0) + 1
            kept = _outcome(kind, store, before, effects, interrupted, report)
            for effect_kind, value in effects[:kept]:
                if effect_kind == "clear":
                    ref.clear()
                elif effect_kind == "masked":
                    _masked(value[0], value[1], ref)
                else:
                    ref.add(*value)
            if interrupted and report.interrupts % 25 == 0:
                assert_store_matches(store, ref)
                report.checked += len(ref)
        assert_store_matches(store, ref)
        store.close()
        with ReplayStore.open(path, "r") as reopened:
            assert_store_matches(reopened, ref)
            report.checked += len(ref)
    except BaseException as error:  # reported to the parent with where it happened
        report.failure = f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=-4)}"
    return report


def _outcome(kind: str, store: ReplayStore, before: tuple[int, int], effects: list[Any], interrupted: bool,
             report: Report) -> int:
    """How many of the call's effects took place; raises where the call is neither done nor undone."""
    added, stored = store.transitions_added, len(store)
    if kind == "flush":
        if (added, stored) != before:
            raise AssertionError(f"a flush changed the store from {before} to {(added, stored)}")
        return 0
    if kind == "clear":
        done = stored == 0
        if added != before[0] or not (done or stored == before[1]):
            raise AssertionError(f"a clear left {(added, stored)} of {before}")
    elif kind == "add_encoded":
        kept = added - before[0]
        if not 0 <= kept <= len(effects):
            raise AssertionError(f"a send of {len(effects)} added {kept}")
        report.kept_of_sends += kept if interrupted else 0
        done = kept == len(effects)
        if interrupted:
            report.done += done
            report.undone += kept == 0
        return kept
    else:
        whole = int(effects[0][1][1].sum()) if kind == "add with env_mask" else store.num_envs
        if added not in (before[0], before[0] + whole):
            raise AssertionError(f"an add of {whole} transitions added {added - before[0]}")
        done = added > before[0] or whole == 0
    if interrupted:
        report.done += done
        report.undone += not done
    return len(effects) if done else 0


def run(seed: int, seconds: float, work: Path, signals_per_second: float) -> dict[str, Any]:
    """One writer process, interrupted by SIGINT at random intervals until it finishes; its report."""
    variant = draw_variant(seed)
    path = Path(tempfile.mkdtemp(prefix=f"interrupts{seed}-", dir=work)) / "store.mmr"
    child = subprocess.Popen([sys.executable, __file__, "--writer", str(path), "--seed", str(seed),
                              "--seconds", str(seconds)], stdout=subprocess.PIPE, text=True)
    rng = np.random.default_rng([seed, 3])
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":  # imported, its store created, SIGINT blocked
        child.wait()
        return {"seed": seed, "variant": variant.__dict__, "failure": f"the writer exited with {child.returncode}"}
    deadline = time.monotonic() + seconds + 120  # a writer that stops answering fails
    while child.poll() is None and time.monotonic() < deadline:
        # At least 10 ms apart: one interrupt to a call (a second inside the first's handling is a
        # double fault, which nothing promises to survive).
        time.sleep(0.01 + float(rng.exponential(1.0 / signals_per_second)))
        if child.poll() is None:
            os.kill(child.pid, signal.SIGINT)
    if child.poll() is None:
        child.kill()
        return {"seed": seed, "variant": variant.__dict__, "failure": "the writer stopped answering"}
    out = child.stdout.read()
    try:
        result = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = {"failure": f"the writer exited with {child.returncode} and printed {out[-500:]!r}"}
    return {"seed": seed, "variant": variant.__dict__, **result}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8, help="writer processes, one after another")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each writer adds")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first run (run i uses seed + i)")
    parser.add_argument("--rate", type=float, default=40.0, help="SIGINTs a second, on average")
    parser.add_argument("--json", nargs="?", const="-", help="also write the reports as JSON (to PATH, or stdout)")
    parser.add_argument("--writer", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.writer is not None:
        report = writer(args.writer, draw_variant(args.seed), args.seed, args.seconds)
        print(json.dumps(report.__dict__))
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="mmreplay-interrupts-") as work:
        for seed in range(args.seed, args.seed + args.runs):
            result = run(seed, args.seconds, Path(work), args.rate)
            results.append(result)
            status = "FAILED " + result["failure"] if result.get("failure") else "ok"
            print(f"seed {seed}: {result.get('interrupts', 0)} interrupts in {result.get('calls', 0)} calls "
                  f"({result.get('done', 0)} done, {result.get('undone', 0)} undone), "
                  f"{result.get('checked', 0):,} transitions checked: {status}", flush=True)
    failures = [r for r in results if r.get("failure")]
    total = sum(r.get("interrupts", 0) for r in results)
    print(f"runs: {len(results)}, interrupts: {total}, calls: {sum(r.get('calls', 0) for r in results)}, "
          f"transitions checked: {sum(r.get('checked', 0) for r in results):,}, failures: {len(failures)}")
    if args.json:
        text = json.dumps(results, indent=1)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
