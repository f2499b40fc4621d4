"""Crash safety: a writer killed with SIGKILL at any moment loses nothing that a flush committed.

The short runs of ``scripts/crash_stress.py`` here (the script's own functions) fork writers that append
real Pong frames and are killed at random moments or at a chosen file primitive of a commit; the checker
then requires that the store opens, holds at least every committed transition, bit-exact, and that
sampling and appending go on.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
from atari_data import load_stream
from reference_windows import assert_distribution

from mmreplay import PrioritizedSampler, ReplayStore

REPO = Path(__file__).resolve().parents[1]


def _crash_stress():
    load_stream("pong", ("frames",), 2500)  # the trials' frames: recorded now, or the test fails saying how
    spec = importlib.util.spec_from_file_location("crash_stress", REPO / "scripts" / "crash_stress.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["crash_stress"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


# least_checked only shows that the trials wrote something: this machine checks ~20x as many, and a
# machine whose fsync is slow (CI's) commits several times fewer.
@pytest.mark.parametrize(
    ("trials", "seed", "frame_encoding", "least_killed", "least_checked"),
    [(20, 5000, "lz4", 15, 400), (12, 7000, "lz4-reference", 8, 200)],
)
def test_kills_of_a_uniform_store_lose_no_committed_transition(
    tmp_path: Path, trials: int, seed: int, frame_encoding: str, least_killed: int, least_checked: int
) -> None:
    """With "lz4-reference" too: a reopened writer starts new reference groups, and no committed frame
    depends on one that the crash lost."""
    stress = _crash_stress()
    summary = stress.run_trials(trials, seed, max_frames=2500, max_delay=0.3, samplers=["uniform"], work=tmp_path,
                                frame_encoding=frame_encoding)
    print(f"trials {summary.trials}, transitions checked {summary.transitions_checked}, losses {summary.losses}")
    assert summary.trials == trials
    assert summary.losses == 0
    assert summary.failures == []
    assert summary.killed >= least_killed
    assert summary.transitions_checked > least_checked


def test_kills_of_a_writer_that_adds_encoded_sends_lose_no_committed_transition(tmp_path: Path) -> None:
    """Sends of up to 32 steps through ``add_encoded`` (runs of steps written at once): a kill inside a send,
    or inside a commit it makes part-way, loses nothing committed."""
    stress = _crash_stress()
    summary = stress.run_trials(12, 8000, max_frames=2500, max_delay=0.3, work=tmp_path, add_encoded=True)
    assert summary.trials == 12
    assert summary.losses == 0
    assert summary.failures == []
    assert summary.killed >= 8


def test_kills_of_a_writer_that_forks_samples_on_a_thread_and_is_interrupted_lose_no_committed_transition(
    tmp_path: Path,
) -> None:
    """``--host``: the writer also samples on a thread, forks a child every 50 adds that runs the
    exit commit (which for its inherited writer must write nothing) and exits, and is interrupted inside
    its adds and flushes every few milliseconds, retrying them; kills at any moment lose nothing
    committed, and a child's exit never writes its stale header over the writer's."""
    stress = _crash_stress()
    summary = stress.run_trials(10, 9000, max_frames=2500, max_delay=1.0, work=tmp_path, host=True)
    assert summary.trials == 10
    assert summary.losses == 0
    assert summary.failures == []
    assert summary.transitions_checked > 0


def test_kills_of_a_prioritized_store_lose_no_committed_transition(tmp_path: Path) -> None:
    """As above, and sampling by the committed priorities and ``update_priorities`` work after the crash."""
    stress = _crash_stress()
    summary = stress.run_trials(10, 6000, max_frames=2500, max_delay=0.3, samplers=["prioritized"], work=tmp_path)
    assert summary.trials == 10
    assert summary.losses == 0
    assert summary.failures == []


def _frame(i: int) -> np.ndarray:
    return np.full((2, 2), i, np.uint8)


def test_prioritized_store_samples_stored_steps_after_a_crash_that_followed_evictions(tmp_path: Path) -> None:
    path = tmp_path / "store.mmr"
    pid = os.fork()
    if pid == 0:  # commit 10 transitions, add 10 more (evicting all committed ones in memory), die
        try:
            store = ReplayStore.create(path, frame_shape=(2, 2), capacity=10, stack_size=1,
                                       sampler=PrioritizedSampler())
            for i in range(10):
                store.add(_frame(i), i, 0.0, _frame(i + 1), False, False)
            store.flush()
            for i in range(10, 20):
                store.add(_frame(i), i, 0.0, _frame(i + 1), False, False)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    with ReplayStore.open(path, "r+") as store:
        assert list(store.stored_steps) == list(range(10))
        batch = store.sample(8, rng=0)
        assert set(batch.index.tolist()) <= set(range(10))
        assert np.all(np.isfinite(batch.weight))


def _raw_leaves(path: Path, steps: range) -> np.ndarray:
    """The committed leaves of ``steps`` as the file holds them (README layout: leaf of slot at
    float64 entry ``size + slot`` of priorities.tree, size = row_slots rounded up to a power of two)."""
    row_slots = json.loads((path / "header.json").read_text())["layout"]["row_slots"]
    size = 1 << (row_slots - 1).bit_length()
    leaves = np.fromfile(path / "priorities.tree", "<f8", count=2 * size)
    return leaves[size + np.arange(steps.start, steps.stop) % row_slots]


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_inside_a_priority_commit_leaves_the_committed_priorities(tmp_path: Path, when: str) -> None:
    """The writer dies while a flush writes new priorities over committed ones (before or after making
    them durable), before the header commits them: the journal undoes them, for a reader and a writer."""
    path = tmp_path / "store.mmr"
    old, new = np.arange(1.0, 9.0), np.arange(8.0, 0.0, -1.0)
    pid = os.fork()
    if pid == 0:
        try:
            store = ReplayStore.create(path, frame_shape=(2, 2), capacity=8, stack_size=1,
                                       sampler=PrioritizedSampler(alpha=1.0, epsilon=0.0))
            for i in range(8):
                store.add(_frame(i), i, 0.0, _frame(i + 1), False, False)
            store.update_priorities(np.arange(8), old)
            store.flush()
            store.update_priorities(np.arange(8), new)
            flush = np.memmap.flush

            def dying_flush(self: np.memmap) -> None:
                if str(self.filename).endswith("priorities.tree"):
                    if when == "after":
                        flush(self)
                    os.kill(os.getpid(), signal.SIGKILL)
                flush(self)

            np.memmap.flush = dying_flush
            store.flush()
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    np.testing.assert_array_equal(_raw_leaves(path, range(8)), new)  # overwritten, not committed
    for mode in ("r", "r+"):
        with ReplayStore.open(path, mode) as store:
            assert store.transitions_added == 8
            assert_distribution(store.sample(8_000, rng=1).index, np.arange(8), old / old.sum())
            if mode == "r+":
                store.add(_frame(8), 8, 0.0, _frame(9), False, False)  # evicts step 0; max priority 8
    after = np.array([2.0, 3, 4, 5, 6, 7, 8, 8])
    np.testing.assert_array_equal(_raw_leaves(path, range(1, 9)), after)
    with ReplayStore.open(path, "r") as store:
        assert_distribution(store.sample(8_000, rng=2).index, np.arange(1, 9), after / after.sum())


def test_a_segment_file_left_empty_by_a_crash_during_its_creation_is_sized_when_written(tmp_path: Path) -> None:
    """SIGKILL between creating a segment file and setting its size leaves an empty file that no commit
    counts; the next writer must size it, not write into it as it is (it read back as truncated)."""
    path = tmp_path / "store.mmr"
    frames = np.arange(12 * 4, dtype=np.uint8).reshape(12, 2, 2)
    ReplayStore.create(path, frame_shape=(2, 2), capacity=8, stack_size=2).close()
    (path / "frames" / "0000000000.seg").write_bytes(b"")
    with ReplayStore.open(path, "r+") as store:
        for t in range(10):
            store.add(frames[t], t, 0.0, frames[t + 1], False, False)
    with ReplayStore.open(path) as store:
        batch = store.read(np.arange(2, 10))
        np.testing.assert_array_equal(batch.next_obs[:, -1], frames[3:11])
        np.testing.assert_array_equal(batch.action, np.arange(2, 10))
