"""A full disk: an add or flush that cannot get space raises an OSError and loses no commit.

A writer process appends real frames until the file system refuses: under a small file-size limit
(``RLIMIT_FSIZE``; Python ignores SIGXFSZ, so the write fails with EFBIG) or on a 1.2 MB tmpfs (ENOSPC).
It then tries to flush and close. Afterwards the store must open at (at least) its last successful
commit, with every committed transition exact, and take appends again once there is space.
"""

from __future__ import annotations

import errno
import gc
import multiprocessing
import os
import resource
import subprocess
from pathlib import Path

import numpy as np
import pytest
from atari_data import load_stream
from reference import ReferenceStore, assert_batch_matches

from mmreplay import PrioritizedSampler, ReplayStore, StoreLimitError

CAPACITY = 200


def _frames(game: str) -> dict[str, np.ndarray]:
    return load_stream(game, ("frames", "action", "reward", "terminated"), 4000)


def _transitions(data: dict[str, np.ndarray]) -> list[tuple]:
    positions = np.flatnonzero(data["action"][:-1] >= 0)
    return [(data["frames"][t], int(t), float(data["reward"][t]), data["frames"][t + 1],
             bool(data["terminated"][t]), bool(t + 1 not in set(positions.tolist()) and not data["terminated"][t]))
            for t in positions[:3000]]


def _fill(path: Path, transitions: list[tuple], first: int, file_size_limit: int | None,
          report: multiprocessing.Queue) -> None:
    """The writer: append from ``first`` on, flushing every 25 adds, until the file system refuses."""
    if file_size_limit is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))
    committed, failure, after = first, None, []
    try:
        store = ReplayStore.open(path, "r+")
        for i in range(first, len(transitions)):
            store.add(*transitions[i])
            if (i + 1) % 25 == 0:
                store.flush()
                committed = i + 1
    except OSError as error:
        failure = (type(error).__name__, error.errno, str(error), [c.__name__ for c in type(error).__mro__])
        for operation in ("flush", "close"):
            try:
                getattr(store, operation)()
                after.append(f"{operation}: ok")
            except OSError as again:
                after.append(f"{operation}: {type(again).__name__} errno {again.errno}")
    report.put({"committed": committed, "failure": failure, "after": after})


def _run_writer(path: Path, transitions: list[tuple], first: int, limit: int | None) -> dict:
    context = multiprocessing.get_context("fork")
    report = context.Queue()
    writer = context.Process(target=_fill, args=(path, transitions, first, limit, report))
    writer.start()
    result = report.get(timeout=60)
    writer.join(10)
    assert writer.exitcode == 0, f"the writer died with exit code {writer.exitcode} (SIGBUS is -7)"
    return result


def _check_store(path: Path, transitions: list[tuple], committed: int, capacity: int = CAPACITY) -> ReferenceStore:
    ref = ReferenceStore(frame_shape=(84, 84), capacity=capacity, stack_size=4, action_dtype=np.int64)
    with ReplayStore.open(path, "r") as store:
        added = store.transitions_added
        assert added >= committed, f"the store lost commits: {added} < {committed}"
        for i in range(added):
            ref.add(*transitions[i])
        stored = np.arange(store.stored_steps.start, store.stored_steps.stop)
        assert_batch_matches(store.read(stored), ref, stored)
        assert_batch_matches(store.sample(64, rng=0), ref)
    return ref


def _prioritized_store(path: Path, transitions: list, count: int) -> None:
    """A closed prioritized store at ``path`` of the first ``count`` transitions."""
    with ReplayStore.create(path, frame_shape=(84, 84), capacity=CAPACITY, stack_size=4,
                            sampler=PrioritizedSampler()) as store:
        for i in range(count):
            store.add(*transitions[i])


def _fill_up(filesystem: Path) -> Path:
    """Write one file until ``filesystem`` is full (ENOSPC); returns it (delete or shorten it to free room)."""
    filler = filesystem / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(descriptor, b"\xff" * 4096):
            pass
    except OSError as error:
        assert error.errno == errno.ENOSPC
    finally:
        os.close(descriptor)
    return filler


def _prepare(path: Path, transitions: list[tuple], count: int, capacity: int = CAPACITY,
             encoding: str = "lz4") -> None:
    with ReplayStore.create(path, frame_shape=(84, 84), capacity=capacity, stack_size=4,
                            frame_encoding=encoding) as store:
        for i in range(count):
            store.add(*transitions[i])


@pytest.mark.parametrize("encoding", ["lz4", "lz4-reference"])
def test_an_add_past_the_file_size_limit_raises_oserror_and_keeps_every_commit(tmp_path: Path, encoding: str) -> None:
    transitions = _transitions(_frames("mspacman"))
    path = tmp_path / "store.mmr"
    _prepare(path, transitions, 10, encoding=encoding)  # the first segment file exists (sparse, 1 MiB)
    result = _run_writer(path, transitions, 10, 300_000)
    assert result["failure"] is not None, "the writer never hit the limit"
    name, code, message, mro = result["failure"]
    assert "OSError" in mro
    # The write that crosses the limit is cut short (pwrite writes what fits), or fails outright.
    assert code == errno.EFBIG or "short write" in message, result["failure"]
    print(f"\nfile-size limit: {name} errno {code} ({message}) after {result['committed']} committed; "
          f"then {result['after']}")
    _check_store(path, transitions, result["committed"])

    # With room again, appending continues from the last commit.
    with ReplayStore.open(path, "r+") as store:
        start = store.transitions_added
        for i in range(start, start + 30):
            store.add(*transitions[i])
    _check_store(path, transitions, start + 30)


@pytest.fixture
def tiny_filesystem(tmp_path: Path):
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1200k", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a 1.2 MB tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        gc.collect()  # a refused open's half-made store (in its traceback's frames) holds files mapped
        if subprocess.run(["umount", str(mount_point)], check=False, capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mount_point)], check=False)


# Reference frames take ~290 bytes a MsPacman transition: a ring of 200 would never outgrow the tmpfs; one
# of 4,000, fed the stream twice over, does (its first 1 MiB segment is freed only once its frames are
# evicted, ~1.1 MB on).
@pytest.mark.parametrize(("encoding", "capacity"), [("lz4", CAPACITY), ("lz4-reference", 4000)])
def test_an_add_on_a_full_filesystem_raises_oserror_and_keeps_every_commit(
    tiny_filesystem: Path, encoding: str, capacity: int
) -> None:
    transitions = _transitions(_frames("mspacman")) * (1 if encoding == "lz4" else 2)
    path = tiny_filesystem / "store.mmr"
    _prepare(path, transitions, 10, capacity, encoding)
    result = _run_writer(path, transitions, 10, None)
    assert result["failure"] is not None, "the writer never filled the file system"
    name, code, message, mro = result["failure"]
    assert "OSError" in mro
    assert code == errno.ENOSPC or "short write" in message, result["failure"]
    print(f"\nfull tmpfs ({encoding}): {name} errno {code} ({message}) after {result['committed']} committed; "
          f"then {result['after']}")
    _check_store(path, transitions, result["committed"], capacity)


def test_a_prioritized_store_copied_sparse_onto_a_full_filesystem_is_refused_for_writing_before_reserving(
    tmp_path: Path, tiny_filesystem: Path
) -> None:
    # A writer maps its priorities' scratch and reserves its blocks first; a copy made sparse (cp, tar,
    # rsync -S) has none. On a full disk the writer is refused (StoreLimitError, ENOSPC) before reserving
    # anything; the store reads as it was, and takes appends once there is room.
    transitions = _transitions(_frames("mspacman"))
    source = tmp_path / "store.mmr"
    _prioritized_store(source, transitions, 30)
    path = tiny_filesystem / "store.mmr"
    subprocess.run(["cp", "-r", "--sparse=always", str(source), str(path)], check=True)
    filler = _fill_up(tiny_filesystem)
    used = os.statvfs(tiny_filesystem).f_bfree
    with pytest.raises(StoreLimitError, match=r"priorities.tree: the priorities of 1,224 row slots \(the header's "
                                              r"row_slots\) needs [\d,]+ bytes of disk reserved") as refused:
        ReplayStore.open(path, "r+")
    assert refused.value.errno == errno.ENOSPC
    del refused
    assert os.statvfs(tiny_filesystem).f_bfree == used
    _check_store(path, transitions, 30)
    filler.unlink()
    with ReplayStore.open(path, "r+") as store:
        for i in range(30, 40):
            store.add(*transitions[i])
    _check_store(path, transitions, 40)


@pytest.mark.parametrize("free_kib", [0, 16, 48, 400])
def test_clear_of_a_prioritized_store_on_a_full_filesystem_with_a_reader_leaves_a_usable_store(
    tiny_filesystem: Path, free_kib: int
) -> None:
    # A reader holds the old files, so a clear cannot free their blocks before it builds the empty store;
    # on a full disk the clear fails before the exchange (the old store and its writer as they were) or
    # succeeds whole; never an empty store with a half-built writer (its next add raised RuntimeError).
    transitions = _transitions(_frames("mspacman"))
    path = tiny_filesystem / "store.mmr"
    _prioritized_store(path, transitions, 30)
    writer = ReplayStore.open(path, "r+")
    reader = ReplayStore.open(path)
    filler = _fill_up(tiny_filesystem)
    # Room for the empty store's files (sparse) but not for the blocks its writer reserves (the
    # priorities' scratch, 40 bytes a row slot): the reservation that failed after the exchange.
    os.truncate(filler, max(0, os.stat(filler).st_size - free_kib * 1024))
    try:
        writer.clear()
    except OSError as error:
        assert error.errno == errno.ENOSPC, error
        cleared = False
    else:
        cleared = True
    filler.unlink()
    if cleared:
        assert len(writer) == 0 and writer.stored_steps == range(30, 30)
    else:
        assert writer.stored_steps == range(30)
    writer.add(*transitions[30])  # the writer goes on, whichever store it holds
    writer.update_priorities(writer.sample(4, rng=0).index, np.full(4, 2.0))
    writer.close()
    reader.close()
    with ReplayStore.open(path) as again:
        assert again.stored_steps == (range(30, 31) if cleared else range(31))
    assert sorted(os.listdir(tiny_filesystem)) == ["store.mmr"]
    print(f"\nclear on a full tmpfs ({free_kib} KiB free) with a reader: {'cleared' if cleared else 'refused with ENOSPC'}")
