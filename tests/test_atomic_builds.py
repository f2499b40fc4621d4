"""Imports and exports are all or nothing: built beside the target, renamed in, leftovers removed.

The SIGKILL trials run ``scripts/kill_builds.py`` (more trials: run it by hand, see its docstring).
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from strategies import frame

from mmreplay import ReplayStore, export_hdf5, import_dopamine, import_hdf5
from mmreplay.cli import main

ROOT = Path(__file__).resolve().parent.parent


def small_store(path: Path) -> ReplayStore:
    store = ReplayStore.create(path, frame_shape=(3, 4), capacity=8)
    store.add(frame(1), 0, 1.0, frame(2), False, False)
    store.add(frame(2), 1, 1.0, frame(3), True, False)
    return store


def test_a_sigkill_at_random_moments_leaves_nothing_or_the_complete_result(tmp_path: Path) -> None:
    # Each operation killed anywhere, as its build directory appears, and as its result is renamed in.
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "kill_builds.py"), "--trials", "12", "--seed", "3",
                           "--transitions", "600"], capture_output=True, text=True, env=environment, timeout=500)
    report = json.loads(done.stdout)
    assert report["failures_listed"] == [] and done.returncode == 0
    assert report["trials"] == 12 == report["nothing at the target"] + report["complete result"]
    assert report["trials_by_phase"] == {"anywhere": 4, "made": 4, "renamed": 4}


def test_the_leftovers_of_a_killed_export_are_removed_by_the_next_one(tmp_path: Path) -> None:
    dead = tmp_path / ".x.h5.exporting-0badf00d"
    dead.mkdir()
    (dead / ".building.lock").touch()
    (dead / "export.h5").write_bytes(b"half a file")
    with small_store(tmp_path / "a.mmr") as store:
        export_hdf5(store, tmp_path / "x.h5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mmr", "x.h5"]


@pytest.mark.parametrize("layout", ["mmreplay", "minari"])
def test_a_build_killed_before_it_could_lock_its_directory_is_removed_by_the_next_one_at_once(
    tmp_path: Path, layout: str
) -> None:
    # The flaky kill trial's leftover ('.t5-export-minari.exporting-8ccf3329'): killed between making its
    # directory and locking it, it was taken for a build still running for 60 s, and the rerun left it.
    dead = tmp_path / ".x.exporting-8ccf3329"
    dead.mkdir()
    (dead / "dataset").mkdir()
    with small_store(tmp_path / "a.mmr") as store:
        export_hdf5(store, tmp_path / "x", layout=layout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mmr", "x"]


def test_a_build_still_running_elsewhere_is_left_alone(tmp_path: Path) -> None:
    running = tmp_path / ".b.mmr.importing-12345678"
    running.mkdir()
    descriptor = os.open(running, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # its builder is alive: it holds its directory locked
        with small_store(tmp_path / "a.mmr") as store:
            export_hdf5(store, tmp_path / "x.h5")
        import_hdf5(tmp_path / "x.h5", tmp_path / "b.mmr")
        assert running.is_dir()
    finally:
        os.close(descriptor)


def test_a_failed_import_leaves_nothing_at_the_target_or_beside_it(tmp_path: Path) -> None:
    (tmp_path / "x.h5").write_text("not hdf5")
    with pytest.raises(ValueError):
        import_hdf5(tmp_path / "x.h5", tmp_path / "b.mmr")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.h5"]


def test_leftovers_beside_a_complete_result_stay_through_a_refused_rerun_and_go_with_the_next_build(
    tmp_path: Path,
) -> None:
    with small_store(tmp_path / "a.mmr") as store:
        export_hdf5(store, tmp_path / "x.h5")
        dead = tmp_path / ".x.h5.exporting-0badf00d"  # killed after its rename, before removing this
        dead.mkdir()
        with pytest.raises(FileExistsError, match="the path already exists"):
            export_hdf5(store, tmp_path / "x.h5")
        assert dead.is_dir()  # nothing is removed before a call's arguments are accepted
        (tmp_path / "x.h5").unlink()
        export_hdf5(store, tmp_path / "x.h5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mmr", "x.h5"]


def dopamine_checkpoint(folder: Path) -> Path:
    """A Dopamine checkpoint of 20 slots (3 padding slots, then one episode), as Dopamine saves it."""
    folder.mkdir()
    observation = np.zeros((20, 3, 4), np.uint8)
    observation[3:] = np.arange(17, dtype=np.uint8)[:, None, None]
    terminal = np.zeros(20, np.uint8)
    terminal[-1] = 1
    arrays = {"$store$_observation": observation, "$store$_action": np.zeros(20, np.int32),
              "$store$_reward": np.ones(20, np.float32), "$store$_terminal": terminal, "add_count": np.array(20),
              "invalid_range": np.arange(18, 22) % 20}
    for name, array in arrays.items():
        with gzip.open(folder / f"{name}_ckpt.0.gz", "wb") as out:
            np.save(out, array, allow_pickle=False)
    return folder


def run_cli(*arguments: str) -> None:
    """``mmreplay ARGUMENTS``; a refusal (status 1) is raised as a FileExistsError with what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stderr(printed):
        status = main(list(arguments))
    if status:
        raise FileExistsError(printed.getvalue())


OPERATIONS = {
    "export_hdf5": lambda source, target: export_hdf5(ReplayStore.open(source["store"]), target),
    "export_hdf5 minari": lambda source, target: export_hdf5(ReplayStore.open(source["store"]), target,
                                                             layout="minari"),
    "import_hdf5": lambda source, target: import_hdf5(source["h5"], target),
    "import_dopamine": lambda source, target: import_dopamine(source["dopamine"], target, stack_size=2),
    "mmreplay export": lambda source, target: run_cli("export", str(source["store"]), str(target)),
    "mmreplay import": lambda source, target: run_cli("import", str(source["h5"]), str(target)),
}


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_cleanup_removes_only_the_names_this_library_makes_and_nothing_when_refused(
    tmp_path: Path, operation: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    sources = {"store": tmp_path / "a.mmr", "h5": tmp_path / "a.h5", "dopamine": dopamine_checkpoint(tmp_path / "d")}
    with small_store(sources["store"]) as store:
        export_hdf5(store, sources["h5"])
    target = work / "pong"
    # A user's directories named like a build's, and links to them, all older than any grace period.
    users = [".pong.backup-2024", ".pong.exporting-2024", ".pong.importing-0badf00d0", ".pong.old-0badf00d",
             ".pong.exporting-0BADF00D", ".pong.exporting-0badf00d.keep"]
    for name in users:
        (work / name).mkdir()
        (work / name / "precious").write_text("mine")
    (work / ".pong.importing-feedf00d").symlink_to(work / ".pong.backup-2024")
    ours = [work / ".pong.exporting-0badf00d", work / ".pong.importing-c0ffee00"]  # killed builds' leftovers
    for leftover in ours:
        leftover.mkdir()
        (leftover / "half").write_text("of a build")
    for path in work.iterdir():
        os.utime(path, (1, 1), follow_symlinks=False)
    (work / "pong").mkdir()  # the target exists: the call is refused, and removes nothing
    with pytest.raises(FileExistsError, match="the path already exists"):
        OPERATIONS[operation](sources, target)
    assert all(leftover.is_dir() for leftover in ours)
    (work / "pong").rmdir()
    OPERATIONS[operation](sources, target)
    assert sorted(p.name for p in work.iterdir()) == sorted([*users, ".pong.importing-feedf00d", "pong"])
    assert all((work / name / "precious").read_text() == "mine" for name in users)
