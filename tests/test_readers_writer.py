"""One writer, many readers, across processes, on real Pong frames.

A writer process appends for several seconds to a small store (so wrap-around eviction and segment
release happen under the readers), committing every few adds. Each transition encodes its step in its
action and reward, so a reader checks every batch it gets: the step, action and reward agree, and the
obs and next_obs pixels are exactly the frames of the stream at that step. Meanwhile a second writer is
refused, and once the writer is killed with SIGKILL, a new writer can open the store.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from atari_data import load_stream

from mmreplay import ReplayStore, StoreLockedError

STACK = 4
CAPACITY = 300
WRITE_SECONDS = 5.0
READERS = 3
MAX_STEPS = 200_000
COMMIT_DEADLINE = 60.0


def _load() -> dict[str, np.ndarray]:
    return load_stream("pong", ("frames", "action", "terminated"), 3000)


class Stream:
    """Transition ``step`` is the frame stream's transition at position ``t[step]``, in an episode whose
    first obs frame is at position ``start[step]``; it terminated or was truncated as ``ended`` says."""

    def __init__(self, data: dict[str, np.ndarray], steps: int) -> None:
        self.frames = data["frames"]
        positions = np.flatnonzero(data["action"][:-1] >= 0)
        self.t = np.empty(steps, np.int64)
        self.start = np.empty(steps, np.int64)
        self.terminated = np.empty(steps, bool)
        self.truncated = np.empty(steps, bool)
        start = -1
        for step in range(steps):
            t = int(positions[step % len(positions)])
            following = int(positions[(step + 1) % len(positions)])
            if start < 0:
                start = t
            self.t[step], self.start[step] = t, start
            self.terminated[step] = data["terminated"][t]
            self.truncated[step] = not self.terminated[step] and following != t + 1
            if self.terminated[step] or self.truncated[step]:
                start = -1

    def stacks(self, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t, start = self.t[steps][:, None], self.start[steps][:, None]
        obs = np.maximum(start, t + np.arange(-STACK + 1, 1))
        return self.frames[obs], self.frames[np.maximum(start, t + np.arange(-STACK + 2, 2))]


def _writer(path: Path, data: dict[str, np.ndarray], stream: Stream, writes: multiprocessing.Value) -> None:
    store = ReplayStore.open(path, "r+")
    for step in range(MAX_STEPS):
        t = int(stream.t[step])
        store.add(stream.frames[t], step, float(step), stream.frames[t + 1],
                  bool(stream.terminated[step]), bool(stream.truncated[step]))
        if step % 5 == 4:
            store.flush()
            writes.value = step + 1


def _check(batch, stream: Stream) -> None:
    index = batch.index
    assert np.array_equal(batch.action, index), "a batch mixes the actions of other transitions"
    assert np.array_equal(batch.reward, index.astype(np.float32)), "a batch mixes the rewards of other transitions"
    obs, next_obs = stream.stacks(index)
    assert np.array_equal(batch.obs, obs), f"wrong obs pixels for steps {index.tolist()}"
    assert np.array_equal(batch.next_obs, next_obs), f"wrong next_obs pixels for steps {index.tolist()}"
    assert np.array_equal(batch.terminated, stream.terminated[index])
    assert np.array_equal(batch.truncated, stream.truncated[index])


def _reader(path: Path, stream: Stream, stop: multiprocessing.Event, results: multiprocessing.Queue,
            number: int) -> None:
    reads = checked = 0
    seen: set[int] = set()
    error = None
    try:
        with ReplayStore.open(path, "r") as store:
            rng = np.random.default_rng(number)
            while not stop.is_set():
                if number == 0 and reads % 4 == 0:
                    store.refresh()  # one reader also refreshes explicitly; the others rely on sample/read
                if len(store) == 0:
                    store.refresh()
                    continue
                batch = store.sample(32, rng)
                _check(batch, stream)
                newest = np.arange(max(store.stored_steps.start, store.stored_steps.stop - 8), store.stored_steps.stop)
                _check(store.read(newest), stream)
                reads += 2
                checked += len(batch.index) + len(newest)
                seen.add(store.transitions_added)
    except BaseException as caught:  # reported to the test
        error = f"{type(caught).__name__}: {caught}"
    results.put({"reads": reads, "checked": checked, "commits_seen": len(seen), "error": error})


def _second_writer(path: Path, results: multiprocessing.Queue) -> None:
    try:
        ReplayStore.open(path, "r+").close()
        results.put("opened")
    except StoreLockedError as error:
        results.put(f"refused: {error}")
    except BaseException as error:
        results.put(f"other error: {type(error).__name__}: {error}")


def _wait_for_commits(writes: multiprocessing.Value, count: int, not_before: float) -> None:
    """Sleep until ``not_before`` (a perf_counter time) and until the writer has committed more than
    ``count`` transitions, or at most COMMIT_DEADLINE seconds; the test's asserts then report a slow writer."""
    deadline = time.perf_counter() + COMMIT_DEADLINE
    while time.perf_counter() < not_before or (writes.value <= count and time.perf_counter() < deadline):
        time.sleep(0.05)


# Frames compressed against reference frames (a commit keeps the references of stored frames; a reader
# behind the writer finds a released reference like a released frame) get a shorter run.
@pytest.mark.parametrize("frame_encoding, write_seconds", [("lz4", WRITE_SECONDS), ("lz4-reference", 3.0)])
def test_readers_see_exact_committed_data_while_one_writer_appends(
    tmp_path: Path, frame_encoding: str, write_seconds: float
) -> None:
    data = _load()
    stream = Stream(data, MAX_STEPS)
    path = tmp_path / "pong.mmr"
    ReplayStore.create(
        path, frame_shape=(84, 84), capacity=CAPACITY, stack_size=STACK, frame_encoding=frame_encoding
    ).close()
    context = multiprocessing.get_context("fork")
    # No lock: the writer is SIGKILLed below, and one killed while it held a Value's lock (`writes.value = ...`)
    # would leave the test's next read of it waiting forever (a CI run of 1bce9be hung there). An aligned
    # 8-byte store is read whole.
    writes = context.Value("q", 0, lock=False)
    stop = context.Event()
    results = context.Queue()
    started = time.perf_counter()
    writer = context.Process(target=_writer, args=(path, data, stream, writes))
    writer.start()
    readers = [context.Process(target=_reader, args=(path, stream, stop, results, i)) for i in range(READERS)]
    for reader in readers:
        reader.start()
    # Timed phases, each stretched until the writer has made its progress: fsync (every commit) costs
    # milliseconds on some disks, and readers share the cores with the writer.
    _wait_for_commits(writes, CAPACITY, started + write_seconds / 2)

    refusals = context.Queue()
    second = context.Process(target=_second_writer, args=(path, refusals))
    second.start()
    second.join(10)
    refusal = refusals.get(timeout=10)
    assert refusal.startswith("refused: "), refusal
    assert "already open for writing" in refusal

    _wait_for_commits(writes, 2 * CAPACITY + 50, started + write_seconds)
    os.kill(writer.pid, signal.SIGKILL)
    writer.join(10)
    committed_by_writer = writes.value
    time.sleep(0.3)  # the readers go on over the crashed writer's store
    stop.set()
    reports = [results.get(timeout=30) for _ in readers]
    for reader in readers:
        reader.join(10)
    duration = time.perf_counter() - started

    reads = sum(r["reads"] for r in reports)
    checked = sum(r["checked"] for r in reports)
    print(f"\nreaders/writer: {duration:.1f} s, {committed_by_writer} transitions committed by the writer, "
          f"{READERS} readers made {reads} reads ({checked} transitions checked), commits seen per reader: "
          f"{[r['commits_seen'] for r in reports]}")
    assert [r["error"] for r in reports] == [None] * READERS
    assert committed_by_writer > 2 * CAPACITY, "the writer should have wrapped around"
    assert all(r["reads"] > 10 for r in reports)
    assert all(r["commits_seen"] > 5 for r in reports), "readers must pick up new commits"

    # The OS released the killed writer's lock: a new writer opens, finds every commit, and appends.
    with ReplayStore.open(path, "r+") as store:
        assert store.transitions_added >= committed_by_writer
        stored = np.arange(store.stored_steps.start, store.stored_steps.stop)
        _check(store.read(stored), stream)
        step = store.transitions_added
        t = int(stream.t[step])
        store.add(stream.frames[t], step, float(step), stream.frames[t + 1],
                  bool(stream.terminated[step]), bool(stream.truncated[step]))
    with ReplayStore.open(path, "r") as store:
        assert store.transitions_added == step + 1
        _check(store.read(np.array([step])), stream)
