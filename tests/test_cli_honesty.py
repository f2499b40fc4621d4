"""The command line never misleads: each case here once printed a traceback, a wrong figure or a
success where it should have refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from strategies import frame

from mmreplay import ReplayStore, export_hdf5
from mmreplay.cli import main
from test_cli import run

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("fps", ["0", "-5", "nan"])
def test_show_refuses_an_fps_that_is_not_positive(store_dir: Path, tmp_path: Path, fps: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("PIL.Image")
    status, _, err = run(capsys, "show", str(store_dir), "0", "-o", str(tmp_path / "e.gif"), f"--fps={fps}")
    assert status == 1 and err == f"mmreplay: error: --fps must be a positive number; got {float(fps)}\n"
    assert not (tmp_path / "e.gif").exists()


def test_show_refuses_an_existing_output_unless_forced(store_dir: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("PIL.Image")
    (tmp_path / "e.png").write_text("mine")
    status, _, err = run(capsys, "show", str(store_dir), "0", "-o", str(tmp_path / "e.png"))
    assert status == 1 and err.endswith("e.png': the path already exists\n")
    assert (tmp_path / "e.png").read_text() == "mine"
    assert run(capsys, "show", str(store_dir), "0", "-o", str(tmp_path / "e.png"), "--force")[0] == 0


@pytest.mark.parametrize("command", ["show", "export"])
def test_a_missing_parent_directory_is_refused_not_created(store_dir: Path, tmp_path: Path, command: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("PIL.Image")
    target = tmp_path / "no" / "such" / ("e.png" if command == "show" else "x.h5")
    argv = ["show", str(store_dir), "0", "-o", str(target)] if command == "show" else ["export", str(store_dir),
                                                                                       str(target), "--no-progress"]
    status, _, err = run(capsys, *argv)
    assert status == 1 and "does not exist (it is not created for you)" in err
    assert not (tmp_path / "no").exists()


def test_info_and_episodes_fail_on_a_store_whose_segments_are_gone(store_dir: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    for segment in (store_dir / "frames").glob("*.seg"):
        segment.unlink()
    for command in ("info", "episodes"):
        status, out, err = run(capsys, command, str(store_dir))
        assert status == 1 and out == ""
        assert err.startswith(f"mmreplay: error: {store_dir}: 1 file(s) its contents need are missing: ")
        assert err.endswith("0000000000.seg (run 'mmreplay verify')\n")
    status, out, _ = run(capsys, "verify", str(store_dir), "--no-progress")
    assert status == 1 and out.splitlines()[1] == f"  - missing file: {store_dir / 'frames' / '0000000000.seg'}"


def test_verify_lists_at_most_its_cap_and_does_not_count_the_note(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.mmr"
    rng = np.random.default_rng(0)
    with ReplayStore.create(path, frame_shape=(16, 16), capacity=3000) as store:
        for _ in range(3000):
            store.add(rng.integers(0, 255, (16, 16), np.uint8), 0, 1.0, rng.integers(0, 255, (16, 16), np.uint8),
                      False, False)
    for segment in (path / "frames").glob("*.seg"):
        data = bytearray(segment.read_bytes())
        data[: len(data) // 2] = b"\xa5" * (len(data) // 2)  # the oldest frames fail their checksums
        segment.write_bytes(bytes(data))
    status, out, _ = run(capsys, "verify", str(path), "--no-progress", "--json")
    report = json.loads(out)
    assert status == 1 and len(report["problems"]) == 100 and report["stopped_early"] is True
    status, out, _ = run(capsys, "verify", str(path), "--no-progress")
    lines = out.splitlines()
    assert lines[0].startswith(f"{path}: damaged: 0 rows and {len(report['damaged_frames']):,} frames; ")
    assert len(lines) == 104 and len(report["damaged_frames"]) > 100  # the JSON report lists every one
    assert lines[-3] == "  (the first 100 listed; --json lists every damaged row and frame)"
    assert lines[-1] == f"  to copy the intact transitions into a new store: mmreplay salvage {path} NEW"


def test_import_with_a_smaller_capacity_says_what_it_kept(store_dir: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with ReplayStore.open(store_dir) as store:
        export_hdf5(store, tmp_path / "x.h5")
    status, out, _ = run(capsys, "import", str(tmp_path / "x.h5"), str(tmp_path / "c.mmr"), "--capacity", "3",
                         "--no-progress")
    assert status == 0 and out == (f"imported 5 transitions into {tmp_path / 'c.mmr'}; it keeps the newest 3 "
                                   "(capacity 3), the older ones were evicted\n")


def test_episode_ids_survive_eviction_and_appends(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "e.mmr"
    with ReplayStore.create(path, frame_shape=(40, 40), capacity=7) as store:
        for episode, length in enumerate((2, 3, 2)):
            for t in range(length):
                n = episode * 50 + t
                store.add(frame(n, (40, 40)), 0, 1.0, frame(n + 1, (40, 40)), t == length - 1, False)
        store.flush()
        ids_before = [r["id"] for r in json.loads(run(capsys, "episodes", str(path), "--json")[1])]
        for t in range(2):  # evicts the first episode; the others keep their ids
            store.add(frame(200 + t, (40, 40)), 0, 1.0, frame(201 + t, (40, 40)), False, False)
        store.flush()
        rows = json.loads(run(capsys, "episodes", str(path), "--json")[1])
    assert ids_before == [0, 2, 5]
    assert [(r["id"], r["complete"]) for r in rows] == [(2, True), (5, True), (7, True)]
    status, _, err = run(capsys, "show", str(path), "0", "-o", str(tmp_path / "x.png"))
    assert status == 1 and "no episode has id 0: step 0 was evicted (the oldest stored step is 2)" in err


def test_a_minari_export_to_a_folder_named_export_gets_a_valid_id(store_dir: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "export", str(store_dir), str(tmp_path / "export"), "--layout", "minari",
                         "--no-progress", "--json")
    assert status == 0 and json.loads(out)["transitions"] == 5
    metadata = json.loads((tmp_path / "export" / "data" / "metadata.json").read_text())
    assert metadata["dataset_id"] == "export-v0"
    status, _, err = run(capsys, "export", str(store_dir), str(tmp_path / "other"), "--layout", "minari",
                         "--dataset-id", "bad id", "--no-progress")
    assert status == 1 and err == ("mmreplay: error: --dataset-id must look like '[namespace/]name-v0' (Minari's "
                                   "rule); got 'bad id'\n")


@pytest.mark.parametrize("command", ["info", "episodes", "verify", "show", "export", "import", "import-dopamine"])
def test_every_command_takes_json(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--json" in capsys.readouterr().out


def test_ctrl_c_ends_with_one_line_and_status_130_leaving_nothing(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(84, 84), capacity=4000) as store:
        for t in range(4000):
            store.add(rng.integers(0, 255, (84, 84), np.uint8), 0, 1.0, rng.integers(0, 255, (84, 84), np.uint8),
                      t % 50 == 49, False)
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    # The child takes Ctrl-C as a terminal delivers it: a shell that started this run in the background
    # (`... &` without job control) left SIGINT ignored, and a child inherits that.
    child = subprocess.Popen([sys.executable, "-m", "mmreplay", "export", str(tmp_path / "s.mmr"),
                              str(tmp_path / "x.h5"), "--progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=environment, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert child.stderr is not None
    child.stderr.read(1)  # the progress bar's first character: the export is under way
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 130 and err.splitlines()[-1] == "mmreplay: interrupted"
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.mmr"]
