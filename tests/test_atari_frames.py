"""mmreplay.testing.atari_frames: the real frame streams the suite records with ALE, caches, and cuts.

Streams here are short (a few hundred frames, a fraction of a second to record) and cached in a
temporary directory; the suite's own 4,000-frame streams are checked by every test that reads them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mmreplay.testing import atari_frames

REPO = Path(__file__).resolve().parents[1]

KEYS = ("frames", "episode_start", "action", "reward", "terminated", "truncated")


@pytest.fixture
def short_recordings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shorter streams are cut from 300-frame recordings instead of 4,000-frame ones."""
    monkeypatch.setattr(atari_frames, "SHORTEST_RECORDING", 300)


def test_a_stream_has_the_documented_layout() -> None:
    stream = atari_frames.record("breakout", 400)
    assert {key: (stream[key].shape, stream[key].dtype) for key in KEYS} == {
        "frames": ((400, 84, 84), np.uint8), "episode_start": ((400,), np.bool_), "action": ((400,), np.int16),
        "reward": ((400,), np.float32), "terminated": ((400,), np.bool_), "truncated": ((400,), np.bool_),
    }  # fmt: skip
    starts = np.flatnonzero(stream["episode_start"])
    assert starts[0] == 0 and len(starts) >= 2, "400 Breakout frames hold an episode end"
    # No action in an episode's final frame (the one before a reset frame) nor in the stream's last frame.
    no_action = np.append(starts[1:] - 1, 399)
    np.testing.assert_array_equal(np.flatnonzero(stream["action"] < 0), no_action)
    assert not stream["reward"][no_action].any()
    np.testing.assert_array_equal(np.flatnonzero(stream["terminated"]), starts[1:] - 2)
    meta = json.loads(str(stream["meta"]))
    assert (meta["env_id"], meta["seed"], meta["frames"]) == ("ALE/Breakout-v5", 1, 400)
    assert meta["complete_episodes"] == len(starts) - 1


def test_recording_twice_gives_the_same_stream() -> None:
    first, second = atari_frames.record("pong", 120), atari_frames.record("pong", 120)
    for key in KEYS:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)


@pytest.mark.usefixtures("short_recordings")
def test_loading_fewer_frames_gives_what_recording_that_many_gives(tmp_path: Path) -> None:
    """Also across an episode's end, and with no action in the last frame, as in a recording of that length."""
    loaded, recorded = atari_frames.load("breakout", 250, directory=tmp_path), atari_frames.record("breakout", 250)
    assert recorded["episode_start"][1:].any()
    for key in KEYS:
        np.testing.assert_array_equal(loaded[key], recorded[key], err_msg=key)
    assert json.loads(str(loaded["meta"])) == json.loads(str(recorded["meta"]))


def test_a_stream_is_recorded_once_then_read_from_the_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = atari_frames.stream_path("pong", 200, directory=tmp_path)
    assert capsys.readouterr().err.count("recording 200 real Pong frames") == 1
    monkeypatch.setattr(atari_frames, "record", lambda game, frames: pytest.fail("recorded again"))
    assert atari_frames.stream_path("pong", 200, directory=tmp_path) == path
    assert capsys.readouterr().err == ""
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_shorter_stream_is_cut_from_a_longer_cached_one_without_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    atari_frames.stream_path("mspacman", 300, directory=tmp_path)
    monkeypatch.setattr(atari_frames, "record", lambda game, frames: pytest.fail("recorded again"))
    with np.load(atari_frames.stream_path("mspacman", 140, directory=tmp_path)) as cut:
        assert cut["frames"].shape == (140, 84, 84) and cut["action"][-1] == -1


def test_the_cache_directory_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MMREPLAY_FRAMES_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert atari_frames.cache_dir() == tmp_path / "home" / ".cache" / "mmreplay" / "frames"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert atari_frames.cache_dir() == tmp_path / "xdg" / "mmreplay" / "frames"
    monkeypatch.setenv("MMREPLAY_FRAMES_DIR", str(tmp_path / "frames"))
    assert atari_frames.cache_dir() == tmp_path / "frames"


def test_a_write_that_fails_midway_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def write_half(file: object, **arrays: np.ndarray) -> None:
        file.write(b"PK\x03\x04 half an archive")  # type: ignore[attr-defined]
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez_compressed", write_half)
    with pytest.raises(KeyboardInterrupt):
        atari_frames.stream_path("pong", 50, directory=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_without_ale_the_error_names_the_command_that_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    version = atari_frames.metadata.version

    def without_ale(distribution: str) -> str:
        if distribution == "ale-py":
            raise atari_frames.metadata.PackageNotFoundError(distribution)
        return version(distribution)

    monkeypatch.setattr(atari_frames.metadata, "version", without_ale)
    with pytest.raises(ModuleNotFoundError, match=r"needs ale-py, which is not installed: install the demo extra: "
                       r"pip install 'mmreplay\[demo\]' \(in a clone: pip install -e '\.\[demo\]', or run "
                       r"`bash scripts/test.sh`\)$"):  # fmt: skip
        atari_frames.load("pong", 100)


def test_recording_without_ale_importable_names_the_extra_that_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ale_py", None)  # an import of ale_py now raises ImportError
    with pytest.raises(ModuleNotFoundError, match=r"^recording real Atari frames needs ale_py: install the demo "
                       r"extra: pip install 'mmreplay\[demo\]'"):  # fmt: skip
        atari_frames.record("pong", 10)


def run_recorder(*arguments: str) -> subprocess.CompletedProcess[str]:
    """``python -m mmreplay.testing.atari_frames ARGUMENTS`` with this tree's package first on the path."""
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    return subprocess.run([sys.executable, "-m", "mmreplay.testing.atari_frames", *arguments], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_importing_the_recorder_imports_neither_ale_nor_gymnasium() -> None:
    code = ("import sys; from mmreplay.testing import atari_frames; "
            "print(sorted({'ale_py', 'gymnasium', 'cv2'} & set(sys.modules)))")  # fmt: skip
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={"PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert (run.returncode, run.stdout.strip(), run.stderr) == (0, "[]", "")


def test_the_recorder_runs_as_a_module_whose_help_shows_an_example() -> None:
    run = run_recorder("--help")
    assert run.returncode == 0, run.stderr
    assert "usage: python -m mmreplay.testing.atari_frames" in run.stdout
    assert "python -m mmreplay.testing.atari_frames --frames 20000" in run.stdout


def test_the_recorder_refuses_an_unknown_game_with_one_json_object_and_a_nonzero_exit(tmp_path: Path) -> None:
    run = run_recorder("--games", "tetris", "--json", "--cache-dir", str(tmp_path))
    assert run.returncode == 1
    assert json.loads(run.stdout) == {
        "ok": False, "game": "tetris", "streams": [],
        "error": "game is 'tetris'; expected one of ['breakout', 'mspacman', 'pong', 'seaquest']",
    }  # fmt: skip
    assert run.stderr == "error: game is 'tetris'; expected one of ['breakout', 'mspacman', 'pong', 'seaquest']\n"
    assert list(tmp_path.iterdir()) == []


def test_the_recorder_prints_each_cached_stream_as_json(tmp_path: Path) -> None:
    first = run_recorder("--games", "pong", "--frames", "60", "--cache-dir", str(tmp_path))
    assert first.returncode == 0, first.stderr
    again = run_recorder("--games", "pong", "--frames", "60", "--cache-dir", str(tmp_path), "--json")
    assert again.returncode == 0 and again.stderr == "", again.stderr
    out = json.loads(again.stdout)
    assert out["ok"] is True and [(s["game"], s["frames"]) for s in out["streams"]] == [("pong", 60)]
    assert Path(out["streams"][0]["path"]).parent == tmp_path and Path(out["streams"][0]["path"]).is_file()


@pytest.mark.parametrize(
    ("game", "frames", "error", "message"),
    [
        ("tetris", 100, ValueError, r"^game is 'tetris'; expected one of \['breakout', 'mspacman', 'pong', 'seaquest'\]$"),
        ("pong", 1, ValueError, r"^frames is 1; expected at least 2 \(one transition\)$"),
        ("pong", 100.0, TypeError, r"^frames is a float; expected an int$"),
    ],
)
def test_a_bad_game_or_frame_count_is_refused_before_anything_is_recorded(
    tmp_path: Path, game: str, frames: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        atari_frames.stream_path(game, frames, directory=tmp_path)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
