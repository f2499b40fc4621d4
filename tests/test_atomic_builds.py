"""Imports and exports are all or nothing: built beside the target, renamed in, leftovers removed.

The SIGKILL trials run ``scripts/kill_builds.py`` (more trials: run it by hand, see its docstring).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from strategies import frame

from mmreplay import ReplayStore, export_hdf5, import_hdf5

ROOT = Path(__file__).resolve().parent.parent


def small_store(path: Path) -> ReplayStore:
    store = ReplayStore.create(path, frame_shape=(3, 4), capacity=8)
    store.add(frame(1), 0, 1.0, frame(2), False, False)
    store.add(frame(2), 1, 1.0, frame(3), True, False)
    return store


def test_a_sigkill_at_random_moments_leaves_nothing_or_the_complete_result(tmp_path: Path) -> None:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "kill_builds.py"), "--trials", "8", "--seed", "3",
                           "--transitions", "600"], capture_output=True, text=True, env=environment, timeout=300)
    report = json.loads(done.stdout)
    assert report["failures_listed"] == [] and done.returncode == 0
    assert report["trials"] == 8 == report["nothing at the target"] + report["complete result"]


def test_the_leftovers_of_a_killed_export_are_removed_by_the_next_one(tmp_path: Path) -> None:
    dead = tmp_path / ".x.h5.exporting-0badf00d"
    dead.mkdir()
    (dead / ".building.lock").touch()
    (dead / "export.h5").write_bytes(b"half a file")
    with small_store(tmp_path / "a.mmr") as store:
        export_hdf5(store, tmp_path / "x.h5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mmr", "x.h5"]


def test_a_build_still_running_elsewhere_is_left_alone(tmp_path: Path) -> None:
    running = tmp_path / ".b.mmr.importing-12345678"
    running.mkdir()
    with open(running / ".building.lock", "ab") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # its builder is alive
        with small_store(tmp_path / "a.mmr") as store:
            export_hdf5(store, tmp_path / "x.h5")
        import_hdf5(tmp_path / "x.h5", tmp_path / "b.mmr")
        assert running.is_dir()


def test_a_failed_import_leaves_nothing_at_the_target_or_beside_it(tmp_path: Path) -> None:
    (tmp_path / "x.h5").write_text("not hdf5")
    with pytest.raises(ValueError):
        import_hdf5(tmp_path / "x.h5", tmp_path / "b.mmr")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.h5"]


def test_leftovers_beside_a_complete_result_are_removed_by_the_refused_rerun(tmp_path: Path) -> None:
    with small_store(tmp_path / "a.mmr") as store:
        export_hdf5(store, tmp_path / "x.h5")
        dead = tmp_path / ".x.h5.exporting-0badf00d"  # killed after its rename, before removing this
        dead.mkdir()
        (dead / ".building.lock").touch()
        with pytest.raises(FileExistsError, match="the path already exists"):
            export_hdf5(store, tmp_path / "x.h5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mmr", "x.h5"]
