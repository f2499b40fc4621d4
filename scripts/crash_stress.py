"""Crash-safety stress: SIGKILL a writer at random moments, then check what the store kept.

Each trial creates a small store (capacity of a few dozen to a few hundred transitions, so wrap-around
eviction happens within a fraction of a second) and forks a writer process that appends real Atari frames
(``mmreplay.testing.atari_frames`` records them once with ALE) in a stream fixed by the trial's seed:
single-env or vector adds (with ``env_mask``), single frames or stacks (every other ending of a stack
brings a reset stack as next_obs, as CleanRL does), long real episodes or short ones cut by truncation
(which makes frames outnumber transitions and the frame table grow), a uniform or a prioritized sampler
(the writer then samples and calls ``update_priorities``). It flushes at random intervals and after each
flush appends the committed count to a side file outside the store (fsync'd). The writer is killed with
SIGKILL:

* ``timer`` trials: the parent sends SIGKILL after a random delay (the writer is then in ``add``,
  ``flush``, eviction, sampling or ``update_priorities``, wherever it happens to be);
* ``inject`` trials: the writer kills itself with SIGKILL just before or just after its N-th call of a
  file primitive the store uses (``fsync``, ``fdatasync``, ``pwrite``, ``posix_fallocate``, ``replace``,
  ``unlink``, ``memmap.flush``), so every step of a commit is hit, not only the long ones.

* ``errors``: in about half the trials of either kind, chosen flushes get an injected ``ENOSPC`` or
  ``EIO`` from one of the file primitives they call (the flush raises; the writer goes on adding and
  flushing), so kills also follow failed flushes; in half of those, the commit after a failed flush
  (the writer's next flush, or a commit an add makes) is killed just before its header's rename.

The checker then opens the store with ``"r+"`` and requires: the open succeeds; ``transitions_added`` is
at least the last count in the side file (a shortfall is counted as *lost* committed transitions); the
count falls on an add boundary; every stored transition (obs, next_obs, action, reward, flags, env,
step) is bit-exact against the regenerated stream; ``sample`` (and for a prioritized store
``update_priorities``) works on what is stored; a prioritized store's committed priorities are
exactly those of the header it reopened at (their CRC is the header's: none from a commit whose header
was never written survive); a few more adds go in and, after close and reopen,
everything stored is again bit-exact.

With ``--host`` the writer also does what a training process does around its store: a thread samples the
store while it adds, it forks a child every 50 adds that exits at once (running the store's exit commit,
which for the inherited writer must write nothing), and a timer raises a
KeyboardInterrupt inside its adds and flushes (as Ctrl-C would, every few milliseconds), after which it
retries the call as a loop that catches them would (an add that counted is not retried); the checks are
the same.

With ``--add-encoded`` the writer records through ``add_encoded`` instead: one env, sends of 1 to 32
consecutive steps with their frames compressed beforehand (``encode_frames``), as a Ray shard receives
them, the blocks as bytes or in a receive buffer viewed as rows or 4-byte words that the sender zeroes
once the call returns (``BUFFER_FORMS``); a send may commit part-way (room, as the adds it stands for
would), and the checks are the same.

    python scripts/crash_stress.py --trials 1000 --seed 0 [--add-encoded] [--json [PATH]]
"""

from __future__ import annotations

import argparse
import errno
import gc
import json
import mmap
import os
import shutil
import signal
import struct
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, deque
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # the package, when run as a script from a clone
    sys.path.insert(0, str(REPO))

from mmreplay import EncodedFrames, PrioritizedSampler, ReplayStore, StoreLockedError, encode_frames  # noqa: E402
from mmreplay.store.writing import autocommit  # noqa: E402  (a forked child's exit commit, run by hand)
from mmreplay.testing import atari_frames  # noqa: E402

PHASES = {
    0: "starting",
    1: "open",
    2: "add",
    3: "add with eviction",
    4: "flush",
    5: "side file",
    6: "sample",
    7: "update_priorities",
    8: "close",
    9: "done",
}
INJECTED = ("fsync", "fdatasync", "pwrite", "posix_fallocate", "replace", "unlink", "memmap.flush")
MAX_ADDS = 20000  # more than a writer gets through before it is killed


# -- the deterministic stream of adds ------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """What a trial's store and writer look like; drawn from the trial seed."""

    game: str
    num_envs: int
    stacked: bool
    stack_size: int
    capacity: int
    prioritized: bool
    truncate_probability: float
    mask_probability: float
    flush_probability: float
    kill: str  # "timer" or "inject"
    kill_delay: float  # seconds (timer trials)
    inject_call: int  # the N-th counted primitive call (inject trials)
    inject_after: bool  # kill after the call returned, not before it
    inject_commits_only: bool  # count only the primitives of a commit (not the pwrite of each frame)
    history_starts: bool  # stacked input: an episode starts with a stack of distinct frames (more frames than rows)
    fail_flushes: tuple[int, ...] = ()  # the flushes (1 = the first) that get an injected error
    fail_primitive: int = 1  # which primitive call inside such a flush raises it
    fail_errno: int = errno.ENOSPC
    kill_after_failure: bool = False  # the flush after a failed one is killed just before its header's rename
    encoded: bool = False  # the writer sends its steps through add_encoded (--add-encoded; one env)
    host: bool = False  # a sampling thread, forked children, interrupts (--host)


def draw_variant(seed: int, games: list[str], max_delay: float, samplers: list[str]) -> Variant:
    rng = np.random.default_rng([seed, 0])
    num_envs = int(rng.choice([1, 1, 3]))
    return Variant(
        game=str(rng.choice(games)),
        num_envs=num_envs,
        stacked=bool(rng.random() < 0.5),
        stack_size=int(rng.choice([1, 2, 4, 4])),
        capacity=int(rng.integers(20, 500)),
        prioritized=(samplers[0] if len(samplers) == 1 else ("uniform", "prioritized")[rng.random() < 0.4])
        == "prioritized",
        truncate_probability=float(rng.choice([0.0, 0.0, 0.05, 0.6, 1.0])),
        mask_probability=0.0 if num_envs == 1 else float(rng.choice([0.0, 0.3])),
        flush_probability=float(rng.choice([0.3, 0.05, 0.01, 0.001])),
        kill=str(rng.choice(["timer", "inject"])),
        kill_delay=float(rng.uniform(0.0, max_delay)),
        inject_call=int(rng.integers(1, 1500)),
        inject_after=bool(rng.random() < 0.5),
        inject_commits_only=bool(rng.random() < 0.5),
        history_starts=bool(rng.random() < 0.7),
        # Drawn last, so that the draws above (and the trials of earlier versions of this script) stay as they were.
        fail_flushes=tuple(sorted(int(n) for n in rng.choice(np.arange(1, 12), 3, replace=False)))
        if rng.random() < 0.5 else (),
        fail_primitive=int(rng.integers(1, 9)),
        fail_errno=int(rng.choice([errno.ENOSPC, errno.EIO])),
        kill_after_failure=bool(rng.random() < 0.5),
    )


@dataclass
class Expected:
    """One transition as the store must give it back."""

    step: int
    env: int
    obs: np.ndarray
    action: int
    reward: np.float32
    next_obs: np.ndarray
    terminated: bool
    truncated: bool


@dataclass
class _Env:
    position: int  # index into Stream.starts: the transition this env takes next
    episode: list[np.ndarray] | None = None  # the newest stack_size frames of its episode; None: ended
    last_step: int = -1


class Stream:
    """The adds of a trial, regenerated identically by the writer and the checker.

    Transitions come from a game's frame stream (``frames[t] -> frames[t + 1]`` where ``action[t] >= 0``);
    each env starts at its own place. The stream decides when an episode starts exactly as the store
    does (first add, after terminated or truncated, after the env's newest transition was evicted), so
    the obs and next_obs stacks it expects are the stacks the store must rebuild.
    """

    def __init__(self, variant: Variant, data: dict[str, np.ndarray], seed: int) -> None:
        self.variant = variant
        self.frames = data["frames"]
        self.terminated = data["terminated"]
        self.reward = data["reward"]
        self.starts = np.flatnonzero(data["action"][:-1] >= 0)
        self.rng = np.random.default_rng([seed, 1])
        offsets = self.rng.integers(0, len(self.starts), size=variant.num_envs)
        self.envs = [_Env(int(offset)) for offset in offsets]
        self.steps = 0  # transitions added so far
        self.adds = 0  # add calls so far

    def _stack(self, frames: list[np.ndarray]) -> np.ndarray:
        k = self.variant.stack_size
        return np.stack([frames[0]] * (k - len(frames)) + frames[-k:])

    def next_add(self) -> tuple[tuple[Any, ...], np.ndarray | None, list[Expected]]:
        """The arguments of the next ``add`` (and its env_mask), and the transitions it records."""
        v = self.variant
        mask = self.rng.random(v.num_envs) >= v.mask_probability
        cut = self.rng.random(v.num_envs) < v.truncate_probability
        oldest_stored = max(0, self.steps - v.capacity)
        columns: list[tuple[Any, ...]] = []
        recorded: list[Expected] = []
        for env_index, env in enumerate(self.envs):
            t = int(self.starts[env.position])
            following = int(self.starts[(env.position + 1) % len(self.starts)])
            episode = env.episode
            if episode is None or env.last_step < oldest_stored:
                first = t - v.stack_size + 1 if v.stacked and v.history_starts else t
                episode = [self.frames[p] for p in range(max(0, first), t + 1)]
            next_frame = self.frames[t + 1]
            terminated = bool(self.terminated[t])
            # The stream's next transition does not continue this one (a gap or the wrap): cut it here.
            truncated = bool(cut[env_index]) or (not terminated and following != t + 1)
            new_episode = (episode + [next_frame])[-v.stack_size :]
            step = self.steps + len(recorded)
            if v.stacked:
                obs, next_obs = self._stack(episode), self._stack(episode + [next_frame])
                if (terminated or truncated) and v.stack_size > 1 and step % 2 == 0:
                    # Every other ending brings a reset stack as next_obs (CleanRL's and SB3's at
                    # termination): stored as given, a whole stack of frames.
                    next_obs = np.stack([self.frames[following]] * v.stack_size)
            else:
                obs, next_obs = episode[-1], next_frame
            columns.append((obs, step, self.reward[t], next_obs, terminated, truncated))
            if mask[env_index]:
                recorded.append(
                    Expected(
                        step=step,
                        env=env_index,
                        obs=self._stack(episode),
                        action=step,
                        reward=np.float32(self.reward[t]),
                        next_obs=next_obs if v.stacked else self._stack(episode + [next_frame]),
                        terminated=terminated,
                        truncated=truncated,
                    )
                )
                env.episode = None if terminated or truncated else new_episode
                env.last_step = step
                env.position = (env.position + 1) % len(self.starts)
        self.steps += len(recorded)
        self.adds += 1
        # Every other add in the form add's fast path takes (a numpy action, no env_mask when every env
        # records): the crash must not lose what either path committed.
        fast_form = self.adds % 2 == 0
        if v.num_envs == 1:
            obs, step, reward, next_obs, terminated, truncated = columns[0]
            return (obs, np.int64(step) if fast_form else step, reward, next_obs, terminated, truncated), None, recorded
        stacked = tuple(np.stack([c[i] for c in columns]) for i in (0, 1, 2, 3))
        flags = tuple(np.array([c[i] for c in columns]) for i in (4, 5))
        arguments = (stacked[0], stacked[1].astype(np.int64), stacked[2].astype(np.float32), stacked[3], *flags)
        return arguments, None if fast_form and mask.all() else mask, recorded


# -- the writer ----------------------------------------------------------------------------------


class _Progress:
    """A few integers in memory shared with the parent: phase, transitions added, primitive calls."""

    FORMAT = "<qqq32s"

    def __init__(self) -> None:
        self.memory = mmap.mmap(-1, struct.calcsize(self.FORMAT))

    def set(self, phase: int, added: int, calls: int = -1, primitive: str = "") -> None:
        struct.pack_into(self.FORMAT, self.memory, 0, phase, added, calls, primitive.encode()[:32])

    def get(self) -> tuple[int, int, int, str]:
        phase, added, calls, primitive = struct.unpack_from(self.FORMAT, self.memory, 0)
        return phase, added, calls, primitive.rstrip(b"\0").decode()


def _install_injection(variant: Variant, progress: _Progress) -> None:
    """Wrap the file primitives the store calls so that the N-th call kills the process with SIGKILL."""
    calls = 0

    def wrap(owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        counted = label != "pwrite" or not variant.inject_commits_only

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += counted
            if counted and calls == variant.inject_call and not variant.inject_after:
                phase, added, _, _ = progress.get()
                progress.set(phase, added, calls, "before " + label)
                os.kill(os.getpid(), signal.SIGKILL)
            result = original(*args, **kwargs)
            if counted and calls == variant.inject_call and variant.inject_after:
                phase, added, _, _ = progress.get()
                progress.set(phase, added, calls, "after " + label)
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        setattr(owner, name, wrapper)

    for name in ("fsync", "fdatasync", "pwrite", "posix_fallocate", "replace", "unlink"):
        wrap(os, name, name)
    wrap(np.memmap, "flush", "memmap.flush")


class _Errors:
    """Arms an injected ``OSError``: the ``countdown``-th primitive call from now raises it (0: none armed)."""

    countdown = 0
    injected = 0
    kill_at_replace = False  # armed after a failed flush (``Variant.kill_after_failure``)


def _install_errors(variant: Variant, errors: _Errors) -> None:
    def wrap(owner: Any, name: str) -> None:
        original = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if name == "replace" and errors.kill_at_replace:
                os.kill(os.getpid(), signal.SIGKILL)
            if errors.countdown > 0:
                errors.countdown -= 1
                if errors.countdown == 0:
                    errors.injected += 1
                    raise OSError(variant.fail_errno, f"{os.strerror(variant.fail_errno)} (injected into {name})")
            return original(*args, **kwargs)

        setattr(owner, name, wrapper)

    for name in ("fsync", "fdatasync", "pwrite", "posix_fallocate", "replace", "unlink"):
        wrap(os, name)
    wrap(np.memmap, "flush")


class _Host:
    """What a training process does around its store (``--host``): a thread that samples it, children
    forked now and then that exit at once, and interrupts inside its adds and flushes (SIGALRM raising
    KeyboardInterrupt, as Ctrl-C's handler does), each call retried as a loop that catches them would."""

    FORK_EVERY = 50

    def __init__(self, store: ReplayStore, seed: int) -> None:
        self.calling = False
        self.adds = 0
        signal.signal(signal.SIGALRM, self._on_alarm)
        period = float(np.random.default_rng([seed, 5]).uniform(0.002, 0.01))
        signal.setitimer(signal.ITIMER_REAL, period, period)
        threading.Thread(target=self._sample, args=(store, seed), daemon=True).start()

    def _on_alarm(self, signum: int, frame: object) -> None:
        if self.calling:
            self.calling = False  # one interrupt to a call: none inside the store's own handling of it
            raise KeyboardInterrupt

    @staticmethod
    def _sample(store: ReplayStore, seed: int) -> None:
        rng = np.random.default_rng([seed, 6])
        while not store.closed:
            if len(store):
                store.sample(8, rng)
            time.sleep(0.0005)

    def call(self, store: ReplayStore, call: Any) -> None:
        """``call()`` until it returns, or until an add it makes counted (an interrupt after the count)."""
        while True:
            before = store.transitions_added
            try:
                self.calling = True
                call()
                return
            except KeyboardInterrupt:
                if store.transitions_added != before:
                    return
            finally:
                self.calling = False  # also when the call raised something else (an injected ENOSPC)

    def added(self) -> None:
        """After each add: now and then a child that exits at once, as an env worker that fails would."""
        self.adds += 1
        if self.adds % self.FORK_EVERY == 0:
            pid = os.fork()
            if pid == 0:
                # The interpreter's exit as it concerns the store: the inherited writer's __del__ and
                # autocommit's exit commit (not every exit function: the trials' temporary directory is
                # the parent's, and a child's exit must not delete it).
                gc.collect()
                autocommit._close_open_writers()
                os._exit(0)
            os.waitpid(pid, 0)


def run_writer(path: Path, side_path: Path, variant: Variant, data: dict[str, np.ndarray], seed: int,
               progress: _Progress) -> None:
    """The writer process's whole life (it never returns normally: it is killed, or it exits)."""
    # The side file is written with the primitives as they are before any injection.
    side = os.open(side_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    failed = os.open(side_path.with_name("failed_flushes.txt"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    write, fsync = os.write, os.fsync
    if variant.kill == "inject":
        _install_injection(variant, progress)
    errors = _Errors()
    if variant.fail_flushes:
        _install_errors(variant, errors)
    flushes = 0
    progress.set(1, 0)
    store = ReplayStore.open(path, "r+")
    host = _Host(store, seed) if variant.host else None
    stream = Stream(variant, data, seed)
    rng = np.random.default_rng([seed, 2])
    send_sizes = np.random.default_rng([seed, 4])
    for _ in range(MAX_ADDS):
        phase = 3 if len(store) == store.capacity else 2
        if variant.encoded:
            adds = [stream.next_add()[0] for _ in range(int(send_sizes.integers(1, 33)))]
            # A send may commit part-way: up to all of its steps may count after the kill.
            progress.set(phase, store.transitions_added + len(adds))
            send = encoded_send(adds, variant.stacked, BUFFER_FORMS[int(send_sizes.integers(len(BUFFER_FORMS)))])
            store.add_encoded(*send)
            _reuse(send[0])
        else:
            arguments, mask, _ = stream.next_add()
            progress.set(phase, store.transitions_added)
            if host is None:
                store.add(*arguments, env_mask=mask)
            else:
                host.call(store, lambda: store.add(*arguments, env_mask=mask))
                host.added()
        if rng.random() < variant.flush_probability:
            progress.set(4, store.transitions_added)
            flushes += 1
            errors.countdown = variant.fail_primitive if flushes in variant.fail_flushes else 0
            try:
                store.flush() if host is None else host.call(store, store.flush)
            except OSError:
                if not errors.injected:
                    raise
                write(failed, b"%d\n" % store.transitions_added)
                errors.kill_at_replace = variant.kill_after_failure
                continue  # a failed flush: the writer goes on, as a training loop that logs it would
            finally:
                errors.countdown, errors.injected = 0, 0
            progress.set(5, store.transitions_added)
            write(side, b"%d\n" % store.transitions_added)
            fsync(side)
        if variant.prioritized and len(store) and rng.random() < 0.2:
            progress.set(6, store.transitions_added)
            batch = store.sample(8, rng)
            progress.set(7, store.transitions_added)
            store.update_priorities(batch.index, rng.exponential(2.0, size=8))
    progress.set(8, store.transitions_added)
    store.close()
    write(side, b"%d\n" % stream.steps)
    fsync(side)
    progress.set(9, stream.steps)


# How a send's blocks arrive (the encoded path's inputs): as bytes, or as a receive buffer viewed as rows of bytes
# or as 4-byte words (``ndarray.data`` of an (n, k) uint8 or uint32 array), which the sender overwrites
# as soon as the call returns (a reused buffer).
BUFFER_FORMS = ("bytes", "rows", "words")


def _received(data: bytes, form: str) -> object:
    """The blocks in a fresh receive buffer of this form (bytes as they are)."""
    if form == "bytes":
        return data
    buffer = np.frombuffer(data, np.uint8).copy()
    if form == "words" and len(buffer) % 4 == 0:
        return buffer.view(np.uint32).reshape(2, -1).data if len(buffer) % 8 == 0 else buffer.view(np.uint32).data
    rows = next(k for k in (4, 3, 2, 1) if len(buffer) % k == 0)
    return buffer.reshape(rows, -1).data


def _reuse(frames: Any) -> None:
    """The sender reuses its receive buffer once the call returned: what was written must not change."""
    data = frames.data
    if isinstance(data, memoryview) and isinstance(data.obj, np.ndarray) and data.obj.flags.writeable:
        data.obj[...] = 0


def encoded_send(adds: list[tuple[Any, ...]], stacked: bool, form: str = "bytes") -> tuple[Any, ...]:
    """``add_encoded``'s arguments for consecutive one-env adds: their distinct frames, encoded (the blocks
    in a receive buffer of ``form``, see ``BUFFER_FORMS``), and each step's obs and next_obs as indices
    into them."""
    position: dict[bytes, int] = {}
    frames: list[np.ndarray] = []

    def index(frame: np.ndarray) -> int:
        key = frame.tobytes()
        if key not in position:
            position[key] = len(frames)
            frames.append(frame)
        return position[key]

    def indices(value: np.ndarray) -> Any:
        return [index(frame) for frame in value] if stacked else index(value)

    obs = np.array([indices(add[0]) for add in adds])
    next_obs = np.array([indices(add[3]) for add in adds])
    encoded = encode_frames(np.stack(frames))
    received = EncodedFrames(_received(encoded.data, form), encoded.lengths, encoded.checksums,  # type: ignore[arg-type]
                             encoded.seeds, encoded.frame_shape)
    return (received, obs, np.array([int(add[1]) for add in adds], np.int64),
            np.array([add[2] for add in adds], np.float32), next_obs, np.array([bool(add[4]) for add in adds]),
            np.array([bool(add[5]) for add in adds]))


# -- the checker ---------------------------------------------------------------------------------


class CheckFailure(AssertionError):
    pass


class _Stage:
    """Which part of the check is running, for the report of a failure."""

    name = "open"


def _compare(batch: Any, expected: list[Expected], what: str) -> None:
    fields = {
        "index": np.array([e.step for e in expected], np.int64),
        "env_index": np.array([e.env for e in expected], np.int64),
        "obs": np.stack([e.obs for e in expected]),
        "next_obs": np.stack([e.next_obs for e in expected]),
        "action": np.array([e.action for e in expected], np.int64),
        "reward": np.array([e.reward for e in expected], np.float32).view(np.uint32),
        "terminated": np.array([e.terminated for e in expected]),
        "truncated": np.array([e.truncated for e in expected]),
    }
    for name, want in fields.items():
        got = np.asarray(getattr(batch, name))
        if name == "reward":
            got = got.view(np.uint32)  # bit-exact, not merely equal
        if got.shape != want.shape or not np.array_equal(got, want):
            rows = [i for i in range(min(len(got), len(want))) if not np.array_equal(got[i], want[i])]
            first = rows[0] if rows else 0
            raise CheckFailure(
                f"{what}: batch.{name} differs at {len(rows)} of {len(want)} transitions "
                f"(first: step {expected[first].step}); shapes {got.shape} vs {want.shape}"
            )


def _lookup(by_step: dict[int, Expected], steps: np.ndarray, what: str) -> list[Expected]:
    outside = [int(s) for s in steps if int(s) not in by_step]
    if outside:
        raise CheckFailure(f"{what}: returned step {outside[0]}, which is not stored")
    return [by_step[int(s)] for s in steps]


def _check_contents(store: ReplayStore, expected: dict[int, Expected], what: str) -> int:
    """Every stored transition against the stream; returns how many were checked."""
    steps = list(store.stored_steps)
    missing = [s for s in steps if s not in expected]
    if missing:
        raise CheckFailure(f"{what}: the store holds step {missing[0]} that the stream never recorded")
    for lo in range(0, len(steps), 128):
        part = steps[lo : lo + 128]
        _compare(store.read(np.array(part, np.int64)), [expected[s] for s in part], what)
    return len(steps)


def _last_recorded(side_path: Path) -> int:
    """The newest committed count the writer wrote in full (a torn last line is ignored)."""
    if not side_path.exists():
        return 0
    lines = side_path.read_bytes().split(b"\n")[:-1]
    return int(lines[-1]) if lines else 0


@dataclass
class TrialResult:
    seed: int
    variant: Variant
    killed: bool
    phase: str
    primitive: str
    recorded: int
    committed: int
    added_before_kill: int
    checked: int
    lost: int
    frame_table_generation: int
    segments_released: bool
    evicted: bool
    failure: str | None
    seconds: float
    failed_flushes: int = 0  # flushes that raised an injected error before the kill


def _check_committed_priorities(path: Path, store: ReplayStore) -> None:
    """The committed priorities of the stored slots (``priorities.tree``, see mmreplay.sampling.priority_file) have the
    CRC the header commits: the store reopened with exactly the header's priorities."""
    from mmreplay.sampling.priority_file import leaf_checksum, slot_ranges
    from mmreplay.sampling.sum_tree import tree_size

    state = json.loads((path / "header.json").read_text())["commit"]["sampler_state"]
    if "checksum" not in state:
        return  # nothing committed with priorities yet
    row_slots = json.loads((path / "header.json").read_text())["layout"]["row_slots"]
    size = tree_size(row_slots)
    leaves = np.fromfile(path / "priorities.tree", "<f8", count=2 * size)
    stored = store.stored_steps
    parts = [leaves[size + start : size + stop] for start, stop in slot_ranges(stored, row_slots)]
    if leaf_checksum(*parts) != state["checksum"]:
        raise CheckFailure("the committed priorities are not the header's (priorities of a commit that never "
                           "reached the header survived)")


def check_store(path: Path, variant: Variant, data: dict[str, np.ndarray], seed: int, recorded: int,
                added_before_kill: int, stage: _Stage) -> tuple[int, int]:
    """Open the crashed store and check it; returns (committed count, transitions checked)."""
    stage.name = "open"
    for attempt in range(500):
        try:
            store = ReplayStore.open(path, "r+")
            break
        except StoreLockedError:
            # A child forked just before the kill (--host) shares the lock until it first runs, which drops
            # it (writer_lock): a moment later on a busy machine.
            if not variant.host or attempt == 499:
                raise
            time.sleep(0.01)
    try:
        if variant.prioritized:
            stage.name = "priorities"
            _check_committed_priorities(path, store)
        stage.name = "contents"
        committed = store.transitions_added
        if committed < recorded:
            return committed, 0  # the caller counts the loss
        if committed > max(added_before_kill, recorded):
            raise CheckFailure(f"the store counts {committed} transitions; the writer had added {added_before_kill}")
        if len(store) != min(committed, variant.capacity):
            raise CheckFailure(f"len(store) is {len(store)} for {committed} added, capacity {variant.capacity}")
        stream = Stream(variant, data, seed)
        expected: deque[Expected] = deque(maxlen=variant.capacity)
        while stream.steps < committed:
            expected.extend(stream.next_add()[2])
        if stream.steps != committed:
            raise CheckFailure(f"the store counts {committed} transitions, inside an add (it ends at {stream.steps})")
        by_step = {e.step: e for e in expected}
        checked = _check_contents(store, by_step, "after the crash")
        rng = np.random.default_rng([seed, 3])
        stage.name = "sample"
        if len(store):
            batch = store.sample(32, rng)
            _compare(batch, _lookup(by_step, batch.index, "sample after the crash"), "sample after the crash")
            if not np.all(np.isfinite(batch.weight) & (batch.weight > 0) & (batch.weight <= 1)):
                raise CheckFailure(f"sample after the crash: weights are not in (0, 1]: {batch.weight}")
            if variant.prioritized:
                store.update_priorities(batch.index, rng.exponential(1.0, size=32))
        # Appending continues where the commit left off, and survives a reopen.
        stage.name = "append"
        for _ in range(5):
            arguments, mask, recorded_now = stream.next_add()
            store.add(*arguments, env_mask=mask)
            expected.extend(recorded_now)
    finally:
        store.close()
    stage.name = "reopen"
    with ReplayStore.open(path, "r") as store:
        if store.transitions_added != stream.steps:
            raise CheckFailure(f"after appending: {store.transitions_added} transitions; expected {stream.steps}")
        by_step = {e.step: e for e in expected}
        checked += _check_contents(store, by_step, "after appending and reopening")
        if len(store):
            batch = store.sample(16, rng)
            _compare(batch, _lookup(by_step, batch.index, "sample after reopening"), "sample after reopening")
            if not np.all(np.isfinite(batch.weight) & (batch.weight > 0) & (batch.weight <= 1)):
                raise CheckFailure(f"sample after reopening: weights are not in (0, 1]: {batch.weight}")
    return committed, checked


def run_trial(seed: int, data: dict[str, dict[str, np.ndarray]], work: Path, *, max_delay: float,
              samplers: list[str], keep_failures: Path | None = None, frame_encoding: str = "lz4",
              add_encoded: bool = False, host: bool = False) -> TrialResult:
    started = time.perf_counter()
    variant = draw_variant(seed, sorted(data), max_delay, samplers)
    if add_encoded:
        variant = replace(variant, encoded=True, num_envs=1, mask_probability=0.0)
    if host:
        variant = replace(variant, host=True)
    game = data[variant.game]
    trial_dir = Path(tempfile.mkdtemp(prefix=f"trial{seed}-", dir=work))
    path, side_path = trial_dir / "store.mmr", trial_dir / "committed.txt"
    failed_path = trial_dir / "failed_flushes.txt"
    sampler = PrioritizedSampler(alpha=0.6) if variant.prioritized else None
    ReplayStore.create(
        path, frame_shape=game["frames"].shape[1:], capacity=variant.capacity, stack_size=variant.stack_size,
        num_envs=variant.num_envs, action_dtype=np.int64, sampler=sampler, frame_encoding=frame_encoding,
    ).close()
    progress = _Progress()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the writer
        code = 0
        try:
            log = os.open(trial_dir / "writer.log", os.O_WRONLY | os.O_CREAT, 0o644)
            os.dup2(log, 2)
            run_writer(path, side_path, variant, game, seed, progress)
        except BaseException:
            traceback.print_exc()
            code = 3
        finally:
            os._exit(code)
    # An injected kill that the writer does not reach in time becomes a timer kill.
    deadline = time.monotonic() + (variant.kill_delay if variant.kill == "timer" else 2 * max_delay)
    status = 0
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(0.0005)
    phase_code, added_before_kill, _, primitive = progress.get()
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    recorded = _last_recorded(side_path)
    failure, committed, checked = None, -1, 0
    generation, released = 0, False
    stage = _Stage()
    stage.name = "writer"
    try:
        if not killed and os.waitstatus_to_exitcode(status) != 0:
            log = (trial_dir / "writer.log").read_text(errors="replace")
            raise CheckFailure(f"the writer failed before it was killed:\n{log}")
        header = json.loads((path / "header.json").read_text())
        generation = header["commit"]["frame_table_generation"]
        segments = sorted(int(p.stem) for p in (path / "frames").glob("*.seg"))
        released = bool(segments) and segments[0] > 0
        committed, checked = check_store(
            path, variant, game, seed, recorded, max(added_before_kill, recorded), stage
        )
    except Exception as error:  # every failure is reported with its trial seed and where it happened
        where = traceback.extract_tb(error.__traceback__)[-1]
        failure = (
            f"{stage.name}: {type(error).__name__}: {error} "
            f"[{Path(where.filename).name}:{where.lineno} in {where.name}]"
        )
    result = TrialResult(
        seed=seed,
        variant=variant,
        killed=killed,
        phase=PHASES.get(phase_code, str(phase_code)),
        primitive=primitive,
        recorded=recorded,
        committed=committed,
        added_before_kill=added_before_kill,
        checked=checked,
        lost=max(0, recorded - committed) if committed >= 0 else 0,
        frame_table_generation=generation,
        segments_released=released,
        evicted=max(committed, added_before_kill) > variant.capacity,
        failure=failure,
        seconds=time.perf_counter() - started,
        failed_flushes=len(failed_path.read_bytes().splitlines()) if failed_path.exists() else 0,
    )
    if (failure or result.lost) and keep_failures is not None:
        keep_failures.mkdir(parents=True, exist_ok=True)
        shutil.copytree(trial_dir, keep_failures / trial_dir.name, dirs_exist_ok=True)
    shutil.rmtree(trial_dir, ignore_errors=True)
    return result


# -- running many trials -------------------------------------------------------------------------


def load_games(games: list[str], max_frames: int | None = None) -> dict[str, dict[str, np.ndarray]]:
    """The real frame streams of ``games`` (the first ``max_frames`` of each, else 20,000), from atari_frames."""
    loaded = {}
    for game in games:
        stream = atari_frames.load(game, max_frames or atari_frames.BENCHMARK_FRAMES)
        loaded[game] = {key: stream[key] for key in ("frames", "action", "reward", "terminated")}
    return loaded


@dataclass
class Summary:
    trials: int = 0
    killed: int = 0
    transitions_checked: int = 0
    losses: int = 0
    failures: list[str] = field(default_factory=list)
    phases: Counter = field(default_factory=Counter)
    primitives: Counter = field(default_factory=Counter)
    variants: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("phases", "primitives", "variants"):
            data[name] = dict(sorted(getattr(self, name).items(), key=lambda item: -item[1]))
        return data


def run_trials(trials: int, seed: int, *, games: list[str] | None = None, max_frames: int | None = None,
               max_delay: float = 0.5, samplers: list[str] | None = None, work: Path | None = None,
               keep_failures: Path | None = None, on_result: Any = None, frame_encoding: str = "lz4",
               add_encoded: bool = False, host: bool = False) -> Summary:
    """Run trials with seeds ``seed, seed + 1, ...``; returns the totals."""
    data = load_games(games or ["pong"], max_frames)
    summary = Summary()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mmreplay-crash-", dir=work) as directory:
        for trial_seed in range(seed, seed + trials):
            result = run_trial(
                trial_seed, data, Path(directory), max_delay=max_delay,
                samplers=samplers or ["uniform", "prioritized"], keep_failures=keep_failures,
                frame_encoding=frame_encoding, add_encoded=add_encoded, host=host,
            )
            summary.trials += 1
            summary.killed += result.killed
            summary.transitions_checked += result.checked
            summary.losses += result.lost
            if result.failure or result.lost:
                summary.failures.append(f"seed {trial_seed}: {result.failure or f'lost {result.lost}'} ({result.variant})")
            summary.phases[result.phase] += 1
            if result.primitive:
                summary.primitives[result.primitive] += 1
            v = result.variant
            summary.variants["vector adds" if v.num_envs > 1 else "single adds"] += 1
            summary.variants["stacked input" if v.stacked else "frame input"] += 1
            summary.variants["prioritized" if v.prioritized else "uniform"] += 1
            summary.variants[f"kill by {v.kill}"] += 1
            summary.variants["wrapped around (eviction)"] += result.evicted
            summary.variants["frame table grew"] += result.frame_table_generation > 0
            summary.variants["segments released"] += result.segments_released
            summary.variants["finished before the kill"] += not result.killed
            summary.variants["killed after a failed flush (ENOSPC/EIO injected)"] += result.failed_flushes > 0
            summary.variants["failed flushes"] += result.failed_flushes
            if on_result is not None:
                on_result(result)
    summary.seconds = time.perf_counter() - started
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0, help="seed of the first trial (trial i uses seed + i)")
    parser.add_argument("--games", default="pong",
                        help=f"comma-separated, of {','.join(atari_frames.GAMES)} (default pong)")
    parser.add_argument("--samplers", default="uniform,prioritized", help="samplers to draw trials from")
    parser.add_argument("--frame-encoding", choices=("lz4", "lz4-reference"), default="lz4",
                        help="how the stores compress frames (ReplayStore.create's frame_encoding)")
    parser.add_argument("--add-encoded", action="store_true",
                        help="the writer records through add_encoded (one env, sends of 1 to 32 steps)")
    parser.add_argument("--host", action="store_true",
                        help="the writer also samples on a thread, forks children that exit, and is interrupted")
    parser.add_argument("--max-delay", type=float, default=0.5, help="longest timer delay before the kill, seconds")
    parser.add_argument("--keep-failures", type=Path, help="copy the directory of each failed trial here")
    parser.add_argument("--json", nargs="?", const="-", help="also write the summary as JSON (to PATH, or stdout)")
    parser.add_argument("--progress", type=int, default=0, help="print a line every N trials")
    args = parser.parse_args(argv)

    count = 0

    def report(result: TrialResult) -> None:
        nonlocal count
        count += 1
        if result.failure or result.lost:
            print(f"FAILED seed {result.seed}: {result.failure or f'lost {result.lost}'}", flush=True)
        if args.progress and count % args.progress == 0:
            print(f"... {count} trials", flush=True)

    summary = run_trials(
        args.trials, args.seed, games=args.games.split(","), max_delay=args.max_delay,
        samplers=args.samplers.split(","), frame_encoding=args.frame_encoding, add_encoded=args.add_encoded,
        host=args.host,
        keep_failures=args.keep_failures, on_result=report,
    )
    print(f"trials: {summary.trials} ({summary.killed} killed, {summary.trials - summary.killed} finished first)")
    print(f"transitions checked: {summary.transitions_checked:,}")
    print(f"losses (committed transitions lost): {summary.losses}")
    print(f"failures: {len(summary.failures)}")
    for failure in summary.failures:
        print(f"  {failure}")
    print("killed in: " + ", ".join(f"{k} {v}" for k, v in summary.phases.most_common()))
    if summary.primitives:
        kinds = Counter(name.split(" ", 1)[1] for name in summary.primitives.elements())
        print("injected kills at: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()))
    print("trials with: " + ", ".join(f"{k} {v}" for k, v in summary.variants.most_common()))
    print(f"time: {summary.seconds:.1f} s ({summary.seconds / max(1, summary.trials):.2f} s a trial)")
    if args.json:
        text = json.dumps(summary.as_dict(), indent=1)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text)
    return 0 if summary.losses == 0 and not summary.failures else 1


if __name__ == "__main__":
    sys.exit(main())
