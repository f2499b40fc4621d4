"""Stores of format versions 4 and 5 with reference frames (a bespoke encoder's blocks, which this mmreplay
no longer writes): they open read-only through the pure-Python decoder of their format, read back every
transition they were given, refuse to be appended to with an error that says how to convert them, and
``convert`` (and ``mmreplay convert``) writes them again, exactly, as stores of the current format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from legacy_stores import STORES, adds, extract, vector_add

from mmreplay import ReplayStore
from mmreplay.copying import convert
from mmreplay.disk import header
from mmreplay.errors import FormatVersionError


@pytest.fixture(scope="module")
def legacy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return extract(tmp_path_factory.mktemp("legacy"))


def expected(name: str) -> list[dict]:
    """What the store should hold: the adds that made it, its newest `capacity` of them."""
    capacity = STORES[name][2]
    return list(adds(name))[-capacity:]


def assert_holds(store: ReplayStore, calls: list[dict]) -> None:
    assert len(store) == len(calls)
    batch = store.read(store.stored_steps)
    np.testing.assert_array_equal(batch.obs, np.stack([call["obs"] for call in calls]))
    np.testing.assert_array_equal(batch.next_obs, np.stack([call["next_obs"] for call in calls]))
    assert batch.action.tolist() == [call["action"] for call in calls]
    assert batch.reward.tolist() == [call["reward"] for call in calls]
    assert batch.terminated.tolist() == [call["terminated"] for call in calls]
    assert batch.truncated.tolist() == [call["truncated"] for call in calls]
    assert batch.env_index.tolist() == [call["env"] for call in calls]


@pytest.mark.parametrize("name", sorted(STORES))
def test_an_older_reference_store_reads_back_every_transition_it_was_given(legacy: dict[str, Path], name: str) -> None:
    with ReplayStore.open(legacy[name], "r") as store:
        assert store.format_version == STORES[name][0]
        assert store.frame_encoding == "lz4-reference"
        assert_holds(store, expected(name))
        batch = store.sample(16, rng=0)  # sampled through the same decoder
        again = store.read(batch.index)
        np.testing.assert_array_equal(batch.obs, again.obs)


@pytest.mark.parametrize("name", sorted(STORES))
def test_an_older_reference_store_refuses_to_append_and_names_the_conversion(legacy: dict[str, Path], name: str) -> None:
    version = STORES[name][0]
    with pytest.raises(FormatVersionError, match=rf"format version {version}'s reference frames open read-only "
                                                 rf"\(mode 'r'\); to append, convert the store to format version "
                                                 rf"{header.FORMAT_VERSION} first \(mmreplay convert "):
        ReplayStore.open(legacy[name], "r+")


@pytest.mark.parametrize("name", sorted(STORES))
def test_convert_writes_the_same_transitions_and_episodes_in_the_current_format(
    legacy: dict[str, Path], tmp_path: Path, name: str
) -> None:
    target = tmp_path / "converted.mmr"
    assert convert(legacy[name], target) == STORES[name][2]
    with ReplayStore.open(legacy[name], "r") as old, ReplayStore.open(target, "r+") as new:
        assert new.format_version == header.FORMAT_VERSION
        assert (new.frame_shape, new.capacity, new.stack_size, new.num_envs, new.frame_encoding, new.reference_scheme) == (
            old.frame_shape, old.capacity, old.stack_size, old.num_envs, old.frame_encoding, old.reference_scheme)
        assert_holds(new, expected(name))
        shape = [(e.env_index, e.length, e.ended_by, e.complete) for e in old.episodes()]
        assert [(e.env_index, e.length, e.ended_by, e.complete) for e in new.episodes()] == shape
        last = list(adds(name))[-1]["next_obs"]
        vector_add(new, {"env": 0, "obs": last, "action": 1, "reward": 0.0, "terminated": False, "truncated": False,
                         "next_obs": np.concatenate([last[1:], last[-1:]])})
        assert len(new) == old.capacity  # appended: the oldest evicted


def test_convert_refuses_an_existing_target_before_reading(legacy: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "there"
    target.mkdir()
    with pytest.raises(FileExistsError):
        convert(legacy["v4-one-env"], target)
    assert list(target.iterdir()) == []


def test_mmreplay_convert_prints_what_it_wrote_as_json(legacy: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "cli.mmr"
    done = subprocess.run([sys.executable, "-m", "mmreplay", "convert", str(legacy["v5-two-envs"]), str(target),
                           "--json"], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {"store": str(legacy["v5-two-envs"]), "output": str(target),
                                       "transitions": STORES["v5-two-envs"][2],
                                       "format_version": header.FORMAT_VERSION, "from_format_version": 5}
    with ReplayStore.open(target, "r") as store:
        assert_holds(store, expected("v5-two-envs"))
