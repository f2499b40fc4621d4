"""A command line that scripts can trust: under ``--json`` every outcome, errors included, is one JSON
object on stdout with the exit status text mode gives; a path that does not exist is named as such; an
export whose target's suffix says another format is refused before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_edges import STORE_COMMANDS, argv
from test_episode_ids import cli

from mmreplay.cli import commands


def json_error(status: int, out: str, err: str) -> dict[str, object]:
    """The one JSON object an error printed on stdout (checked to be alone there), its line kept on stderr."""
    assert out.endswith("\n") and out.count("\n") == 1, out
    report = json.loads(out)
    assert isinstance(report, dict) and report["exit_status"] == status
    assert err.splitlines()[-1] in (f"mmreplay: error: {report['error']}",  # argparse names the command too
                                    *(f"mmreplay {command}: error: {report['error']}" for command in STORE_COMMANDS))
    return report


@pytest.mark.parametrize("command", STORE_COMMANDS)
def test_a_missing_store_under_json_is_one_object_on_stdout_with_exit_1(command: str, tmp_path: Path) -> None:
    pytest.importorskip("PIL.Image")
    status, out, err = cli(*argv(command, tmp_path / "nothing.mmr", tmp_path), "--json")
    report = json_error(status, out, err)
    assert status == 1
    assert report == {"error": f"no mmreplay store at '{tmp_path / 'nothing.mmr'}': the path does not exist",
                      "error_type": "StoreNotFoundError", "exit_status": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", STORE_COMMANDS)
def test_a_path_that_does_not_exist_is_named_as_such_not_as_a_missing_header(command: str, tmp_path: Path) -> None:
    pytest.importorskip("PIL.Image")
    status, out, err = cli(*argv(command, tmp_path / "nothing.mmr", tmp_path))
    assert (status, out) == (1, "")
    assert err == f"mmreplay: error: no mmreplay store at '{tmp_path / 'nothing.mmr'}': the path does not exist\n"


def test_a_directory_without_a_header_is_still_named_as_missing_its_header(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    status, out, err = cli("info", str(tmp_path / "empty"), "--json")
    assert json_error(status, out, err) == {
        "error": f"no mmreplay store at '{tmp_path / 'empty'}' (missing header.json)",
        "error_type": "StoreNotFoundError", "exit_status": 1}


def test_a_damaged_store_under_json_is_one_object_with_exit_1(store_dir: Path) -> None:
    (store_dir / "header.json").write_text("{not json")
    status, out, err = cli("info", str(store_dir), "--json")
    report = json_error(status, out, err)
    assert status == 1 and report["error_type"] == "CorruptStoreError"
    assert str(report["error"]).startswith(f"{store_dir / 'header.json'}: header is not valid JSON")


def test_a_library_error_under_json_keeps_its_message_and_exit_1(store_dir: Path) -> None:
    status, out, err = cli("episodes", str(store_dir), "--env", "3", "--json")
    assert json_error(status, out, err) == {"error": "--env must be 0 (the store has one env); got 3",
                                            "error_type": "ValueError", "exit_status": 1}


@pytest.mark.parametrize("line, message", [
    (["info", "--json"], "the following arguments are required: store"),
    (["show", "s.mmr", "forty", "-o", "x.png", "--json"], "argument ID: invalid int value: 'forty'"),
    (["export", "s.mmr", "x.h5", "--layout", "zarr", "--json"],
     "argument --layout: invalid choice: 'zarr' (choose from mmreplay, minari)"),
    (["nonsense", "--json"], "argument COMMAND: invalid choice: 'nonsense' (choose from info, episodes, show, "
                             "verify, export, import, import-dopamine, convert, salvage)"),
    (["info", "s.mmr", "--js", "--frobnicate"], "unrecognized arguments: --frobnicate"),  # --js: argparse's prefix
])
def test_a_bad_command_line_under_json_is_one_object_with_exit_2(line: list[str], message: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        commands.main(line)
    out, err = capsys.readouterr()
    assert exit.value.code == 2
    report = json_error(2, out, err)
    assert report["error_type"] == "ArgumentError"
    assert str(report["error"]).replace("'", "") == message.replace("'", "")  # Python versions quote choices apart
    assert err.startswith("usage: mmreplay")


def test_a_bad_command_line_without_json_prints_nothing_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        commands.main(["info"])
    out, err = capsys.readouterr()
    assert (exit.value.code, out) == (2, "")
    assert err.endswith("mmreplay info: error: the following arguments are required: store\n")


def test_json_after_a_double_dash_is_an_argument_not_the_option(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        commands.main(["info", "--", "--json", "extra"])
    assert capsys.readouterr().out == ""


def test_ctrl_c_under_json_is_one_object_with_exit_130(store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(arguments: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "_info", interrupted)
    status, out, err = cli("info", str(store_dir), "--json")
    assert status == 130 and err == "mmreplay: interrupted\n"
    assert json.loads(out) == {"error": "interrupted", "error_type": "KeyboardInterrupt", "exit_status": 130}


def test_a_bug_under_json_is_one_object_naming_the_exception(store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(arguments: object) -> int:
        raise RuntimeError("something\nunexpected")

    monkeypatch.setattr(commands, "_info", broken)
    status, out, err = cli("info", str(store_dir), "--json")
    assert json_error(status, out, err) == {"error": "RuntimeError: something unexpected",
                                            "error_type": "RuntimeError", "exit_status": 1}


@pytest.mark.parametrize("layout, target, expected", [
    ("mmreplay", "out.txt", "one HDF5 file"),
    ("mmreplay", "out.csv", "one HDF5 file"),
    ("mmreplay", "out.json", "one HDF5 file"),
    ("mmreplay", "out.mmr", "one HDF5 file"),
    ("minari", "pong-v0.h5", "a dataset directory"),
    ("minari", "out.txt", "a dataset directory"),
])
def test_an_export_target_whose_suffix_says_another_format_is_refused_before_anything_is_written(
        store_dir: Path, tmp_path: Path, layout: str, target: str, expected: str) -> None:
    status, out, err = cli("export", str(store_dir), str(tmp_path / target), "--layout", layout, "--no-progress")
    assert (status, out) == (1, "")
    assert err.startswith(f"mmreplay: error: export --layout {layout} writes {expected}")
    assert f"got '{tmp_path / target}'" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.mmr"]
    status, out, err = cli("export", str(store_dir), str(tmp_path / target), "--layout", layout, "--json")
    assert json_error(status, out, err)["error_type"] == "ValueError"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.mmr"]


@pytest.mark.parametrize("layout, target", [
    ("mmreplay", "out.h5"), ("mmreplay", "out.HDF5"), ("mmreplay", "out.hdf"), ("mmreplay", "out.he5"),
    ("mmreplay", "out"), ("mmreplay", "run.2024-05-01"), ("minari", "pong-random-v0"), ("minari", "export"),
])
def test_an_export_target_of_its_own_format_or_without_a_suffix_is_written(
        store_dir: Path, tmp_path: Path, layout: str, target: str) -> None:
    status, out, _ = cli("export", str(store_dir), str(tmp_path / target), "--layout", layout, "--json")
    assert status == 0 and json.loads(out)["transitions"] == 5
    assert (tmp_path / target).exists()
