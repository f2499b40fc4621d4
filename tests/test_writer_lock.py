"""The writer lock belongs to the writer alone: a forked child never holds it, and ``create`` holds it
before the new store can be seen by anyone else."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from mmreplay import ReplayStore, StoreLockedError
from mmreplay.store import internals

fork = multiprocessing.get_context("fork")


def make(path: Path) -> ReplayStore:
    return ReplayStore.create(path, frame_shape=(2, 2), capacity=8, stack_size=1)


def wait_for(event: multiprocessing.synchronize.Event) -> None:
    event.wait(30)


def test_a_forked_child_does_not_keep_the_lock_after_the_writer_closes(tmp_path: Path) -> None:
    store = make(tmp_path / "s.mmr")
    done = fork.Event()
    child = fork.Process(target=wait_for, args=(done,))  # an env worker or a data loader
    child.start()
    try:
        store.close()
        with ReplayStore.open(tmp_path / "s.mmr", "r+") as again:
            assert again.mode == "r+"
    finally:
        done.set()
        child.join()


def test_closing_the_writer_unlocks_a_lock_a_child_still_shares_before_its_fork_handler_ran(tmp_path: Path) -> None:
    """A forked child holds a copy of the lock's descriptor until its at-fork handler drops it; on a busy
    machine the parent can close and reopen the store before the child has run at all. A duplicate of the
    descriptor shares the open file description as that child's copy does: closing the writer unlocks it
    (not only closes its own descriptor), so the store opens for writing at once."""
    store = make(tmp_path / "s.mmr")
    inherited = os.dup(internals.writer_of(store).lock_file.fileno())  # type: ignore[union-attr]  # the child's copy, before its handler
    try:
        store.close()
        with ReplayStore.open(tmp_path / "s.mmr", "r+") as again:
            assert again.mode == "r+"
    finally:
        os.close(inherited)


def _writer_with_a_forked_child(path: Path, ready: multiprocessing.synchronize.Event,
                                done: multiprocessing.synchronize.Event) -> None:
    store = ReplayStore.open(path, "r+")
    store.add(np.zeros((1, 2, 2), np.uint8), 0, 0.0, np.ones((1, 2, 2), np.uint8), False, False)
    fork.Process(target=wait_for, args=(done,), daemon=False).start()
    ready.set()
    time.sleep(60)  # killed before


def test_a_forked_child_does_not_keep_the_lock_of_a_killed_writer(tmp_path: Path) -> None:
    make(tmp_path / "s.mmr").close()
    ready, done = fork.Event(), fork.Event()
    writer = fork.Process(target=_writer_with_a_forked_child, args=(tmp_path / "s.mmr", ready, done))
    writer.start()
    try:
        assert ready.wait(30)
        with pytest.raises(StoreLockedError, match="already open for writing by another process"):
            ReplayStore.open(tmp_path / "s.mmr", "r+")
        os.kill(writer.pid, signal.SIGKILL)  # type: ignore[arg-type]
        writer.join()
        with ReplayStore.open(tmp_path / "s.mmr", "r+") as again:  # the grandchild still lives
            assert again.mode == "r+"
    finally:
        done.set()


def _open_as_soon_as_it_appears(path: Path, stop: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        try:
            ReplayStore.open(path, "r+").close()
        except (StoreLockedError, FileNotFoundError, ValueError):
            pass


def test_create_holds_the_lock_before_another_process_can_open_the_new_store(tmp_path: Path) -> None:
    stop = fork.Event()
    paths = [tmp_path / f"s{i}.mmr" for i in range(10)]
    racers = [fork.Process(target=_open_as_soon_as_it_appears, args=(path, stop)) for path in paths]
    for racer in racers:
        racer.start()
    try:
        time.sleep(0.2)
        for path in paths:
            make(path).close()  # never StoreLockedError: the store was ours before it was anyone's
    finally:
        stop.set()
        for racer in racers:
            racer.join()
