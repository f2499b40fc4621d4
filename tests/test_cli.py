"""The ``mmreplay`` command line, through ``main(argv)`` and once as a real subprocess."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from strategies import frame

from mmreplay import ReplayStore
from mmreplay.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_info_reports_layout_and_size_as_json(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "info", str(store_dir), "--json")
    info = json.loads(out)
    assert status == 0
    assert (info["frame_shape"], info["capacity"], info["transitions"], info["episodes"]) == ([40, 40], 32, 5, 2)
    assert info["format_version"] == 6 and info["bytes_on_disk"] > 0 and info["compression_ratio"] > 0


def test_info_prints_a_readable_table(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "info", str(store_dir))
    assert status == 0 and "frame shape" in out and "compression ratio" in out


def test_episodes_lists_id_env_first_step_length_return_and_end(store_dir: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "episodes", str(store_dir), "--json")
    assert status == 0
    assert [(r["id"], r["env"], r["first_step"], r["length"], r["return"], r["ended_by"]) for r in json.loads(out)] == [
        (0, 0, 0, 3, 3.0, "terminated"), (3, 0, 3, 2, 1.0, "in progress")]
    status, out, _ = run(capsys, "episodes", str(store_dir))
    assert "in progress" in out.splitlines()[2]


def test_show_writes_a_contact_sheet_and_an_animation(store_dir: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    image = pytest.importorskip("PIL.Image", reason="show needs Pillow: pip install 'mmreplay[show]'")
    assert run(capsys, "show", str(store_dir), "0", "-o", str(tmp_path / "e.png"), "--columns", "2")[0] == 0
    with image.open(tmp_path / "e.png") as sheet:
        # 4 frames of 40x40 at x2 in 2 columns: 4-pixel gaps around 80x80 cells, 12 rows of label under each
        assert sheet.size == (4 + 2 * (80 + 4), 4 + 2 * (80 + 12 + 4))
        pixels = np.array(sheet)
        assert pixels[4, 4].tolist() == [10] * 3 and pixels[4 + 96, 4 + 84].tolist() == [40] * 3
        assert pixels[4, 84].tolist() == [255] * 3  # the gap between two cells
        assert (pixels[84:96, 4:84] < 128).any()  # a label under the first cell
    assert run(capsys, "show", str(store_dir), "3", "-o", str(tmp_path / "e.gif"))[0] == 0
    with image.open(tmp_path / "e.gif") as gif:
        assert gif.n_frames == 3 and gif.size == (80, 80) and gif.info["duration"] == 70  # 60 Hz / 4, in 10 ms


def test_show_of_a_missing_episode_is_an_error(store_dir: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("PIL.Image", reason="show needs Pillow: pip install 'mmreplay[show]'")
    status, _, err = run(capsys, "show", str(store_dir), "9", "-o", str(tmp_path / "e.png"))
    assert status == 1 and err == ("mmreplay: error: no episode has id 9: step 9 was not added yet (the newest "
                                   "stored step is 4); the stored episodes' ids are 0, 3\n")
    status, _, err = run(capsys, "show", str(store_dir), "1", "-o", str(tmp_path / "e.png"))
    assert status == 1 and err == ("mmreplay: error: no episode has id 1: step 1 is inside episode 0 (env 0), and "
                                   "ids are first steps; the stored episodes' ids are 0, 3\n")


def test_verify_passes_a_sound_store(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "verify", str(store_dir), "--json", "--no-progress")
    report = json.loads(out)
    # frames_decoded counts frames, each once: the two episodes' first obs and one next frame a transition
    assert status == 0 and report["problems"] == [] and report["frames_decoded"] == (1 + 3) + (1 + 2)


def test_verify_lists_a_damaged_frame_and_exits_1(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    segment = next((store_dir / "frames").glob("*.seg"))
    data = bytearray(segment.read_bytes())
    data[:8] = b"\xff" * 8  # the first frame's compressed bytes
    segment.write_bytes(bytes(data))
    status, out, _ = run(capsys, "verify", str(store_dir), "--no-progress")
    assert status == 1
    assert out.startswith(f"{store_dir}: damaged: 0 rows and ") and "  - frame 0: frames/0000000000.seg, byte 0:" in out


def test_export_and_import_round_trip_in_both_layouts(store_dir: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    for layout, output in (("mmreplay", tmp_path / "x.h5"), ("minari", tmp_path / "x-v0")):
        assert run(capsys, "export", str(store_dir), str(output), "--layout", layout, "--no-progress")[0] == 0
        copy = tmp_path / f"copy-{layout}.mmr"
        status, out, _ = run(capsys, "import", str(output), str(copy), "--no-progress")
        assert status == 0 and out == f"imported 5 transitions into {copy}\n"
        with ReplayStore.open(copy) as imported, ReplayStore.open(store_dir) as original:
            np.testing.assert_array_equal(imported.read(range(5)).next_obs, original.read(range(5)).next_obs)


def test_import_dopamine_reads_checkpoint_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arrays = {"$store$_observation": np.array([np.zeros((3, 4)), frame(1), frame(2)], np.uint8),
              "$store$_action": np.array([0, 5, 6], np.int32), "$store$_reward": np.array([0, 1, 1], np.float32),
              "$store$_terminal": np.array([0, 0, 1], np.uint8), "add_count": np.array(3),
              "invalid_range": np.array([2, 0])}
    for name, array in arrays.items():
        with gzip.open(tmp_path / f"{name}_ckpt.0.gz", "wb") as out:
            np.save(out, array, allow_pickle=False)
    status, out, _ = run(capsys, "import-dopamine", str(tmp_path), str(tmp_path / "d.mmr"), "--stack-size", "2",
                         "--no-progress")
    assert status == 0 and out == (f"imported 2 transitions into {tmp_path / 'd.mmr'}\nstacks at episode starts are "
                                   "zero-padded, as Dopamine's sampler builds them (--stack-padding first repeats "
                                   "the first frame instead)\n")


def test_a_missing_store_is_an_error_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "info", str(tmp_path / "nothing.mmr"))
    assert status == 1 and out == "" and err.startswith("mmreplay: error: ") and "nothing.mmr" in err


def test_a_foreign_file_to_import_is_an_error_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.h5").write_text("not hdf5")
    status, _, err = run(capsys, "import", str(tmp_path / "x.h5"), str(tmp_path / "s.mmr"))
    assert status == 1 and err.startswith(f"mmreplay: error: {tmp_path / 'x.h5'}: not an HDF5 file")


def test_a_bad_command_line_exits_2_like_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["export"])
    assert exit.value.code == 2 and "mmreplay export: error:" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["info", "episodes", "show", "verify", "export", "import", "import-dopamine"])
def test_each_command_help_shows_an_example(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main([command, "--help"])
    assert exit.value.code == 0 and f"example: mmreplay {command}" in capsys.readouterr().out


def test_python_dash_m_mmreplay_runs_as_a_subprocess(store_dir: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mmreplay", "episodes", str(store_dir), "--json"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and len(json.loads(done.stdout)) == 2
    failed = subprocess.run([sys.executable, "-m", "mmreplay", "verify", str(store_dir / "missing")],
                            capture_output=True, text=True, timeout=60, check=False)
    assert failed.returncode == 1 and failed.stderr.startswith("mmreplay: error: ")
