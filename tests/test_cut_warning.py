"""An add whose obs does not continue its env's open episode starts a new episode, and says so once: a
``mmreplay.EpisodeCutWarning`` (a ``UserWarning``) naming the env and the step, once per env of an opened store, never for an episode that
ended by a flag, a first add, a fragment, or an add that was refused."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from strategies import frame

import mmreplay
from mmreplay import ReplayStore, encode_frames

SHAPE = (8, 8)


def cut_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "does not continue" in str(w.message)]


def add(store: ReplayStore, obs: Any, next_obs: Any, *, ended: bool = False, **options: Any) -> None:
    n = store.num_envs
    if n == 1:
        store.add(frame(obs, SHAPE), 0, 0.0, frame(next_obs, SHAPE), ended, False, **options)
    else:
        store.add(np.stack([frame(v, SHAPE) for v in obs]), np.zeros(n, np.int64), np.zeros(n, np.float32),
                  np.stack([frame(v, SHAPE) for v in next_obs]), np.full(n, ended), np.zeros(n, bool), **options)


def message(env: int, step: int) -> str:
    return (f"env {env}'s obs at step {step} does not continue its episode (it differs from the env's previous "
            "next_obs, and that transition neither terminated nor truncated): a new episode starts at step "
            f"{step}, and the one before it is listed as ended_by='cut'. Pass terminated or truncated on an "
            "episode's last transition (this is said once per env of an opened store)")


def test_an_obs_that_does_not_continue_the_open_episode_warns_once_naming_the_env_and_step(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=SHAPE, capacity=32) as store:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            add(store, 1, 2)
            add(store, 2, 3)
            add(store, 9, 10)  # step 2: obs 9 is not the previous next_obs 3
            add(store, 20, 21)  # cut again: not said again
            add(store, 21, 22)
        assert cut_warnings(caught) == [message(0, 2)]
        assert all(w.category is mmreplay.EpisodeCutWarning for w in caught if "does not continue" in str(w.message))
        assert [e.ended_by for e in store.episodes()] == ["cut", "cut", "in progress"]


def test_each_env_of_a_vector_store_is_warned_once_at_its_own_first_cut(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=SHAPE, capacity=64, num_envs=2) as store:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            add(store, [1, 101], [2, 102])  # steps 0, 1
            add(store, [2, 150], [3, 151])  # steps 2, 3: env 1 cut at step 3
            add(store, [3, 151], [4, 152])
            add(store, [60, 200], [61, 201])  # steps 6, 7: both cut; env 1 already warned
            add(store, [70, 210], [71, 211])
        assert cut_warnings(caught) == [message(1, 3), message(0, 6)]


def test_episodes_that_end_by_a_flag_a_first_add_or_a_fragment_do_not_warn(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=SHAPE, capacity=32) as store:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            add(store, 1, 2, ended=True)
            add(store, 10, 11)  # after a terminated transition: a new episode, as expected
            add(store, 11, 12)
            add(store, 30, 31, fragment=True)  # the caller says an episode starts here, unrecorded before
        assert cut_warnings(caught) == []


def test_a_refused_add_does_not_warn_and_the_next_cut_still_does(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=SHAPE, capacity=32) as store:
        add(store, 1, 2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ValueError):
                store.add(frame(5, SHAPE), 0, float("nan"), frame(6, SHAPE), False, False)
            assert cut_warnings(caught) == [] and len(store) == 1
            add(store, 5, 6)
        assert cut_warnings(caught) == [message(0, 1)]


def test_a_reopened_store_warns_again_for_its_own_adds(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=SHAPE, capacity=32) as store:
        add(store, 1, 2)
        with pytest.warns(UserWarning, match=r"^env 0's obs at step 1 does not continue"):
            add(store, 7, 8)
    with ReplayStore.open(tmp_path / "s.mmr", "r+") as store:
        with pytest.warns(UserWarning, match=r"^env 0's obs at step 2 does not continue"):
            add(store, 40, 41)


def test_add_encoded_warns_at_the_step_that_does_not_continue(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=SHAPE, capacity=32, frame_encoding="lz4") as store:
        frames = encode_frames(np.stack([frame(v, SHAPE) for v in (1, 2, 3, 7, 8, 9)]))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            store.add_encoded(frames, np.array([0, 1, 3, 4]), np.zeros(4, np.int64), np.zeros(4, np.float32),
                              np.array([1, 2, 4, 5]), np.zeros(4, bool), np.zeros(4, bool))
        assert cut_warnings(caught) == [message(0, 2)]


def test_the_cut_warning_has_its_own_class_so_a_loop_can_ignore_it_alone(tmp_path: Path) -> None:
    assert issubclass(mmreplay.EpisodeCutWarning, UserWarning) and "EpisodeCutWarning" in mmreplay.__all__
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=SHAPE, capacity=16, stack_size=1) as store:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.filterwarnings("ignore", category=mmreplay.EpisodeCutWarning)
            add(store, 1, 2)
            add(store, 5, 6)  # a cut, ignored by class
            warnings.warn("another warning", UserWarning)  # still shown
        assert [str(w.message) for w in caught] == ["another warning"] and len(store) == 2
