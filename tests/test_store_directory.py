"""A store is one directory, held by its descriptor from open to close (``mmreplay.disk.store_directory``).

Its path is resolved once, at open, to a real absolute path; every file is opened relative to the
directory's descriptor, links are never followed, and anything that is not a regular file (a link to a
file outside, a FIFO that would block the open or the read forever, a directory) is refused with a
``CorruptStoreError`` naming it, before anything is written. So a ``chdir``, a symbolic link in a
downloaded store or a FIFO put in its place cannot send a write outside the store or hang a reader, and
``clear()`` through a link empties the directory the link names.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mmreplay import (
    ClosedStoreError,
    CorruptStoreError,
    PrioritizedSampler,
    ReplayStore,
)

try:
    from mmreplay.disk.store_directory import StoreDirectory
except ImportError:  # before the fix (to watch the tests fail)
    StoreDirectory = None  # type: ignore[assignment,misc]

FIELDS = {"h": ((2,), np.float32)}


def frame(value: int) -> np.ndarray:
    return np.full((4, 4), value % 251, np.uint8)


def add(store: ReplayStore, values: range, *, base: int = 0) -> None:
    """One transition per value; frames, action and field encode ``base + value``."""
    for value in values:
        number = base + value
        store.add(frame(number), np.int64(number), 0.0, frame(number + 1), False, False,
                  fields={"h": np.full(2, number, np.float32)})


def make_store(path: Path, count: int, *, base: int = 0) -> None:
    with ReplayStore.create(path, frame_shape=(4, 4), capacity=50, stack_size=2, fields=FIELDS,
                            sampler=PrioritizedSampler()) as store:
        add(store, range(count), base=base)


def actions(path: Path) -> list[int]:
    with ReplayStore.open(path) as store:
        batch = store.read(store.stored_steps)
        np.testing.assert_array_equal(batch.fields["h"][:, 0], batch.action.astype(np.float32))
        return [int(value) for value in batch.action]


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in the main thread after ``seconds`` (an open of a FIFO blocks in the kernel,
    and a signal interrupts it)."""

    def expire(*_: object) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- item 3: a relative path --------------------------------------------------------------------------


def test_a_store_opened_by_a_relative_path_stays_in_its_directory_after_chdir(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    make_store(second / "replay.mmr", 30, base=5000)  # another run's store, under the same name
    monkeypatch.chdir(first)
    store = ReplayStore.create("replay.mmr", frame_shape=(4, 4), capacity=50, stack_size=2, fields=FIELDS,
                               sampler=PrioritizedSampler())
    assert store.path == first.resolve() / "replay.mmr"
    add(store, range(10))
    store.flush()
    monkeypatch.chdir(second)
    add(store, range(10, 40))  # commits (capacity 50), segments and the header: all in first/replay.mmr
    store.flush()
    store.clear()
    add(store, range(100, 120))
    store.close()
    assert actions(first / "replay.mmr") == list(range(100, 120))
    assert actions(second / "replay.mmr") == list(range(5000, 5030))
    with ReplayStore.open("replay.mmr", "r") as other:  # opened relative to the new cwd: the other store
        assert other.path == second.resolve() / "replay.mmr" and len(other) == 30


# -- item 7: links -------------------------------------------------------------------------------


STORE_FILES = ["transitions.tbl", "fields.tbl", "frames-0.idx", "frames/0000000000.seg", "priorities.tree",
               "header.json", "writer.lock"]


@pytest.mark.parametrize("name", STORE_FILES)
@pytest.mark.parametrize("mode", ["r", "r+"])
def test_a_store_file_that_is_a_symbolic_link_is_refused_and_its_target_never_written(
    tmp_path: Path, name: str, mode: str
) -> None:
    path = tmp_path / "s.mmr"
    make_store(path, 20)
    victim = tmp_path / "victim.txt"
    original = (path / name).read_bytes()
    victim.write_bytes(original)  # the same bytes: only the link can give it away
    (path / name).unlink()
    os.symlink(os.path.relpath(victim, (path / name).parent), path / name)
    expected = rf"{name.split('/')[-1]} is a symbolic link, not a regular file"
    with refused_unless_a_reader_never_opens(name, mode, expected):
        with ReplayStore.open(path, mode) as store:
            store.sample(4, rng=0)
            store.read(store.stored_steps)
            if mode == "r+":
                add(store, range(20, 25))
    assert victim.read_bytes() == original


def refused_unless_a_reader_never_opens(name: str, mode: str, expected: str) -> contextlib.AbstractContextManager[object]:
    """``pytest.raises(CorruptStoreError, match=expected)``; a reader never opens the writer lock."""
    if name == "writer.lock" and mode == "r":
        return contextlib.nullcontext()
    return pytest.raises(CorruptStoreError, match=expected)


@pytest.mark.parametrize("mode", ["r", "r+"])
def test_a_segments_folder_that_is_a_symbolic_link_is_refused(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "s.mmr"
    make_store(path, 20)
    elsewhere = tmp_path / "elsewhere"
    (path / "frames").rename(elsewhere)
    os.symlink(elsewhere, path / "frames")
    before = sorted(os.listdir(elsewhere))
    with pytest.raises(CorruptStoreError, match=r"frames is a symbolic link, not a directory"):
        with ReplayStore.open(path, mode) as store:
            store.sample(4, rng=0)
            if mode == "r+":
                add(store, range(20, 25))
    assert sorted(os.listdir(elsewhere)) == before


def test_a_store_reached_through_a_symbolic_link_opens_at_its_real_path(tmp_path: Path) -> None:
    (tmp_path / "disk").mkdir()
    make_store(tmp_path / "disk" / "real.mmr", 12)
    os.symlink(tmp_path / "disk" / "real.mmr", tmp_path / "link.mmr")
    with ReplayStore.open(tmp_path / "link.mmr", "r+") as store:
        assert store.path == (tmp_path / "disk" / "real.mmr").resolve()
        add(store, range(12, 15))
    assert actions(tmp_path / "link.mmr") == list(range(15))


# -- item 8: clear() through a link --------------------------------------------------------------


def test_clear_through_a_symbolic_link_empties_the_directory_it_names_and_keeps_the_link(tmp_path: Path) -> None:
    (tmp_path / "disk").mkdir()
    real = tmp_path / "disk" / "real.mmr"
    make_store(real, 12)
    link = tmp_path / "link.mmr"
    os.symlink(real, link)
    with ReplayStore.open(link, "r+") as store:
        store.clear()
        add(store, range(500, 503))
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert actions(real) == [500, 501, 502]
    assert sorted(os.listdir(tmp_path)) == ["disk", "link.mmr"]  # nothing left beside the link
    assert sorted(os.listdir(tmp_path / "disk")) == ["real.mmr"]  # nor beside the store


# -- item 9: FIFOs --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", STORE_FILES)
@pytest.mark.parametrize("mode", ["r", "r+"])
def test_a_fifo_in_place_of_a_store_file_is_refused_without_blocking(tmp_path: Path, name: str, mode: str) -> None:
    path = tmp_path / "s.mmr"
    make_store(path, 20)
    (path / name).unlink()
    os.mkfifo(path / name)
    expected = rf"{name.split('/')[-1]} is a FIFO, not a regular file"
    with deadline(20.0), refused_unless_a_reader_never_opens(name, mode, expected):
        with ReplayStore.open(path, mode) as store:
            store.sample(4, rng=0)
            store.read(store.stored_steps)
            if mode == "r+":
                add(store, range(20, 25))
                store.flush()


def test_verify_and_export_of_a_store_with_a_fifo_segment_fail_without_blocking(tmp_path: Path) -> None:
    from mmreplay.cli.commands import main
    from mmreplay.hdf5 import export_hdf5

    path = tmp_path / "s.mmr"
    make_store(path, 20)
    (path / "frames" / "0000000000.seg").unlink()
    os.mkfifo(path / "frames" / "0000000000.seg")
    with deadline(20.0):
        assert main(["verify", str(path)]) == 1
        # export names the first transition it cannot read (the FIFO's frames are damage to it)
        with ReplayStore.open(path) as store, pytest.raises(CorruptStoreError, match="cannot export: transition 0 is damaged"):
            export_hdf5(store, tmp_path / "out.h5")
    assert not (tmp_path / "out.h5").exists()


# -- the directory itself -------------------------------------------------------------------------


def test_a_store_directory_refuses_what_is_not_a_regular_file_by_name(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "d" / "fifo")
    os.symlink("/etc/passwd", tmp_path / "d" / "link")
    (tmp_path / "d" / "sub").mkdir()
    directory = StoreDirectory.open(tmp_path / "d")
    try:
        for name, kind in (("fifo", "a FIFO"), ("link", "a symbolic link"), ("sub", "a directory")):
            with pytest.raises(CorruptStoreError, match=rf"/d/{name} is {kind}, not a regular file"):
                directory.open_file(name)
        with pytest.raises(FileNotFoundError):
            directory.open_file("missing")
    finally:
        directory.close()


# -- item 12: a reader that opens while the writer clears ---------------------------------------


def test_a_reader_that_opens_while_the_writer_clears_reads_one_store_whole(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # The exchange lands between the reader mapping the old transition table and its identity check.
    from mmreplay.rows import transitions

    path = tmp_path / "s.mmr"
    make_store(path, 20)
    writer = ReplayStore.open(path, "r+")
    mapped = transitions.TransitionTable.__init__
    cleared = []

    def map_then_clear(self: transitions.TransitionTable, *arguments: object, **keywords: object) -> None:
        mapped(self, *arguments, **keywords)  # type: ignore[arg-type]
        if not keywords.get("writable") and not cleared:
            cleared.append(True)
            writer.clear()
            add(writer, range(700, 730))
            writer.flush()

    monkeypatch.setattr(transitions.TransitionTable, "__init__", map_then_clear)
    try:
        reader = ReplayStore.open(path)
    except ClosedStoreError:
        reader = None  # told to open again: allowed, never a wrong answer
    monkeypatch.undo()
    assert cleared
    if reader is not None:
        with reader:
            for seed in range(20):
                try:
                    batch = reader.sample(8, rng=seed)
                except ClosedStoreError:
                    break
                assert set(batch.action.tolist()) <= set(range(20)) | set(range(700, 730))
                np.testing.assert_array_equal(batch.fields["h"][:, 0], batch.action.astype(np.float32))
    with ReplayStore.open(path) as again:
        assert again.read(again.stored_steps).action.tolist() == list(range(700, 730))
    writer.close()


# -- the race of item 12, across processes, through a link and a relative path ---------------------


def _clear_again_and_again(path: Path, rounds: int, ready: object) -> None:
    """A writer in its own process: ``rounds`` times, clear the store and add 30 transitions (values
    ``1000 * round + i``: each epoch's own), committed; opened through a relative path after a chdir."""
    os.chdir(path.parent)
    with ReplayStore.open(path.name, "r+", commit_interval_s=None) as store:
        ready.set()  # type: ignore[attr-defined]
        for round_ in range(1, rounds + 1):
            store.clear()
            add(store, range(30), base=1000 * round_)
            store.flush()


def test_readers_that_open_while_another_process_clears_read_one_epoch_whole_or_are_told(tmp_path: Path) -> None:
    import multiprocessing

    (tmp_path / "disk").mkdir()
    real = tmp_path / "disk" / "s.mmr"
    make_store(real, 30)
    link = tmp_path / "link.mmr"
    os.symlink(real, link)
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    writer = context.Process(target=_clear_again_and_again, args=(real, 60, ready), daemon=True)
    writer.start()
    assert ready.wait(30.0), "the writer did not start"
    reads = told = 0
    try:
        while writer.is_alive() and reads < 2000:
            try:
                with ReplayStore.open(link) as reader:  # through the link
                    if len(reader) == 0:  # opened between a clear and its first commit
                        continue
                    for seed in range(3):
                        batch = reader.sample(8, rng=seed)
                        epochs = {value // 1000 for value in batch.action.tolist()}
                        assert len(epochs) == 1, f"one batch mixed epochs {sorted(epochs)}"
                        assert {value % 1000 for value in batch.action.tolist()} <= set(range(30))
                        np.testing.assert_array_equal(batch.fields["h"][:, 0], batch.action.astype(np.float32))
                        reads += 1
            except ClosedStoreError:
                told += 1  # cleared under it: told to open again, never a wrong answer or a checksum error
    finally:
        writer.join(120.0)
        if writer.is_alive():
            writer.kill()
    assert writer.exitcode == 0
    assert reads > 0
    assert sorted(os.listdir(tmp_path)) == ["disk", "link.mmr"] and sorted(os.listdir(tmp_path / "disk")) == ["s.mmr"]
    assert actions(link) == [60_000 + i for i in range(30)]


@pytest.mark.parametrize("mode", ["r", "r+"])
def test_a_header_of_gigabytes_in_a_sparse_file_is_refused_without_reading_it_whole(tmp_path: Path, mode: str) -> None:
    make_store(tmp_path / "s.mmr", 3)
    with open(tmp_path / "s.mmr" / "header.json", "r+b") as file:
        file.truncate(8 << 30)  # 8 GiB, sparse: reading it whole would take 8 GiB of memory
    with pytest.raises(CorruptStoreError, match=r"header is larger than 1,048,576 bytes"):
        ReplayStore.open(tmp_path / "s.mmr", mode=mode)
