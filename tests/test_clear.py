"""``clear()``: an empty store with the same layout, atomically, refused read-only.

The crash trials fork a writer that clears a store of known contents and appends new ones, and kill it
with SIGKILL at a random moment; the store must then open as the old store or as the new one (with at
least what a flush after the clear committed), never as neither.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mmreplay import PrioritizedSampler, ReplayStore
from mmreplay.errors import ClosedStoreError, ReadOnlyStoreError

FIELDS = {"h": ((3,), np.float32)}


def frame(value: int) -> np.ndarray:
    return np.full((4, 4), value % 251, np.uint8)


def add(store: ReplayStore, values: range, *, base: int) -> None:
    """One transition per value: frames, action and field encode ``base + value``."""
    for value in values:
        number = base + value
        store.add(frame(number), np.int64(number), 0.0, frame(number + 1), False, False,
                  fields={"h": np.full(3, number, np.float32)})


def test_clear_leaves_an_empty_store_with_the_same_layout(tmp_path: Path) -> None:
    path = tmp_path / "s.mmr"
    with ReplayStore.create(path, frame_shape=(4, 4), capacity=20, stack_size=2, fields=FIELDS,
                            sampler=PrioritizedSampler(alpha=0.5)) as store:
        add(store, range(30), base=0)
        store.clear()
        # steps keep counting (a step, batch.index, is never reused): nothing stored, 30 added so far
        assert len(store) == 0 and store.transitions_added == 30 and store.episodes() == []
        assert (store.frame_shape, store.capacity, store.stack_size) == ((4, 4), 20, 2)
        assert store.fields == {"h": ((3,), np.dtype(np.float32))} and store.sampler.config()["alpha"] == 0.5
        with pytest.raises(ValueError, match="cannot sample from an empty store"):
            store.sample(1)
        add(store, range(3), base=1000)  # steps go on from 30, the new episode from scratch
        assert list(store.stored_steps) == [30, 31, 32]
        assert store.read([30]).action.tolist() == [1000]
    assert sorted(os.listdir(tmp_path)) == ["s.mmr"]  # nothing left beside it
    with ReplayStore.open(path) as store:
        batch = store.read(store.stored_steps)
        assert batch.fields["h"][:, 0].tolist() == [1000, 1001, 1002]
        assert batch.obs[0].tolist() == [frame(1000).tolist()] * 2


def test_clear_is_refused_on_a_read_only_store(tmp_path: Path) -> None:
    path = tmp_path / "s.mmr"
    with ReplayStore.create(path, frame_shape=(4, 4), capacity=20, fields=FIELDS) as store:
        add(store, range(5), base=0)
    with ReplayStore.open(path) as store:
        with pytest.raises(ReadOnlyStoreError, match=r"cannot clear: the store at .* is open read-only"):
            store.clear()
        assert len(store) == 5


def test_a_reader_of_a_cleared_store_is_told_to_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.mmr"
    writer = ReplayStore.create(path, frame_shape=(4, 4), capacity=20, fields=FIELDS)
    add(writer, range(5), base=0)
    writer.flush()
    reader = ReplayStore.open(path)
    assert len(reader) == 5
    writer.clear()
    add(writer, range(2), base=50)
    writer.flush()
    with pytest.raises(ClosedStoreError, match="was cleared by its writer since this reader opened it; open it again"):
        reader.sample(1, rng=0)
    reader.close()
    with ReplayStore.open(path) as again:
        assert again.read([5, 6]).action.tolist() == [50, 51]  # steps go on across clear()
    writer.close()


def _clear_and_append(path: Path, log: Path, *, through_link: bool = False) -> None:
    if through_link:  # by a relative path to a link to the store, then a chdir elsewhere
        os.chdir(path.parent)
        os.symlink(path.name, "link.mmr")
        store = ReplayStore.open("link.mmr", "r+", commit_interval_s=None)
        os.chdir("/")
    else:
        store = ReplayStore.open(path, "r+", commit_interval_s=None)
    store.clear()
    log.write_text("cleared\n")
    for value in range(40):
        add(store, range(value, value + 1), base=1000)
        if value % 5 == 4:
            store.flush()
            with open(log, "a") as file:
                file.write(f"{value + 1}\n")


@pytest.mark.parametrize("through_link", [False, True])
@pytest.mark.parametrize("trial", range(12))
def test_a_crash_during_clear_leaves_the_old_store_or_the_new_one(tmp_path: Path, trial: int, through_link: bool) -> None:
    path, log = tmp_path / "s.mmr", tmp_path / "log"
    with ReplayStore.create(path, frame_shape=(4, 4), capacity=25, fields=FIELDS) as store:
        add(store, range(30), base=0)  # old store: steps 5..29, values 5..29
    rng = random.Random(trial)
    pid = os.fork()
    if pid == 0:
        try:
            _clear_and_append(path, log, through_link=through_link)
        finally:
            os._exit(0)
    time.sleep(rng.uniform(0.0, 0.25))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    lines = log.read_text().split() if log.exists() else []
    with ReplayStore.open(path, "r+") as store:
        batch = store.read(store.stored_steps)
        if store.stored_steps == range(5, 30):  # the old store, whole (a new one starts at step 30)
            assert "cleared" not in lines
            assert batch.action.tolist() == list(range(5, 30))
        else:  # the new one, with at least what its flushes committed
            committed = int(lines[-1]) if len(lines) > 1 else 0
            assert store.stored_steps.start >= 30 and store.transitions_added - 30 >= committed
            assert batch.action.tolist() == [1000 + step - 30 for step in store.stored_steps]
        np.testing.assert_array_equal(batch.fields["h"][:, 0], batch.action.astype(np.float32))
        add(store, range(1), base=5000)  # appending goes on
    if through_link and (tmp_path / "link.mmr").is_symlink():  # cleared where the link points: it stays a link
        assert os.readlink(tmp_path / "link.mmr") == "s.mmr"


def test_a_writer_starts_no_process_while_it_holds_the_writer_lock(tmp_path: Path) -> None:
    # A child shares the lock's open file description from its fork until it execs: a writer killed
    # meanwhile left its store locked to the writer restarted after it (clear() ran ldconfig to find libc).
    # An audit hook in a fresh interpreter (nothing looked up before) sees every process the writer starts.
    script = f"""
import sys
started = []
sys.addaudithook(lambda event, args: started.append(event) if event in (
    "subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.system", "os.spawn") else None)
import numpy as np
from mmreplay import PrioritizedSampler, ReplayStore
started.clear()  # importing h5py asks uname for the processor; the lock is not held yet
with ReplayStore.create({str(tmp_path / 's')!r}, frame_shape=(4, 4), capacity=8, sampler=PrioritizedSampler()) as store:
    for round in range(2):
        for t in range(5):
            store.add(np.full((4, 4), t, np.uint8), 0, 1.0, np.full((4, 4), t + 1, np.uint8), False, False)
        store.flush()
        store.clear()
print(started)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
