"""``priorities.tree`` under damage and races: the undo journal, commits newer than the header a process
read, and stores written before priorities had checksums.

The file layout used here is the one ``mmreplay/sampling/priority_file.py`` documents: committed leaf of slot at
float64 entry ``size + slot``, the undo journal at byte ``48 * size`` (``size``: row_slots rounded up to a
power of two).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from reference_windows import assert_distribution
from strategies import numbered_frame

from mmreplay import CorruptStoreError, PrioritizedSampler, ReplayStore
from mmreplay.disk import header as format

FRAME = (2, 3)


def fill(store: ReplayStore, count: int, first: int = 0) -> None:
    for i in range(first, first + count):
        store.add(numbered_frame(FRAME, i), i, float(i), numbered_frame(FRAME, i + 1), (i + 1) % 5 == 0, False)


def create(path: Path) -> ReplayStore:
    return ReplayStore.create(path, frame_shape=FRAME, capacity=8, stack_size=2,
                              sampler=PrioritizedSampler(alpha=1.0, epsilon=0.0))


def size_of(path: Path) -> int:
    layout, _ = format.read_header(path)
    return 1 << (layout.row_slots - 1).bit_length()


def flip(path: Path, offset: int, mask: int = 0x01) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        old = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([old ^ mask]))


def crash_inside_a_priority_commit(path: Path, old: np.ndarray, new: np.ndarray) -> None:
    """Commit ``old`` priorities of steps 0..7, then die while a flush writes ``new`` over them."""
    pid = os.fork()
    if pid == 0:
        try:
            store = create(path)
            fill(store, 8)
            store.update_priorities(np.arange(8), old)
            store.flush()
            store.update_priorities(np.arange(8), new)
            flush = np.memmap.flush

            def dying_flush(self: np.memmap) -> None:
                if str(self.filename).endswith("priorities.tree"):
                    os.kill(os.getpid(), signal.SIGKILL)
                flush(self)

            np.memmap.flush = dying_flush
            store.flush()
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)


def test_a_flipped_byte_in_the_journal_of_a_closed_store_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "store.mmr"
    with create(path) as store:
        fill(store, 12)
        store.update_priorities(np.arange(4, 12), np.arange(1.0, 9.0))
        store.flush()
        store.update_priorities(np.arange(4, 12), np.arange(8.0, 0.0, -1.0))  # a journal with entries
        before = store.sample(500, rng=1, beta=1.0)
    journal = 48 * size_of(path)
    for offset in (3, 27, 35, 45):  # sequence, CRC, first entry's slot and leaf
        flip(path / "priorities.tree", journal + offset)
    for mode in ("r", "r+"):
        with ReplayStore.open(path, mode) as store:
            after = store.sample(500, rng=1, beta=1.0)
            np.testing.assert_array_equal(after.index, before.index)
            np.testing.assert_array_equal(after.weight, before.weight)


@pytest.mark.parametrize("mode", ["r", "r+"])
def test_a_damaged_journal_left_by_a_crash_inside_a_commit_is_detected(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "store.mmr"
    crash_inside_a_priority_commit(path, np.arange(1.0, 9.0), np.arange(8.0, 0.0, -1.0))
    flip(path / "priorities.tree", 48 * size_of(path) + 32 + 8 + 6)  # the first entry's leaf
    with pytest.raises(CorruptStoreError, match=r"priorities\.tree: the priorities of stored transitions do not match"):
        ReplayStore.open(path, mode)


def test_a_flipped_leaf_beside_a_crash_inside_a_commit_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "store.mmr"
    old = np.array([1.0, 2, 3, 4, 5, 6, 7, 8])
    crash_inside_a_priority_commit(path, old, np.where(np.arange(8) < 4, old[::-1], old))  # steps 4..7 unchanged
    flip(path / "priorities.tree", (size_of(path) + 6) * 8 + 6)  # step 6: not in the journal
    with pytest.raises(CorruptStoreError, match=r"priorities\.tree"):
        ReplayStore.open(path, "r")


def test_a_process_holding_an_older_header_than_the_priorities_opens_them(tmp_path: Path) -> None:
    """A reader reads the header, then the writer commits twice before the reader reads the priorities:
    the leaves are newer than the header's checksum, and the journal says so. Here the older header is
    put back by hand, which is what such a reader sees."""
    path = tmp_path / "store.mmr"
    store = create(path)
    fill(store, 8)
    store.flush()
    old_header = (path / "header.json").read_bytes()
    for priorities in (np.arange(1.0, 9.0), np.arange(8.0, 0.0, -1.0)):
        store.update_priorities(np.arange(8), priorities)
        store.flush()
    store.close()
    (path / "header.json").write_bytes(old_header)
    for mode in ("r", "r+"):
        with ReplayStore.open(path, mode) as reopened:
            batch = reopened.sample(2_000, rng=0)
            assert set(batch.index.tolist()) <= set(range(8))
            assert np.all(np.isfinite(batch.weight))
    with ReplayStore.open(path, "r") as reopened:  # the writer's close committed the priorities it opened
        p = np.arange(8.0, 0.0, -1.0)
        assert_distribution(reopened.sample(8_000, rng=1).index, np.arange(8), p / p.sum())


def test_a_store_written_before_priorities_had_checksums_opens_and_gains_one(tmp_path: Path) -> None:
    path = tmp_path / "store.mmr"
    priorities = np.arange(1.0, 9.0)
    with create(path) as store:
        fill(store, 10)
        store.update_priorities(np.arange(2, 10), priorities)
    # The first layout: the header committed only the largest priority, and the file ended after the
    # working trees (no journal).
    layout, commit = format.read_header(path)
    format.write_header(path, layout, replace(commit, sampler_state={"max_priority": 8.0}))
    os.truncate(path / "priorities.tree", 32 * size_of(path))
    with ReplayStore.open(path, "r") as store:
        assert_distribution(store.sample(8_000, rng=0).index, np.arange(2, 10), priorities / priorities.sum())
    with ReplayStore.open(path, "r+") as store:
        fill(store, 1, first=10)  # evicts step 2; the new step gets the largest priority, 8
    assert set(format.read_header(path)[1].sampler_state) == {"max_priority", "checksum", "sequence"}
    with ReplayStore.open(path, "r") as store:
        p = np.array([2.0, 3, 4, 5, 6, 7, 8, 8])
        assert_distribution(store.sample(8_000, rng=1).index, np.arange(3, 11), p / p.sum())
    flip(path / "priorities.tree", (size_of(path) + 5) * 8 + 6)  # step 5's committed leaf
    with pytest.raises(CorruptStoreError, match=r"priorities\.tree"):
        ReplayStore.open(path, "r")


def _writer(path: Path, seconds: float) -> None:
    store = ReplayStore.open(path, "r+")
    rng = np.random.default_rng(0)
    deadline = time.monotonic() + seconds
    step = store.transitions_added
    while time.monotonic() < deadline:
        fill(store, 3, first=step)
        step += 3
        batch = store.sample(8, rng)
        store.update_priorities(batch.index, rng.exponential(1.0, 8))
        store.flush()
    store.close()


def _reader(path: Path, stop: Any, results: Any) -> None:
    reads, error = 0, None
    try:
        with ReplayStore.open(path, "r") as store:
            rng = np.random.default_rng(1)
            while not stop.is_set():
                store.refresh()
                batch = store.sample(16, rng)
                assert np.array_equal(batch.action, batch.index), "a batch mixes up transitions"
                assert np.all(np.isfinite(batch.weight) & (batch.weight > 0) & (batch.weight <= 1)), batch.weight
                reads += 1
    except BaseException as caught:  # reported to the test
        error = f"{type(caught).__name__}: {caught}"
    results.put({"reads": reads, "error": error})


def test_readers_sample_by_committed_priorities_while_the_writer_commits_them(tmp_path: Path) -> None:
    """A writer that commits new priorities after every few adds, and readers that refresh and sample all
    the while: a reader never takes the writer's commits for damage."""
    path = tmp_path / "store.mmr"
    with create(path) as store:
        fill(store, 8)
    context = multiprocessing.get_context("fork")
    stop, results = context.Event(), context.Queue()
    readers = [context.Process(target=_reader, args=(path, stop, results)) for _ in range(2)]
    for reader in readers:
        reader.start()
    writer = context.Process(target=_writer, args=(path, 3.0))
    writer.start()
    writer.join(30)
    stop.set()
    reports = [results.get(timeout=30) for _ in readers]
    for reader in readers:
        reader.join(10)
    assert writer.exitcode == 0
    assert [r["error"] for r in reports] == [None, None]
    assert all(r["reads"] > 20 for r in reports)


def test_a_reader_whose_refresh_meets_corrupt_priorities_keeps_refusing_to_sample(tmp_path: Path) -> None:
    """The refresh fails after the reader took the new header: the reader must not go on sampling with
    its priorities left behind, but raise again on every read until the file is sound."""
    path = tmp_path / "store.mmr"
    with create(path) as writer:
        fill(writer, 6)
        writer.flush()
        with ReplayStore.open(path, "r") as reader:
            reader.sample(4, rng=0)
            fill(writer, 4, first=6)
            writer.update_priorities(np.arange(2, 10), np.arange(1.0, 9.0))
            writer.flush()
            tree = path / "priorities.tree"
            flip(tree, (size_of(path) + 7) * 8 + 6)  # the committed leaf of step 7
            for _ in range(3):
                with pytest.raises(CorruptStoreError, match=r"priorities\.tree"):
                    reader.sample(4, rng=0)
            flip(tree, (size_of(path) + 7) * 8 + 6)  # repaired: the reader follows the commit
            assert set(reader.sample(200, rng=0).index.tolist()) <= set(range(2, 10))
