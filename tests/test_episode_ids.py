"""One episode id for the API and the command line: ``Episode.id`` (the step of the episode's first stored
transition) is what ``store.episodes().by_id`` and ``mmreplay show`` take and what ``mmreplay episodes``
lists, checked against the reference model's episodes on stores with several envs and eviction."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import ReferenceStore
from strategies import frame

from mmreplay import EpisodeNotFoundError, ReplayStore
from mmreplay.cli import main
from mmreplay.store.reading.episode_list import EpisodeList

SHAPE = (4, 4)
ENDS = ("goes on", "terminated", "truncated", "cut")  # how an env's transition leaves its episode


def cli(*argv: str) -> tuple[int, str, str]:
    """``mmreplay ARGV`` in this process: exit status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()


class Recorder:
    """Feeds a store and the reference model the same adds, numbering every frame uniquely (1, 2, ...),
    so a drawn frame says which it is. ``record(ends)`` adds one transition per env: an env whose
    previous transition was cut starts its next obs with a frame that does not continue it."""

    def __init__(self, store: ReplayStore, ref: ReferenceStore) -> None:
        self.store, self.ref = store, ref
        self.frames = 0
        self.last_next: list[int | None] = [None] * store.num_envs  # each env's previous next_obs frame

    def fresh(self) -> int:
        self.frames += 1
        return self.frames

    def record(self, ends: list[str]) -> None:
        obs, next_obs = [], []
        for env, end in enumerate(ends):
            previous = self.last_next[env]
            obs.append(self.fresh() if previous is None else previous)
            next_obs.append(self.fresh())
            self.last_next[env] = None if end != "goes on" else next_obs[-1]
        terminated = [end == "terminated" for end in ends]
        truncated = [end == "truncated" for end in ends]
        arguments: tuple[Any, ...] = (np.array([frame(v, SHAPE) for v in obs]), np.zeros(len(ends), np.int64),
                                      np.ones(len(ends), np.float32), np.array([frame(v, SHAPE) for v in next_obs]),
                                      terminated, truncated)
        if len(ends) == 1:
            arguments = (arguments[0][0], 0, 1.0, arguments[3][0], terminated[0], truncated[0])
        self.store.add(*arguments)
        self.ref.add(*arguments)


def reference_episodes(ref: ReferenceStore) -> dict[int, dict[str, Any]]:
    """The episodes the store must list, by id: each episode of the model with a stored transition, under
    the step of its first stored one."""
    expected = {}
    for env, episodes in enumerate(ref.episodes):
        for number, episode in enumerate(episodes):
            stored = [t for t in episode if ref.by_step[t.step] is not None]
            if not stored:
                continue
            last = episode[-1]
            ended_by = ("terminated" if last.terminated else "truncated" if last.truncated
                        else "in progress" if number == len(episodes) - 1 else "cut")
            frames = [int(stored[0].obs[-1].flat[1])] + [int(t.next_obs[-1].flat[1]) for t in stored]
            expected[stored[0].step] = {"env": env, "steps": [t.step for t in stored], "ended_by": ended_by,
                                        "complete": stored[0] is episode[0], "frames": frames}
    return expected


def gif_frames(path: Path) -> list[int]:
    """The value of each frame of an animation ``mmreplay show`` drew of numbered frames."""
    from PIL import Image

    values = []
    with Image.open(path) as gif:
        for i in range(gif.n_frames):
            gif.seek(i)
            values.append(int(np.array(gif.convert("L"))[0, 1]))
    return values


recordings = st.tuples(
    st.integers(1, 3),  # num_envs
    st.integers(0, 9),  # capacity beyond num_envs
    st.lists(st.lists(st.sampled_from(ENDS), min_size=3, max_size=3), max_size=14),  # each add's ends, per env
)


@settings(max_examples=40)
@given(recordings)
def test_every_listed_id_names_the_same_episode_in_the_api_the_cli_and_the_model(recording: Any) -> None:
    pytest.importorskip("PIL.Image", reason="show needs Pillow: pip install 'mmreplay[show]'")
    num_envs, extra, adds = recording
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "s.mmr"
        layout = {"frame_shape": SHAPE, "capacity": num_envs + extra, "num_envs": num_envs, "stack_size": 2}
        ref = ReferenceStore(**layout)
        with ReplayStore.create(path, **layout) as store:
            recorder = Recorder(store, ref)
            for ends in adds:
                recorder.record(ends[:num_envs])
        expected = reference_episodes(ref)
        status, out, err = cli("episodes", str(path), "--json")
        assert status == 0, err
        rows = json.loads(out)
        assert [row["id"] for row in rows] == sorted(expected)
        with ReplayStore.open(path, "r") as store:
            episodes = store.episodes()
        assert isinstance(episodes, EpisodeList)
        assert [episode.id for episode in episodes] == sorted(expected)
        for row, listed in zip(rows, episodes):
            want = expected[row["id"]]
            found = episodes.by_id(row["id"])
            assert found is listed and found.steps.tolist() == want["steps"]
            assert (row["env"], row["first_step"], row["length"], row["ended_by"], row["complete"]) == (
                want["env"], want["steps"][0], len(want["steps"]), want["ended_by"], want["complete"])
            gif = Path(directory) / f"{row['id']}.gif"
            status, out, err = cli("show", str(path), str(row["id"]), "-o", str(gif), "--scale", "1", "--json")
            assert status == 0, err
            shown = json.loads(out)
            assert (shown["episode"], shown["env"], shown["first_step"], shown["last_step"], shown["length"]) == (
                row["id"], want["env"], want["steps"][0], want["steps"][-1], len(want["steps"]))
            assert gif_frames(gif) == want["frames"]


@settings(max_examples=40)
@given(recordings)
def test_an_id_never_changes_while_its_first_step_is_stored(recording: Any) -> None:
    num_envs, extra, adds = recording
    with tempfile.TemporaryDirectory() as directory:
        layout = {"frame_shape": SHAPE, "capacity": num_envs + extra, "num_envs": num_envs, "stack_size": 2}
        with ReplayStore.create(Path(directory) / "s.mmr", **layout) as store:
            recorder = Recorder(store, ReferenceStore(**layout))
            seen: dict[int, tuple[int, list[int]]] = {}  # id -> (env, steps) when last listed
            for ends in adds:
                recorder.record(ends[:num_envs])
                episodes = store.episodes()
                assert isinstance(episodes, EpisodeList)
                oldest = store.stored_steps.start
                for episode_id, (env, steps) in seen.items():
                    if episode_id >= oldest:  # the same episode, grown at most
                        episode = episodes.by_id(episode_id)
                        assert episode.env_index == env and episode.steps[: len(steps)].tolist() == steps
                    else:
                        with pytest.raises(EpisodeNotFoundError, match=f"^no episode has id {episode_id}: step "
                                                                       f"{episode_id} was evicted"):
                            episodes.by_id(episode_id)
                seen.update((episode.id, (episode.env_index, episode.steps.tolist())) for episode in episodes)


def two_env_store(path: Path, *, adds: int, capacity: int = 32) -> None:
    """Env 0's episodes last 3 steps, env 1's 4; ``adds`` adds of both envs."""
    layout = {"frame_shape": SHAPE, "capacity": capacity, "num_envs": 2, "stack_size": 2}
    with ReplayStore.create(path, **layout) as store:
        recorder = Recorder(store, ReferenceStore(**layout))
        for t in range(adds):
            recorder.record(["terminated" if t % 3 == 2 else "goes on", "truncated" if t % 4 == 3 else "goes on"])


def test_episode_id_is_the_first_stored_step_and_the_list_position_is_position(tmp_path: Path) -> None:
    two_env_store(tmp_path / "s.mmr", adds=6)
    with ReplayStore.open(tmp_path / "s.mmr", "r") as store:
        episodes = store.episodes()
    assert [(e.id, e.env_index, e.steps.tolist()) for e in episodes] == [
        (0, 0, [0, 2, 4]), (1, 1, [1, 3, 5, 7]), (6, 0, [6, 8, 10]), (9, 1, [9, 11])]
    assert [e.position for e in episodes] == [0, 1, 2, 3] and all(e.id == e.first_step for e in episodes)


def test_an_episode_prints_one_name_its_id(tmp_path: Path) -> None:
    two_env_store(tmp_path / "s.mmr", adds=6)
    with ReplayStore.open(tmp_path / "s.mmr", "r") as store:
        episode = store.episodes()[1]
    assert repr(episode) == ("Episode(id=1, env_index=1, length=4, total_reward=4, ended_by='truncated', "
                             "complete=True)")


def test_the_old_positional_episode_id_still_answers_with_a_deprecation_warning(tmp_path: Path) -> None:
    two_env_store(tmp_path / "s.mmr", adds=6)
    with ReplayStore.open(tmp_path / "s.mmr", "r") as store:
        episodes = store.episodes()
    with pytest.deprecated_call(match=r"^Episode.episode_id is the episode's position in the list that gave it, "
                                      r"which shifts as the ring evicts older episodes: name an episode by "
                                      r"Episode.id \(by_id takes it\), or use Episode.position$"):
        assert episodes[2].episode_id == 2


def test_after_the_ring_wraps_every_listed_episode_is_found_by_its_id_not_by_its_position(tmp_path: Path) -> None:
    two_env_store(tmp_path / "s.mmr", adds=20, capacity=16)
    with ReplayStore.open(tmp_path / "s.mmr", "r") as store:
        episodes = store.episodes()
    assert store.stored_steps.start > 0 and all(e.position != e.id for e in episodes)
    assert [episodes.by_id(e.id) for e in episodes] == list(episodes)
    with pytest.raises(EpisodeNotFoundError, match="was evicted"):
        episodes.by_id(episodes[0].position)


def test_by_id_finds_each_episode_and_takes_numpy_integers(tmp_path: Path) -> None:
    two_env_store(tmp_path / "s.mmr", adds=6)
    with ReplayStore.open(tmp_path / "s.mmr", "r") as store:
        episodes = store.episodes()
    assert isinstance(episodes, EpisodeList)
    assert [episodes.by_id(i).steps.tolist() for i in (0, 1, 6, 9)] == [[0, 2, 4], [1, 3, 5, 7], [6, 8, 10], [9, 11]]
    assert episodes.by_id(np.int64(6)) is episodes[2]


@pytest.mark.parametrize("asked, why", [
    (2, "step 2 is inside episode 0 (env 0), and ids are first steps; the stored episodes' ids are 0, 1, 6, 9"),
    (12, "step 12 was not added yet (the newest stored step is 11); the stored episodes' ids are 0, 1, 6, 9"),
    (-1, "ids are steps, which start at 0; the stored episodes' ids are 0, 1, 6, 9"),
])
def test_an_id_that_is_not_a_first_step_says_why_and_which_ids_exist(tmp_path: Path, asked: int, why: str) -> None:
    two_env_store(tmp_path / "s.mmr", adds=6)
    with ReplayStore.open(tmp_path / "s.mmr", "r") as store:
        episodes = store.episodes()
    assert isinstance(episodes, EpisodeList)
    with pytest.raises(EpisodeNotFoundError) as error:
        episodes.by_id(asked)
    assert str(error.value) == f"no episode has id {asked}: {why}"
    assert isinstance(error.value, LookupError)


def test_an_evicted_id_says_it_was_evicted_and_a_negative_one_does_not(tmp_path: Path) -> None:
    two_env_store(tmp_path / "s.mmr", adds=9, capacity=10)  # steps 8..17 stored
    with ReplayStore.open(tmp_path / "s.mmr", "r") as store:
        episodes = store.episodes()
    assert isinstance(episodes, EpisodeList)
    assert [(e.id, e.complete) for e in episodes] == [(8, False), (9, True), (12, True), (17, True)]
    with pytest.raises(EpisodeNotFoundError, match=r"^no episode has id 6: step 6 was evicted \(the oldest stored "
                                                   r"step is 8\); the stored episodes' ids are 8, 9, 12, 17$"):
        episodes.by_id(6)
    with pytest.raises(EpisodeNotFoundError, match=r"^no episode has id -1: ids are steps, which start at 0; "):
        episodes.by_id(-1)


def test_an_empty_store_has_no_ids(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=SHAPE, capacity=4) as store:
        episodes = store.episodes()
    assert episodes == [] and isinstance(episodes, EpisodeList)
    with pytest.raises(EpisodeNotFoundError, match=r"^no episode has id 0: the store holds no episodes \(it is "
                                                   r"empty\)$"):
        episodes.by_id(0)


def test_many_ids_are_shown_as_the_first_and_last_few(tmp_path: Path) -> None:
    two_env_store(tmp_path / "s.mmr", adds=30, capacity=64)
    with ReplayStore.open(tmp_path / "s.mmr", "r") as store:
        episodes = store.episodes()
    assert isinstance(episodes, EpisodeList)
    with pytest.raises(EpisodeNotFoundError) as error:
        episodes.by_id(2)
    assert str(error.value).endswith("the 18 stored episodes' ids are 0, 1, 6, ..., 49, 54, 57")


@pytest.mark.parametrize("asked", [1.0, "6", True, None])
def test_an_id_of_the_wrong_type_is_a_type_error(tmp_path: Path, asked: Any) -> None:
    two_env_store(tmp_path / "s.mmr", adds=2)
    with ReplayStore.open(tmp_path / "s.mmr", "r") as store:
        episodes = store.episodes()
    assert isinstance(episodes, EpisodeList)
    with pytest.raises(TypeError, match=rf"^id must be an int \(an episode's first step, as Episode.id gives it\); "
                                        rf"got {type(asked).__name__}$"):
        episodes.by_id(asked)


def test_show_takes_the_ids_episodes_lists_on_a_store_with_two_envs_and_eviction(tmp_path: Path) -> None:
    pytest.importorskip("PIL.Image", reason="show needs Pillow: pip install 'mmreplay[show]'")
    two_env_store(tmp_path / "s.mmr", adds=9, capacity=10)
    status, out, _ = cli("episodes", str(tmp_path / "s.mmr"))
    assert status == 0 and out.splitlines() == [
        "        id  env   length     return  ended by",
        "         8    0        2          2  terminated (incomplete: its start is not stored)",
        "         9    1        4          4  truncated",
        "        12    0        3          3  terminated",
        "        17    1        1          1  in progress"]
    status, out, _ = cli("show", str(tmp_path / "s.mmr"), "9", "-o", str(tmp_path / "e.gif"), "--scale", "1")
    assert status == 0 and out == f"wrote {tmp_path / 'e.gif'}: all 5 frames of episode 9, x1, 15 fps\n"
    # Each add numbers env 0's new frames, then env 1's: env 1's second episode (adds 4 to 7) starts with
    # the fresh frame 13 and continues with the next_obs frames 14, 16, 19, 21.
    assert gif_frames(tmp_path / "e.gif") == [13, 14, 16, 19, 21]
