"""The command line at its edges: each command given a missing path, a file where a store or a directory
is expected, an empty store, an env or an id out of range answers with one clear line on stderr and a
non-zero exit (or, where the question is sound, an honest empty answer), and leaves nothing behind."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from reference import ReferenceStore
from strategies import frame
from test_episode_ids import Recorder, cli

from mmreplay import ReplayStore, export_hdf5
from mmreplay.cli import build_parser

STORE_COMMANDS = {  # each command that reads a store, with the rest of its command line
    "info": [],
    "episodes": [],
    "show": ["0", "-o", "{tmp}/out.png"],
    "verify": [],
    "export": ["{tmp}/out.h5"],
}


def write_dopamine_checkpoint(directory: Path) -> None:
    """Checkpoint 0 of a Dopamine replay: one episode of 2 transitions."""
    directory.mkdir()
    arrays = {"$store$_observation": np.array([np.zeros((3, 4)), frame(1), frame(2)], np.uint8),
              "$store$_action": np.array([0, 5, 6], np.int32), "$store$_reward": np.array([0, 1, 1], np.float32),
              "$store$_terminal": np.array([0, 0, 1], np.uint8), "add_count": np.array(3),
              "invalid_range": np.array([2, 0])}
    for name, array in arrays.items():
        with gzip.open(directory / f"{name}_ckpt.0.gz", "wb") as out:
            np.save(out, array, allow_pickle=False)


def argv(command: str, store: Path, tmp_path: Path) -> list[str]:
    return [command, str(store), *(word.format(tmp=tmp_path) for word in STORE_COMMANDS[command])]


@pytest.fixture
def empty_store(tmp_path: Path) -> Path:
    with ReplayStore.create(tmp_path / "empty.mmr", frame_shape=(40, 40), capacity=8):
        pass
    return tmp_path / "empty.mmr"


@pytest.mark.parametrize("command", STORE_COMMANDS)
def test_a_missing_store_is_named_in_one_line(command: str, tmp_path: Path) -> None:
    pytest.importorskip("PIL.Image")
    status, out, err = cli(*argv(command, tmp_path / "nothing.mmr", tmp_path))
    assert (status, out) == (1, "")
    assert err == f"mmreplay: error: no mmreplay store at '{tmp_path / 'nothing.mmr'}': the path does not exist\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", STORE_COMMANDS)
def test_a_file_given_as_a_store_says_a_store_is_a_directory(command: str, tmp_path: Path) -> None:
    pytest.importorskip("PIL.Image")
    (tmp_path / "notes.txt").write_text("not a store")
    status, out, err = cli(*argv(command, tmp_path / "notes.txt", tmp_path))
    assert (status, out) == (1, "")
    assert err == (f"mmreplay: error: no mmreplay store at '{tmp_path / 'notes.txt'}': it is a file, and a store is "
                   "a directory (holding header.json)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_the_api_says_the_same_of_a_file_in_either_mode(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a store")
    for mode in ("r", "r+"):
        with pytest.raises(FileNotFoundError, match=r": it is a file, and a store is a directory \(holding "
                                                     r"header.json\)$"):
            ReplayStore.open(tmp_path / "notes.txt", mode)


def test_info_of_an_empty_store_reports_no_compression_ratio(empty_store: Path) -> None:
    status, out, _ = cli("info", str(empty_store), "--json")
    info = json.loads(out)
    assert status == 0 and (info["transitions"], info["episodes"], info["compression_ratio"]) == (0, 0, None)
    status, out, _ = cli("info", str(empty_store))
    assert status == 0 and "compression ratio  n/a" in out.splitlines()


def test_episodes_of_an_empty_store_is_an_empty_list(empty_store: Path) -> None:
    assert cli("episodes", str(empty_store), "--json") == (0, "[]\n", "")
    assert cli("episodes", str(empty_store)) == (0, "        id  env   length     return  ended by\n", "")


def test_show_on_an_empty_store_says_it_holds_no_episodes(empty_store: Path, tmp_path: Path) -> None:
    pytest.importorskip("PIL.Image")
    status, out, err = cli("show", str(empty_store), "0", "-o", str(tmp_path / "e.png"))
    assert (status, out) == (1, "")
    assert err == "mmreplay: error: no episode has id 0: the store holds no episodes (it is empty)\n"
    assert not (tmp_path / "e.png").exists()


def test_verify_of_an_empty_store_passes_with_nothing_checked(empty_store: Path) -> None:
    status, out, err = cli("verify", str(empty_store))
    assert (status, err) == (0, "")
    assert out == f"ok: {empty_store}: 0 transitions, 0 episodes, 0 frames decoded\n"


def test_export_of_an_empty_store_refuses_and_writes_nothing(empty_store: Path, tmp_path: Path) -> None:
    for layout, target in (("mmreplay", tmp_path / "x.h5"), ("minari", tmp_path / "x-v0")):
        status, out, err = cli("export", str(empty_store), str(target), "--layout", layout)
        assert (status, out) == (1, "")
        assert err == f"mmreplay: error: {empty_store}: the store holds no transitions: there is nothing to export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.mmr"]


@pytest.mark.parametrize("env", ["1", "3", "-1"])
def test_episodes_of_an_env_the_store_does_not_have_is_an_error(store_dir: Path, env: str) -> None:
    status, out, err = cli("episodes", str(store_dir), "--env", env)
    assert (status, out) == (1, "")
    assert err == f"mmreplay: error: --env must be 0 (the store has one env); got {env}\n"


def test_episodes_of_an_env_out_of_range_names_the_store_s_envs(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(40, 40), capacity=8, num_envs=3):
        pass
    status, _, err = cli("episodes", str(tmp_path / "s.mmr"), "--env", "3", "--json")
    assert status == 1 and err == "mmreplay: error: --env must be 0 to 2 (the store has 3 envs); got 3\n"
    assert cli("episodes", str(tmp_path / "s.mmr"), "--env", "2", "--json") == (0, "[]\n", "")


def test_show_minus_one_on_a_store_that_never_evicted_does_not_say_evicted(store_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("PIL.Image")
    status, out, err = cli("show", str(store_dir), "-1", "-o", str(tmp_path / "e.png"))
    assert (status, out) == (1, "")
    assert err == ("mmreplay: error: no episode has id -1: ids are steps, which start at 0; the stored episodes' "
                   "ids are 0, 3\n")


def test_show_of_an_evicted_id_says_evicted_and_lists_the_stored_ids(tmp_path: Path) -> None:
    pytest.importorskip("PIL.Image")
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=4) as store:
        recorder = Recorder(store, ReferenceStore(frame_shape=(4, 4), capacity=4))
        for t in range(10):  # episodes of 3 steps from steps 0, 3, 6 and 9; steps 6 to 9 stay
            recorder.record(["terminated" if t % 3 == 2 else "goes on"])
    status, out, err = cli("show", str(tmp_path / "s.mmr"), "3", "-o", str(tmp_path / "e.png"))
    assert (status, out) == (1, "")
    assert err == ("mmreplay: error: no episode has id 3: step 3 was evicted (the oldest stored step is 6); the "
                   "stored episodes' ids are 6, 9\n")


@pytest.mark.parametrize("command", ["import", "export", "show"])
def test_a_file_where_the_output_s_directory_should_be_is_named(command: str, store_dir: Path,
                                                                tmp_path: Path) -> None:
    pytest.importorskip("PIL.Image")
    (tmp_path / "notes.txt").write_text("a file")
    with ReplayStore.open(store_dir) as store:
        export_hdf5(store, tmp_path / "x.h5")
    target = tmp_path / "notes.txt" / "out"
    what, line = {
        "import": ("a store", ["import", str(tmp_path / "x.h5"), str(target)]),
        "export": ("an export", ["export", str(store_dir), str(target)]),
        "show": ("the output", ["show", str(store_dir), "0", "-o", f"{target}.png"]),
    }[command]
    status, out, err = cli(*line)
    assert (status, out) == (1, "")
    shown = f"{target}.png" if command == "show" else str(target)
    assert err == (f"mmreplay: error: cannot create {what} at '{shown}': '{tmp_path / 'notes.txt'}' is a file, "
                   "not a directory\n")


@pytest.mark.parametrize("command, source", [("import", "x.h5"), ("import-dopamine", "replay_logs")])
def test_an_import_from_a_missing_source_names_it(command: str, source: str, tmp_path: Path) -> None:
    status, out, err = cli(command, str(tmp_path / source), str(tmp_path / "s.mmr"))
    assert (status, out) == (1, "")
    kind = "HDF5 dataset" if command == "import" else "Dopamine checkpoint directory"
    assert err == f"mmreplay: error: no {kind} at '{tmp_path / source}'\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["import", "import-dopamine"])
def test_an_import_with_a_capacity_of_zero_is_refused_before_anything_is_written(command: str, store_dir: Path,
                                                                                 tmp_path: Path) -> None:
    if command == "import":
        with ReplayStore.open(store_dir) as store:
            export_hdf5(store, tmp_path / "x.h5")
        source, message = tmp_path / "x.h5", "capacity must be >= 1; got 0"
    else:
        write_dopamine_checkpoint(tmp_path / "logs")
        source, message = tmp_path / "logs", "capacity must be a positive int; got 0"
    status, out, err = cli(command, str(source), str(tmp_path / "c.mmr"), "--capacity", "0")
    assert (status, out, err) == (1, "", f"mmreplay: error: {message}\n")
    assert not (tmp_path / "c.mmr").exists()


def test_progress_bars_are_drawn_only_on_a_terminal_unless_asked(store_dir: Path, tmp_path: Path) -> None:
    assert cli("verify", str(store_dir))[2] == ""  # stderr is not a terminal here
    assert "transition" in cli("verify", str(store_dir), "--progress")[2]
    assert cli("export", str(store_dir), str(tmp_path / "x.h5"), "--no-progress")[2] == ""


def test_no_command_prints_the_usage_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args([])
    assert exit.value.code == 2
    assert capsys.readouterr().err.startswith("usage: mmreplay [-h] [--version] COMMAND ...\n")


def test_every_argument_of_every_command_is_explained_in_its_help() -> None:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    unexplained = [f"{name} {action.dest}" for name, parser in commands.choices.items()
                   for action in parser._actions if not action.help]
    assert unexplained == []


def test_show_names_its_argument_id_as_episodes_lists_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["show", "--help"])
    usage = capsys.readouterr().out
    assert "store ID\n" in usage and "as 'mmreplay episodes' lists it" in usage
