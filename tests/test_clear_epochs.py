"""``clear()`` starts a new *epoch*: steps keep counting, so a step (``batch.index``) is never reused, and
everything from before the clear is refused with an error that says so, in the writer's process as in a
reader's, also after the store is closed and opened again: a pass or a ``batches()`` iterator (device
batches included) with ``ClosedStoreError``, a batch's or an encoded batch's index handed to
``update_priorities`` with ``ClosedStoreError``, a step handed to ``read`` with ``IndexError``.

A failure of ``clear()`` (a full disk, an exchange the file system refuses) leaves the old store whole and
its writer usable; nothing that can fail for want of space happens after the exchange.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from mmreplay import ClosedStoreError, PrioritizedSampler, ReplayStore
from mmreplay.disk import directory_swap



def frame(value: int) -> np.ndarray:
    return np.full((4, 4), value % 251, np.uint8)


def add(store: ReplayStore, values: range) -> None:
    """One transition per value, its action the value (episodes of 7)."""
    for value in values:
        store.add(frame(value), np.int64(value), 0.0, frame(value + 1), value % 7 == 6, False)


def prioritized(path: Path, capacity: int = 40) -> ReplayStore:
    return ReplayStore.create(path, frame_shape=(4, 4), capacity=capacity, stack_size=2,
                              sampler=PrioritizedSampler(alpha=1.0, epsilon=0.0))


def test_steps_keep_counting_across_clear_so_no_index_is_reused(tmp_path: Path) -> None:
    with prioritized(tmp_path / "s.mmr", capacity=20) as store:
        add(store, range(30))
        store.clear()
        assert store.transitions_added == 30 and len(store) == 0 and store.stored_steps == range(30, 30)
        with pytest.raises(ValueError, match="cannot sample from an empty store"):
            store.sample(1)
        add(store, range(1000, 1005))
        assert store.stored_steps == range(30, 35) and len(store) == 5
        assert store.read([30, 34]).action.tolist() == [1000, 1004]
        assert sorted(set(store.sample(64, rng=0).index.tolist())) == list(range(30, 35))
        assert [episode.id for episode in store.episodes()] == [30, 31]  # 1000 ends an episode (1000 % 7 == 6)
    with ReplayStore.open(tmp_path / "s.mmr") as again:  # the epoch is in the header
        assert again.transitions_added == 35 and again.stored_steps == range(30, 35)
        assert again.read(again.stored_steps).action.tolist() == list(range(1000, 1005))


def test_a_step_from_before_clear_is_refused_by_read_naming_the_clear(tmp_path: Path) -> None:
    with prioritized(tmp_path / "s.mmr") as store:
        add(store, range(10))
        store.clear()
        add(store, range(100, 103))
        with pytest.raises(IndexError, match=r"step 4 was removed by clear\(\): the store's steps start at "
                                             r"10 since; stored steps are \[10, 13\)"):
            store.read([4, 11])
        with pytest.raises(IndexError, match="removed by clear"):  # an IndexError, as an evicted step's error is
            store.read([9])


def test_an_iterate_pass_begun_before_clear_is_refused_after_it(tmp_path: Path) -> None:
    with prioritized(tmp_path / "s.mmr") as store:
        add(store, range(30))
        passing = store.iterate(10)
        assert next(passing).action.tolist() == list(range(10))
        store.clear()
        add(store, range(100, 175))  # as many as the pass still had to go, and more
        with pytest.raises(ClosedStoreError, match=r"iterate: the store was cleared \(clear\(\)\) since this pass "
                                                    r"began; its steps \[10, 30\) are gone"):
            next(passing)


def test_update_priorities_with_a_batch_drawn_before_clear_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    with prioritized(tmp_path / "s.mmr") as store:
        add(store, range(20))
        stale = store.sample(8, rng=0)
        encoded = store.sample_encoded(8, rng=1)
        store.clear()
        add(store, range(100, 120))
        before = store.sampler.mass  # type: ignore[attr-defined]
        for index in (stale.index, encoded.index, stale.index.copy().tolist()):
            with pytest.raises(ClosedStoreError, match=r"index 1?\d was drawn before clear\(\): the store's steps "
                                                        r"start at 20 since"):
                store.update_priorities(index, np.full(8, 1000.0))
        assert store.sampler.mass == before  # type: ignore[attr-defined]
        draws = store.sample(4000, rng=2).index
        assert np.bincount(draws - 20, minlength=20).min() > 100  # still uniform: nothing landed on a new step
        fresh = store.sample(8, rng=3)
        store.update_priorities(fresh.index, np.full(8, 5.0))  # the new epoch's batches are taken


def test_an_index_from_before_clear_is_refused_after_the_store_is_opened_again(tmp_path: Path) -> None:
    path = tmp_path / "s.mmr"
    with prioritized(path) as store:
        add(store, range(20))
        stale = store.sample(8, rng=0).index
        store.clear()
        add(store, range(100, 104))
    with ReplayStore.open(path, "r+") as store, pytest.raises(ClosedStoreError, match="drawn before clear"):
        store.update_priorities(stale, np.ones(8))


@pytest.mark.parametrize("reuse", [False, True])
def test_a_batches_iterator_started_before_clear_raises_after_it(tmp_path: Path, reuse: bool) -> None:
    with prioritized(tmp_path / "s.mmr") as store:
        add(store, range(20))
        iterator = store.batches(4, rng=0, reuse=reuse)
        windows = store.batches(2, rng=0, length=3)
        next(iterator), next(windows)
        store.clear()
        add(store, range(100, 110))
        for stopped in (iterator, windows):
            with pytest.raises(ClosedStoreError, match=r"batches\(\) was stopped by clear\(\): its batches were "
                                                        r"drawn from the store before it; call batches\(\) again"):
                next(stopped)
        assert set(next(store.batches(4, rng=0)).action.tolist()) <= set(range(100, 110))  # the new store's


def test_device_batches_started_before_clear_raise_after_it(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    with prioritized(tmp_path / "s.mmr") as store:
        add(store, range(20))
        on_device = store.batches(4, rng=0, device="cpu")
        next(on_device)
        store.clear()
        add(store, range(100, 110))
        with pytest.raises(ClosedStoreError, match=r"batches\(\) was stopped by clear\(\)"):
            next(on_device)


def test_a_reader_in_another_process_is_told_the_store_was_cleared(tmp_path: Path) -> None:
    path = tmp_path / "s.mmr"
    writer = prioritized(path)
    add(writer, range(20))
    writer.flush()
    reader = ReplayStore.open(path)
    passing = reader.iterate(5)
    next(passing)
    writer.clear()
    add(writer, range(100, 110))
    writer.flush()
    with pytest.raises(ClosedStoreError, match="was cleared by its writer since this reader opened it"):
        next(passing)
    with pytest.raises(ClosedStoreError):
        reader.sample(2, rng=0)
    reader.close()
    writer.close()


# -- item 11: a failure during clear ------------------------------------------------------------


def _fail_on_call(monkeypatch: pytest.MonkeyPatch, module: object, name: str, call: int) -> list[int]:
    """Make ``module.name`` raise ENOSPC at its ``call``-th call (0-based) from now on; returns the count."""
    original = getattr(module, name)
    calls = [0]

    def failing(*arguments: object, **keywords: object) -> object:
        calls[0] += 1
        if calls[0] - 1 == call:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original(*arguments, **keywords)

    monkeypatch.setattr(module, name, failing)
    return calls


@pytest.mark.parametrize("call", range(6))
def test_a_disk_that_fills_during_clear_leaves_the_old_store_or_the_empty_one_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: int
) -> None:
    path = tmp_path / "s.mmr"
    store = prioritized(path)
    add(store, range(20))
    store.flush()
    reader = ReplayStore.open(path)  # holds the old files, as a reader would on a full disk
    calls = _fail_on_call(monkeypatch, os, "posix_fallocate", call)
    try:
        store.clear()
    except OSError as error:
        assert error.errno == errno.ENOSPC
        monkeypatch.undo()
        assert store.transitions_added == 20 and store.read(store.stored_steps).action.tolist() == list(range(20))
        add(store, range(20, 23))  # the old store's writer goes on
        store.flush()
        expected = list(range(23))
    else:
        monkeypatch.undo()
        assert call >= calls[0], "the failure was injected but clear() did not raise"
        assert len(store) == 0
        add(store, range(100, 103))
        store.flush()
        expected = [100, 101, 102]
    store.close()
    reader.close()
    with ReplayStore.open(path) as again:
        assert again.read(again.stored_steps).action.tolist() == expected
    assert sorted(os.listdir(tmp_path)) == ["s.mmr"]


def test_an_exchange_that_fails_leaves_the_old_store_and_its_writer_usable(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.mmr"
    with prioritized(path) as store:
        add(store, range(20))

        def refuse(first: Path, second: Path) -> None:
            raise OSError(errno.EXDEV, "the file system refuses the exchange")

        monkeypatch.setattr(directory_swap, "exchange", refuse)
        with pytest.raises(OSError, match="refuses the exchange"):
            store.clear()
        monkeypatch.undo()
        add(store, range(20, 25))
        assert store.read(store.stored_steps).action.tolist() == list(range(25))
    assert sorted(os.listdir(tmp_path)) == ["s.mmr"]
    with ReplayStore.open(path) as again:
        assert again.read(again.stored_steps).action.tolist() == list(range(25))
