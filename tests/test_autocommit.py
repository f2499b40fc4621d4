"""A writer commits by itself: every ``commit_every`` transitions, every ``commit_interval_s`` seconds, when
dropped and at interpreter exit; readers see each commit; directories follow the umask."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from mmreplay import ReplayStore, export_hdf5

REPO = Path(__file__).resolve().parents[1]


def stack(value: int) -> np.ndarray:
    return np.full((2, 3, 4), value % 256, np.uint8)


def add_steps(store: ReplayStore, count: int, first: int = 0) -> None:
    """``count`` transitions of one episode, with Python scalars as training loops pass them."""
    for value in range(first, first + count):
        obs = np.stack([np.full((3, 4), value % 256, np.uint8), np.full((3, 4), (value + 1) % 256, np.uint8)])
        next_obs = np.stack([obs[1], np.full((3, 4), (value + 2) % 256, np.uint8)])
        store.add(obs, 1, 0.5, next_obs, False, False)


def committed(path: Path) -> int:
    with ReplayStore.open(path, "r") as reader:
        return reader.transitions_added


def test_a_writer_commits_every_commit_every_transitions(store_path: Path) -> None:
    store = ReplayStore.create(store_path, frame_shape=(3, 4), capacity=100, stack_size=2,
                               commit_every=5, commit_interval_s=None)
    add_steps(store, 4)
    assert committed(store_path) == 0
    add_steps(store, 1, first=4)
    assert committed(store_path) == 5
    add_steps(store, 7, first=5)
    assert committed(store_path) == 10
    store.close()
    assert committed(store_path) == 12


def test_a_writer_commits_once_commit_interval_s_has_passed(store_path: Path) -> None:
    store = ReplayStore.create(store_path, frame_shape=(3, 4), capacity=100, stack_size=2, commit_interval_s=0.2)
    add_steps(store, 3)
    assert committed(store_path) == 0  # 0.2 s have not passed
    time.sleep(0.3)
    add_steps(store, 1, first=3)  # the first add after the interval commits everything so far
    assert committed(store_path) == 4
    store.close()


def test_commit_every_and_commit_interval_s_none_commit_only_on_flush_and_close(store_path: Path) -> None:
    store = ReplayStore.create(store_path, frame_shape=(3, 4), capacity=100, stack_size=2,
                               commit_every=None, commit_interval_s=None)
    add_steps(store, 30)
    assert committed(store_path) == 0
    store.flush()
    assert committed(store_path) == 30
    store.close()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"commit_every": 0}, ValueError, "commit_every must be >= 1; got 0"),
        ({"commit_every": 2.5}, TypeError, "commit_every must be"),
        ({"commit_interval_s": -1.0}, ValueError, r"commit_interval_s must be >= 0; got -1.0"),
        ({"commit_interval_s": 0}, ValueError, r"commit_interval_s must be > 0 \(None disables"),
        ({"commit_interval_s": "5"}, TypeError, "commit_interval_s must be a real number; got str '5'"),
    ],
)
def test_bad_commit_settings_are_refused_before_the_store_exists(store_path: Path, kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        ReplayStore.create(store_path, frame_shape=(3, 4), capacity=10, **kwargs)
    assert not store_path.exists()


def run_python(code: str, *args: str, expect_signal: int | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with the repository's mmreplay importable."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run([sys.executable, "-W", "error::ResourceWarning", "-c", textwrap.dedent(code), *args],
                            capture_output=True, text=True, env=env, timeout=120)
    if expect_signal is None:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode == -expect_signal, result.stderr
    return result


SCRIPT_PRELUDE = """
    import gc, os, signal, sys, warnings
    import numpy as np
    from mmreplay import ReplayStore
    warnings.simplefilter("error")  # a ResourceWarning from a dropped store fails the script
    def add(store, count):
        for value in range(count):
            obs = np.stack([np.full((3, 4), value % 256, np.uint8), np.full((3, 4), (value + 1) % 256, np.uint8)])
            store.add(obs, 1, 0.5, np.stack([obs[1], np.full((3, 4), (value + 2) % 256, np.uint8)]), False, False)
"""


def test_a_script_that_never_closes_its_store_keeps_everything_at_a_normal_exit(store_path: Path) -> None:
    run_python(SCRIPT_PRELUDE + """
    store = ReplayStore.create(sys.argv[1], frame_shape=(3, 4), capacity=100, stack_size=2)
    add(store, 37)
    # no flush, no close: the interpreter exits with the store still referenced by a global
    """, str(store_path))
    assert committed(store_path) == 37


def test_a_dropped_store_commits_and_warns_nothing(store_path: Path) -> None:
    result = run_python(SCRIPT_PRELUDE + """
    store = ReplayStore.create(sys.argv[1], frame_shape=(3, 4), capacity=100, stack_size=2)
    add(store, 21)
    del store
    gc.collect()
    reader = ReplayStore.open(sys.argv[1], "r")
    print(len(reader))
    reader = None  # a dropped reader releases its files without a ResourceWarning too
    gc.collect()
    """, str(store_path))
    assert result.stdout.split() == ["21"]
    assert "Warning" not in result.stderr


def test_a_killed_writer_loses_at_most_the_adds_since_its_last_automatic_commit(store_path: Path) -> None:
    run_python(SCRIPT_PRELUDE + """
    store = ReplayStore.create(sys.argv[1], frame_shape=(3, 4), capacity=1000, stack_size=2, commit_every=100)
    add(store, 250)
    os.kill(os.getpid(), signal.SIGKILL)
    """, str(store_path), expect_signal=signal.SIGKILL)
    assert committed(store_path) == 200


def test_a_reader_sees_each_commit_in_len_stored_steps_transitions_added_and_episodes(store_path: Path) -> None:
    writer = ReplayStore.create(store_path, frame_shape=(3, 4), capacity=8, stack_size=2, commit_interval_s=None)
    reader = ReplayStore.open(store_path, "r")
    assert (len(reader), reader.transitions_added, reader.stored_steps, reader.episodes()) == (0, 0, range(0), [])
    add_steps(writer, 5)
    writer.flush()
    assert len(reader) == 5
    assert reader.transitions_added == 5
    assert reader.stored_steps == range(0, 5)
    [episode] = reader.episodes()
    assert episode.length == 5 and episode.ended_by == "in progress"
    add_steps(writer, 6, first=5)
    writer.add(stack(0), 1, 0.0, np.stack([stack(0)[1], np.full((3, 4), 99, np.uint8)]), True, False)
    writer.flush()
    assert reader.stored_steps == range(4, 12)  # capacity 8: the oldest four were evicted
    assert len(reader) == 8
    assert [e.ended_by for e in reader.episodes()] == ["cut", "terminated"]
    reader.close()
    writer.close()


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_store_and_dataset_directories_follow_the_umask(tmp_path: Path, umask: int) -> None:
    previous = os.umask(umask)
    try:
        store = ReplayStore.create(tmp_path / "store.mmr", frame_shape=(3, 4), capacity=10, stack_size=2)
        add_steps(store, 3)
        export_hdf5(store, tmp_path / "dataset-v0", layout="minari")
        store.close()
    finally:
        os.umask(previous)
    assert (tmp_path / "store.mmr").stat().st_mode & 0o777 == 0o777 & ~umask
    assert (tmp_path / "dataset-v0").stat().st_mode & 0o777 == 0o777 & ~umask
