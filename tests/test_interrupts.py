"""Interrupts never wedge a writer: an exception at any line of an add, a flush or a clear.

A KeyboardInterrupt lands between any two bytecodes of the caller's thread. Each test here runs one call
(an add of one env or a vector, ``add_encoded``, ``flush``, ``clear``) again and again on a store, the
N-th time with a KeyboardInterrupt raised at the N-th line that the call runs in mmreplay's own Python
code (``sys.settrace``), for every N up to the call's last line. After each, the store must be as if the
call had not happened or had completed (compared with ``reference.ReferenceStore`` fed the adds that
counted), and the next call is the next N's; every 40 calls and at the end, a flush, an add, a close and
a reopen must keep every add that returned. An ``add_encoded`` of T steps counts as T adds: an interrupt
leaves the first k of them, each whole (a send may commit part-way, as T adds would).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
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


OS_CALLS = ("open", "close", "unlink", "rmdir", "rename", "replace", "scandir", "ftruncate", "mkdir")


@contextmanager
def interrupt_after_os_call(n: int) -> Iterator[list[int]]:
    """Raise ``Injected`` just after the ``n``-th call of one of ``OS_CALLS`` inside the block returns, in
    any code (the standard library's too: a signal's handler runs there as well); yields the count seen."""
    seen = [0]
    originals = {name: getattr(os, name) for name in OS_CALLS}

    def wrapped(name: str) -> Callable[..., Any]:
        original = originals[name]

        def call(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            seen[0] += 1
            if seen[0] == n:
                raise Injected(f"os call {n}: just after os.{name}{args!r}")
            return result
        return call

    for name in OS_CALLS:
        setattr(os, name, wrapped(name))
    try:
        yield seen
    finally:
        for name, original in originals.items():
            setattr(os, name, original)


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
    Case("one env, a commit after each add", {"capacity": 40, "commit_every": 1}),
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


@dataclass
class Effect:
    """One part of a call (one add, or a clear): done to a store again (a retry), and to the model."""

    store: Callable[[ReplayStore], None]
    model: Callable[[ReferenceStore], None]


def _add(arguments: tuple[Any, ...]) -> Effect:
    return Effect(lambda store: store.add(*arguments), lambda ref: ref.add(*arguments))


def _masked_add(arguments: tuple[Any, ...]) -> Effect:
    """An add of envs 0 and 2 of three (``env_mask``): the model takes them as two one-env adds, in order."""
    mask = np.array([True, False, True])

    def model(ref: ReferenceStore) -> None:
        for env in (0, 2):
            obs, action, reward, next_obs, terminated, truncated = (np.asarray(a)[env] for a in arguments)
            ref._add_one(env, obs, action, reward, next_obs, bool(terminated), bool(truncated))

    return Effect(lambda store: store.add(*arguments, env_mask=mask), model)


def _call(case: Case, store: ReplayStore, ref: ReferenceStore,
          stream: Stream) -> tuple[Callable[[], None], list[Effect]]:
    """The call under test (after the untraced calls that lead to it), and its effects."""
    lead = {"flush": 1, "clear": 3}.get(case.call, 0)  # something to commit, or to clear
    if case.call == "start":
        lead_add = stream.next(end=True)  # the episode ends first: the call starts the next one
        store.add(*lead_add)
        ref.add(*lead_add)
    for _ in range(lead):
        arguments = stream.next()
        store.add(*arguments)
        ref.add(*arguments)
    if case.call in ("add", "start", "reset"):
        effect = _add(stream.next(end=case.call == "reset", reset_stack=case.call == "reset"))
        return lambda: effect.store(store), [effect]
    if case.call == "masked":
        effect = _masked_add(stream.next())
        return lambda: effect.store(store), [effect]
    if case.call == "encoded":
        send, adds = stream.send(5)
        return lambda: store.add_encoded(*send), [_add(add) for add in adds]
    if case.call == "flush":
        return store.flush, []
    if case.call == "clear":
        return store.clear, [Effect(lambda store: store.clear(), lambda ref: ref.clear())]
    raise AssertionError(case.call)


def _outcome(case: Case, store: ReplayStore, before: tuple[int, int],
             effects: list[Effect]) -> tuple[list[Effect], list[Effect]]:
    """The effects of an interrupted call that took place, and those that did not; fails where the call
    is neither done nor undone. A send (``add_encoded``) may keep its first k adds."""
    added, stored = store.transitions_added, len(store)
    if case.call == "clear":
        assert added == before[0]
        assert stored in (0, before[1]), f"clear left {stored} of {before[1]} transitions"
        return (effects, []) if stored == 0 and before[1] > 0 else ([], effects)
    if case.call == "flush":
        assert (added, stored) == before, f"a flush changed the store from {before} to {(added, stored)}"
        return [], []
    if case.call == "encoded":
        kept = added - before[0]
        assert 0 <= kept <= len(effects), f"a send of {len(effects)} added {kept}"
        return effects[:kept], effects[kept:]
    whole = 2 if case.call == "masked" else store.num_envs
    assert added in (before[0], before[0] + whole), f"an add of {whole} transitions added {added - before[0]}"
    return (effects, []) if added > before[0] else ([], effects)


def _reopened(store: ReplayStore, ref: ReferenceStore, stream: Stream, case: Case) -> ReplayStore:
    """Flush, an add, close (which commits it), reopen read-only and compare, then reopen to append."""
    store.flush()
    arguments = stream.next()
    store.add(*arguments)
    ref.add(*arguments)
    path = store.path
    store.close()
    with ReplayStore.open(path, "r") as reopened:
        assert_store_matches(reopened, ref)
    return ReplayStore.open(path, "r+", commit_every=case.create.get("commit_every"), commit_interval_s=None)


def _sweep(path: Path, case: Case, *, reopen_every: int,
           interrupt: Callable[[int], Any] = interrupt_at_line, least: int = 5) -> int:
    """Run the case's call again and again on one store, the N-th time interrupted at its N-th line, until
    a call runs to its end before its N-th line; after each, the store must match the model (and every
    ``reopen_every`` calls, survive a flush, a close and a reopen). Returns the last N interrupted."""
    store, ref, stream = _create(path, case)
    n = 0
    try:
        while True:
            call, adds = _call(case, store, ref, stream)
            before = (store.transitions_added, len(store))
            with interrupt(n + 1) as seen:
                try:
                    call()
                    interrupted = None
                except Injected as error:
                    interrupted = str(error)
            if interrupted is None:
                for effect in adds:
                    effect.model(ref)
                break
            n += 1
            try:
                done, undone = _outcome(case, store, before, adds)
                for effect in done:
                    effect.model(ref)
                assert_store_matches(store, ref)
                for effect in undone:  # the call again, not interrupted: the next call works
                    effect.store(store)
                    effect.model(ref)
                assert_store_matches(store, ref)
                if n % reopen_every == 0:
                    store = _reopened(store, ref, stream, case)
            except BaseException as error:
                raise AssertionError(f"{case.name}, interrupted at {interrupted}: {type(error).__name__}: "
                                     f"{error}") from error
        assert n >= least, f"the call ran {seen[0]} lines (or os calls)"
        store = _reopened(store, ref, stream, case)
        assert_store_matches(store, ref)
    finally:
        if not store.closed:
            store.close()
    return n


@pytest.fixture
def store_directory(tmp_path: Path) -> Iterator[Path]:
    """Where the sweeps' stores go: memory (/dev/shm) where there is one, as a clear's thousand builds and
    exchanges of directories cost seconds on a disk; else ``tmp_path``."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(prefix="mmreplay-interrupts-", dir=shm))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_an_interrupt_at_any_line_leaves_the_call_undone_or_done(store_directory: Path, case: Case) -> None:
    lines = _sweep(store_directory / "store.mmr", case, reopen_every=40)
    print(f"{case.name}: interrupted at each of {lines} lines")


OS_CALL_CASES = [case for case in CASES if case.call in ("clear", "flush")] + [
    Case("clear, prioritized, three envs of stacks, reference frames",
         {"capacity": 40, "num_envs": 3, "sampler": "prioritized", "frame_encoding": "lz4-reference"},
         stacked=True, call="clear"),
    Case("one env, a commit after each add (os calls)", {"capacity": 40, "commit_every": 1}),
]


@pytest.mark.parametrize("case", OS_CALL_CASES, ids=[case.name for case in OS_CALL_CASES])
def test_an_interrupt_just_after_any_os_call_leaves_the_call_undone_or_done(store_directory: Path,
                                                                           case: Case) -> None:
    """A signal's KeyboardInterrupt also lands inside the standard library, just after a system call
    returns; a clear once turned it into ``OSError: [Errno 9] Bad file descriptor`` (``shutil.rmtree``
    closing a descriptor twice) and failed the CI's stress run. Swept here over every such call."""
    calls = _sweep(store_directory / "store.mmr", case, reopen_every=40, interrupt=interrupt_after_os_call,
                   least=1)
    print(f"{case.name}: interrupted after each of {calls} os calls")


def test_sigints_at_random_moments_of_a_writer_never_wedge_it(tmp_path: Path) -> None:
    """``scripts/interrupt_stress.py``'s short run: writer processes SIGINTed at random moments of their adds,
    sends, flushes and clears catch each KeyboardInterrupt and go on; every stored transition equals the
    model's, also after close and reopen."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("interrupt_stress", Path(__file__).resolve().parents[1]
                                                  / "scripts" / "interrupt_stress.py")
    assert spec is not None and spec.loader is not None
    stress = importlib.util.module_from_spec(spec)
    sys.modules["interrupt_stress"] = stress  # dataclasses look their module up while the class is built
    spec.loader.exec_module(stress)
    results = [stress.run(seed, 3.0, tmp_path, 40.0) for seed in (100, 101, 102)]
    assert [r.get("failure") for r in results] == [None] * 3, results
    assert sum(r["interrupts"] for r in results) >= 30  # each writer was interrupted, many times
    assert all(r["checked"] > 0 for r in results)
