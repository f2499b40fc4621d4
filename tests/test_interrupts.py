"""Interrupts never wedge a writer: an exception at any line of an add, a flush or a clear.

A KeyboardInterrupt lands between any two bytecodes of the caller's thread. Each test here runs one call
(an add of one env or a vector, ``add_encoded``, ``flush``, ``clear``) again and again on a store in the
same state, the N-th time with a KeyboardInterrupt raised at the N-th line that the call runs in
mmreplay's own Python code (``sys.settrace``), for every N up to the call's last line. After each, the
store must be as if the call had not happened or had completed (compared with ``reference.ReferenceStore``
fed the adds that counted), and the next adds, a flush, a close and a reopen must work and keep every
add that returned.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from reference import ReferenceStore, assert_store_matches

import mmreplay
from mmreplay import PrioritizedSampler, ReplayStore, encode_frames

PACKAGE = str(Path(mmreplay.__file__).resolve().parent)
SHAPE = (8, 8)


@pytest.fixture(autouse=True)
def no_syncs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Durability is the kill tests' (test_crash.py): here fsync and msync only cost time, thousands of them."""
    monkeypatch.setattr(os, "fsync", lambda descriptor: None)
    monkeypatch.setattr(os, "fdatasync", lambda descriptor: None)
    monkeypatch.setattr(np.memmap, "flush", lambda self: None)


class Injected(KeyboardInterrupt):
    """The interrupt the tracer raises (a KeyboardInterrupt, as Ctrl-C's)."""


@contextmanager
def interrupt_at_line(n: int) -> Iterator[list[int]]:
    """Raise ``Injected`` at the ``n``-th line event of mmreplay's code inside the block (0: never); yields
    a list whose one item counts the line events seen."""
    seen = [0]

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            seen[0] += 1
            if seen[0] == n:
                raise Injected(f"line {n}: {frame.f_code.co_filename}:{frame.f_lineno}")
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename.startswith(PACKAGE) else None

    sys.settrace(tracer)
    try:
        yield seen
    finally:
        sys.settrace(None)


def frame(env: int, t: int) -> np.ndarray:
    value = np.zeros(SHAPE, np.uint8)
    value[0, 0], value[0, 1], value[0, 2] = env, t % 256, t // 256
    value[1:] = (t * 7 + env) % 251  # a frame that differs from its neighbours everywhere
    return value


@dataclass
class Stream:
    """Each env's frames in order: the next add's arguments (one env, or a vector of them)."""

    num_envs: int
    stack_size: int
    stacked: bool
    t: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.t = [0] * self.num_envs

    def _obs(self, env: int, t: int) -> np.ndarray:
        if not self.stacked:
            return frame(env, t)
        return np.stack([frame(env, max(0, s)) for s in range(t - self.stack_size + 1, t + 1)])

    def next(self, *, end: bool = False, reset_stack: bool = False) -> tuple[Any, ...]:
        """The next add's (obs, action, reward, next_obs, terminated, truncated); ``end``: every env
        terminates (``reset_stack``: with a reset stack as next_obs, stored as given)."""
        columns = []
        for env in range(self.num_envs):
            t = self.t[env]
            next_obs = self._obs(env, t + 1)
            if reset_stack:
                next_obs = np.stack([frame(env, 1000 + t)] * self.stack_size)
            columns.append((self._obs(env, t), env * 10_000 + t, float(t), next_obs, end, False))
            self.t[env] = t + 1 if not end else t + 2
        if self.num_envs == 1:
            return columns[0]
        return tuple(np.array([c[i] for c in columns]) for i in range(6))

    def send(self, steps: int) -> tuple[Any, ...]:
        """``add_encoded``'s arguments for the next ``steps`` adds of env 0 (single frames)."""
        adds = [self.next() for _ in range(steps)]
        frames = [a[0] for a in adds] + [adds[-1][3]]
        return (encode_frames(np.stack(frames)), np.arange(steps), np.array([a[1] for a in adds]),
                np.array([a[2] for a in adds], np.float32), np.arange(1, steps + 1), np.zeros(steps, bool),
                np.zeros(steps, bool)), adds


@dataclass
class Case:
    """A store's configuration, the adds that bring it to the state under test, and the call under test."""

    name: str
    create: dict[str, Any]
    stacked: bool = False
    prelude: int = 6
    call: str = "add"  # "add", "start", "reset", "masked", "encoded", "flush", "clear"


CASES = [
    Case("one env continuing (fast path)", {"capacity": 40}),
    Case("one env continuing, reference frames", {"capacity": 40, "frame_encoding": "lz4-reference"}),
    Case("one env continuing, prioritized", {"capacity": 40, "sampler": "prioritized"}),
    Case("one env, a commit due after it", {"capacity": 40, "commit_every": 7}, prelude=6),
    Case("one env, room made by a commit", {"capacity": 6}, prelude=6),
    Case("one env, an episode's start", {"capacity": 40}, call="start"),
    Case("one env, stacks, a reset stack as next_obs", {"capacity": 40}, stacked=True, call="reset"),
    Case("three envs continuing (fast path)", {"capacity": 40, "num_envs": 3}),
    Case("three envs continuing, reference frames", {"capacity": 40, "num_envs": 3,
                                                     "frame_encoding": "lz4-reference"}),
    Case("three envs, env_mask (general path)", {"capacity": 40, "num_envs": 3}, call="masked"),
    Case("three envs, stacks, evicting", {"capacity": 8, "num_envs": 3}, stacked=True),
    Case("add_encoded, a run of steps", {"capacity": 40, "frame_encoding": "lz4"}, call="encoded"),
    Case("add_encoded, reference frames", {"capacity": 40, "frame_encoding": "lz4-reference"}, call="encoded"),
    Case("flush", {"capacity": 40}, call="flush"),
    Case("flush, prioritized", {"capacity": 40, "sampler": "prioritized"}, call="flush"),
    Case("clear", {"capacity": 40}, call="clear"),
]


def _create(path: Path, case: Case) -> tuple[ReplayStore, ReferenceStore, Stream]:
    options = {"frame_shape": SHAPE, "stack_size": 3, "commit_interval_s": None, **case.create}
    if options.pop("sampler", None) == "prioritized":
        options["sampler"] = PrioritizedSampler()
    store = ReplayStore.create(path, **options)
    model_options = {k: v for k, v in options.items() if k not in ("sampler", "commit_interval_s", "commit_every")}
    ref = ReferenceStore(**model_options)
    stream = Stream(options.get("num_envs", 1), options["stack_size"], case.stacked)
    for _ in range(case.prelude):
        arguments = stream.next()
        store.add(*arguments)
        ref.add(*arguments)
    return store, ref, stream


def _call(case: Case, store: ReplayStore, ref: ReferenceStore,
          stream: Stream) -> tuple[Callable[[], None], list[tuple[str, Any]]]:
    """The call under test, and what it records if it completes."""
    if case.call == "start":
        ending = stream.next(end=True)  # the episode ends first: the call starts the next one
        store.add(*ending)
        ref.add(*ending)
        arguments = stream.next()
        return lambda: store.add(*arguments), [("add", arguments)]
    if case.call in ("add", "reset"):
        arguments = stream.next(end=case.call == "reset", reset_stack=case.call == "reset")
        return lambda: store.add(*arguments), [("add", arguments)]
    if case.call == "masked":
        arguments = stream.next()
        mask = np.array([True, False, True])
        recorded = tuple(np.asarray(a)[mask] for a in arguments)
        # the model takes the recorded envs alone: a vector of the two, as two one-env adds of envs 0 and 2
        return lambda: store.add(*arguments, env_mask=mask), [("masked", recorded)]
    if case.call == "encoded":
        send, adds = stream.send(5)
        return lambda: store.add_encoded(*send), [("add", add) for add in adds]
    if case.call == "flush":
        return store.flush, []
    if case.call == "clear":
        return store.clear, [("clear", ())]
    raise AssertionError(case.call)


def _record(ref: ReferenceStore, adds: list[tuple[Any, ...]]) -> None:
    for kind, arguments in adds:
        if kind == "clear":
            ref.clear()
        elif kind == "masked":  # env_mask: envs 0 and 2 recorded, in that order
            for i, env in enumerate((0, 2)):
                ref._add_one(env, arguments[0][i], arguments[1][i], arguments[2][i], arguments[3][i],
                             bool(arguments[4][i]), bool(arguments[5][i]))
        else:
            ref.add(*arguments)


def _counted(case: Case, store: ReplayStore, before: tuple[int, int]) -> bool:
    """Whether the interrupted call counts as completed (else as not having happened); fails when it is
    neither."""
    added, stored = store.transitions_added, len(store)
    if case.call == "clear":
        assert added == before[0]
        assert stored in (0, before[1]), f"clear left {stored} of {before[1]} transitions"
        return stored == 0 and before[1] > 0
    if case.call == "flush":
        assert (added, stored) == before
        return False
    assert added >= before[0]
    return added > before[0]


def _trial(tmp_path: Path, case: Case, n: int) -> int:
    """One trial: the call under test interrupted at its ``n``-th line (0: not interrupted); the checks;
    returns the line events the call ran (all of them when it was not interrupted)."""
    path = tmp_path / f"n{n}.mmr"
    try:
        return _checked_trial(path, case, n)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _checked_trial(path: Path, case: Case, n: int) -> int:
    store, ref, stream = _create(path, case)
    call, adds = _call(case, store, ref, stream)
    before = (store.transitions_added, len(store))
    interrupted = False
    with interrupt_at_line(n) as seen:
        try:
            call()
        except Injected:
            interrupted = True
    assert interrupted == (n > 0), f"the call ran {seen[0]} lines, fewer than {n}"
    if not interrupted or _counted(case, store, before):
        _record(ref, adds)
    where = f"{case.name}, interrupted at line {n}"
    try:
        assert_store_matches(store, ref)
        for _ in range(3):  # the next adds work, and commit with everything that returned
            arguments = stream.next()
            store.add(*arguments)
            ref.add(*arguments)
        store.sample(4, rng=0)
        store.flush()
        arguments = stream.next()
        store.add(*arguments)  # committed by close
        ref.add(*arguments)
        store.close()
        with ReplayStore.open(path, "r") as reopened:
            assert_store_matches(reopened, ref)
    except BaseException as error:
        raise AssertionError(f"{where}: {type(error).__name__}: {error}") from error
    finally:
        if not store.closed:
            store.close()
    return seen[0]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_an_interrupt_at_any_line_leaves_the_call_undone_or_done(tmp_path: Path, case: Case) -> None:
    lines = _trial(tmp_path, case, 0)
    assert lines > 5
    failures = []
    for n in range(1, lines + 1):
        try:
            _trial(tmp_path, case, n)
        except AssertionError as error:
            failures.append(str(error).splitlines()[0][:300])
    assert failures == [], f"{len(failures)} of {lines} lines:\n" + "\n".join(failures[:20])
