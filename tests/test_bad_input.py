"""Bad input everywhere: every public function gets a clear error of the right builtin type, and nothing
already stored changes (``read`` of every stored step is compared before and after)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import assert_same_snapshot, snapshot

from mmreplay import (
    ClosedStoreError,
    CorruptStoreError,
    FormatVersionError,
    PrioritizedSampler,
    ReadOnlyStoreError,
    ReplayStore,
    StoreExistsError,
    StoreNotFoundError,
)

SHAPE = (3, 4)
fixture_settings = settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)


def _frame(i: int) -> np.ndarray:
    return np.full(SHAPE, i % 256, np.uint8)


def _filled(path: Path, *, num_envs: int = 1, prioritized: bool = False, n: int = 30) -> ReplayStore:
    store = ReplayStore.create(path, frame_shape=SHAPE, capacity=20, stack_size=2, num_envs=num_envs,
                               sampler=PrioritizedSampler() if prioritized else None)
    for i in range(n):
        if num_envs == 1:
            store.add(_frame(i), i, float(i), _frame(i + 1), i % 7 == 6, False)
        else:
            store.add(np.stack([_frame(i + 50 * e) for e in range(num_envs)]), np.arange(num_envs) + i,
                      np.full(num_envs, float(i)), np.stack([_frame(i + 1 + 50 * e) for e in range(num_envs)]),
                      np.zeros(num_envs, bool), np.zeros(num_envs, bool))
    store.flush()
    return store


@pytest.fixture
def store(tmp_path: Path):
    s = _filled(tmp_path / "single.mmr", prioritized=True)
    yield s
    s.close()


@pytest.fixture
def vector(tmp_path: Path):
    s = _filled(tmp_path / "vector.mmr", num_envs=3)
    yield s
    s.close()


# -- add ---------------------------------------------------------------------------------------------

GOOD = dict(obs=_frame(29), action=1, reward=0.5, next_obs=_frame(30), terminated=False, truncated=False)
BAD_ADD = [
    ("obs", np.zeros((3, 5), np.uint8), ValueError),
    ("obs", np.zeros((3, 3, 4), np.uint8), ValueError),
    ("obs", np.zeros(SHAPE, np.float32), TypeError),
    ("obs", np.zeros(SHAPE, np.int64), TypeError),
    ("obs", "pixels", TypeError),
    ("next_obs", np.zeros((4, 3), np.uint8), ValueError),
    ("next_obs", np.zeros(SHAPE, np.uint16), TypeError),
    ("next_obs", np.zeros((2, 3, 4), np.uint8), ValueError),  # a stack while obs is one frame
    ("action", 1.5, TypeError),
    ("action", np.float64(2.0), TypeError),
    ("action", np.array([1, 2]), ValueError),
    ("action", "left", TypeError),
    ("action", np.uint64(2**64 - 1), ValueError),  # out of range for int64
    ("reward", math.nan, ValueError),
    ("reward", math.inf, ValueError),
    ("reward", -math.inf, ValueError),
    ("reward", np.float32("nan"), ValueError),
    ("reward", "1.0", TypeError),
    ("reward", np.array([1.0, 2.0]), ValueError),
    ("reward", None, TypeError),
    ("terminated", 1, TypeError),
    ("terminated", np.array([True, False]), ValueError),
    ("terminated", "yes", TypeError),
    ("truncated", 0.0, TypeError),
    ("truncated", None, TypeError),
]


@fixture_settings
@given(case=st.sampled_from(BAD_ADD))
def test_add_rejects_each_bad_argument_and_changes_nothing(store: ReplayStore, case) -> None:
    name, value, error = case
    before = snapshot(store)
    with pytest.raises(error, match=name.split("_")[0] if name != "next_obs" else "next_obs|obs"):
        store.add(**{**GOOD, name: value})
    assert_same_snapshot(before, snapshot(store))


@fixture_settings
@given(data=st.data())
def test_vector_add_rejects_bad_env_masks_and_arguments(vector: ReplayStore, data) -> None:
    good = dict(obs=np.stack([_frame(29 + 50 * e) for e in range(3)]), action=np.arange(3),
                reward=np.zeros(3), next_obs=np.stack([_frame(30 + 50 * e) for e in range(3)]),
                terminated=np.zeros(3, bool), truncated=np.zeros(3, bool))
    name, value, error = data.draw(st.sampled_from([
        ("env_mask", np.ones(2, bool), ValueError),
        ("env_mask", np.ones(4, bool), ValueError),
        ("env_mask", np.ones((3, 1), bool), ValueError),
        ("env_mask", np.array([1, 0, 1]), TypeError),
        ("env_mask", np.array([0.0, 1.0, 1.0]), TypeError),
        ("env_mask", [True, "no", False], TypeError),
        ("obs", _frame(0), ValueError),
        ("action", np.arange(2), ValueError),
        ("action", np.array([0.5, 1, 2]), TypeError),
        ("reward", np.array([0.0, math.nan, 1.0]), ValueError),
        ("reward", 1.0, ValueError),
        ("terminated", np.zeros(3, np.int8), TypeError),
        ("truncated", np.zeros(2, bool), ValueError),
    ]))
    before = snapshot(vector)
    with pytest.raises(error, match=name.split("_")[0]):
        vector.add(**{**good, name: value})
    assert_same_snapshot(before, snapshot(vector))


def test_stacked_obs_that_do_not_shift_by_one_frame_are_rejected(store: ReplayStore) -> None:
    before = snapshot(store)
    with pytest.raises(ValueError, match=r"next_obs\[:-1\] must equal obs\[1:\]"):
        store.add(np.stack([_frame(1), _frame(2)]), 0, 0.0, np.stack([_frame(9), _frame(3)]), False, False)
    assert_same_snapshot(before, snapshot(store))


# -- sampling and reading ----------------------------------------------------------------------------

BAD_SAMPLE = [
    (dict(batch_size=0), ValueError), (dict(batch_size=-3), ValueError), (dict(batch_size=2.0), TypeError),
    (dict(batch_size="8"), TypeError), (dict(batch_size=None), TypeError),
    (dict(batch_size=4, beta=-0.1), ValueError), (dict(batch_size=4, beta=math.nan), ValueError),
    (dict(batch_size=4, beta="0.4"), TypeError), (dict(batch_size=4, gamma=1.5), ValueError),
    (dict(batch_size=4, gamma=-0.5), ValueError), (dict(batch_size=4, gamma=math.nan), ValueError),
    (dict(batch_size=4, gamma=None), TypeError), (dict(batch_size=4, n_step=0), ValueError),
    (dict(batch_size=4, n_step=1.5), TypeError), (dict(batch_size=4, rng="seed"), TypeError),
    (dict(batch_size=4, rng=1.5), TypeError),
]


@fixture_settings
@given(case=st.sampled_from(BAD_SAMPLE))
def test_sample_and_batches_reject_bad_arguments(store: ReplayStore, case) -> None:
    kwargs, error = case
    before = snapshot(store)
    with pytest.raises(error):
        store.sample(**kwargs)
    batch_size = kwargs.pop("batch_size")
    with pytest.raises(error):
        store.batches(batch_size, **kwargs)
    assert_same_snapshot(before, snapshot(store))


@fixture_settings
@given(case=st.sampled_from([
    (dict(batch_size=0, length=2), ValueError), (dict(batch_size=2, length=0), ValueError),
    (dict(batch_size=2, length=2.5), TypeError), (dict(batch_size=2, length=2, beta=-1.0), ValueError),
    (dict(batch_size=2, length=2, rng=object()), TypeError), (dict(batch_size="2", length=2), TypeError),
]))
def test_sample_sequences_rejects_bad_arguments(store: ReplayStore, case) -> None:
    kwargs, error = case
    before = snapshot(store)
    with pytest.raises(error):
        store.sample_sequences(**kwargs)
    assert_same_snapshot(before, snapshot(store))


@fixture_settings
@given(steps=st.one_of(
    st.lists(st.integers(-(2**40), 9), min_size=1, max_size=5),
    st.lists(st.integers(30, 2**40), min_size=1, max_size=5),
))
def test_read_of_steps_that_are_not_stored_raises_indexerror(store: ReplayStore, steps) -> None:
    before = snapshot(store)
    with pytest.raises(IndexError, match="is not stored"):
        store.read(np.array(steps, np.int64))
    assert_same_snapshot(before, snapshot(store))


@pytest.mark.parametrize("steps", [np.array([10.0, 11.0]), np.array([[10, 11]]), "10", np.array(["a"])])
def test_read_of_steps_that_are_not_a_1d_int_array_raises_typeerror(store: ReplayStore, steps) -> None:
    with pytest.raises(TypeError, match="steps must be a 1-D array of ints"):
        store.read(steps)


def test_sampling_an_empty_store_raises_valueerror(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "empty.mmr", frame_shape=SHAPE, capacity=4) as empty:
        with pytest.raises(ValueError, match="empty store"):
            empty.sample(2)
        with pytest.raises(ValueError, match="empty store"):
            empty.sample_sequences(2, 2)


# -- priorities --------------------------------------------------------------------------------------

BAD_PRIORITIES = [
    (np.array([12, 13]), np.array([1.0, math.nan]), ValueError),
    (np.array([12, 13]), np.array([1.0, -0.5]), ValueError),
    (np.array([12, 13]), np.array([math.inf, 1.0]), ValueError),
    (np.array([12, 13]), np.array([1.0]), ValueError),
    (np.array([12, 13]), np.array(["a", "b"]), TypeError),
    (np.array([12.0, 13.0]), np.array([1.0, 1.0]), TypeError),
    (np.array([[12, 13]]), np.array([[1.0, 1.0]]), TypeError),
    (np.array([12, 30]), np.array([1.0, 1.0]), ValueError),  # never added
    (np.array([-1]), np.array([1.0]), ValueError),
]


@fixture_settings
@given(case=st.sampled_from(BAD_PRIORITIES))
def test_update_priorities_rejects_bad_steps_and_priorities(store: ReplayStore, case) -> None:
    steps, priorities, error = case
    before = snapshot(store)
    weights = store.sample(64, rng=0).weight.copy()
    with pytest.raises(error):
        store.update_priorities(steps, priorities)
    assert_same_snapshot(before, snapshot(store))
    assert np.array_equal(store.sample(64, rng=0).weight, weights), "a rejected update changed priorities"


def test_update_priorities_on_a_uniform_store_raises_typeerror(vector: ReplayStore) -> None:
    with pytest.raises(TypeError, match="PrioritizedSampler"):
        vector.update_priorities(np.array([25]), np.array([1.0]))


# -- closed stores and modes -------------------------------------------------------------------------

CALLS = {
    "add": lambda s: s.add(**GOOD),
    "sample": lambda s: s.sample(2),
    "sample_sequences": lambda s: s.sample_sequences(2, 2),
    "read": lambda s: s.read(np.array([15])),
    "update_priorities": lambda s: s.update_priorities(np.array([15]), np.array([1.0])),
    "batches": lambda s: s.batches(2),
    "flush": lambda s: s.flush(),
    "refresh": lambda s: s.refresh(),
    "episodes": lambda s: s.episodes(),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_call_on_a_closed_store_raises_closedstoreerror(store: ReplayStore, name: str) -> None:
    path = store.path
    before = snapshot(store)
    store.close()
    with pytest.raises(ClosedStoreError, match="closed") as caught:
        CALLS[name](store)
    assert isinstance(caught.value, ValueError)
    store.close()  # closing twice is allowed
    assert repr(store).startswith("<Closed ReplayStore")
    with ReplayStore.open(path, "r") as again:
        assert_same_snapshot(before, snapshot(again))


@pytest.mark.parametrize("name", ["add", "update_priorities"])
def test_writes_on_a_read_only_store_raise_unsupported_operation(store: ReplayStore, name: str) -> None:
    path = store.path
    store.close()
    with ReplayStore.open(path, "r") as reader:
        before = snapshot(reader)
        with pytest.raises(io.UnsupportedOperation, match="read-only") as caught:
            CALLS[name](reader)
        assert isinstance(caught.value, ReadOnlyStoreError)
        reader.flush()  # documented: nothing to commit
        assert reader.refresh() is False
        assert_same_snapshot(before, snapshot(reader))


@given(mode=st.one_of(st.sampled_from(["w", "a", "rb", "R", "r+b", "", "x"]), st.integers(), st.none()))
def test_open_with_a_mode_that_is_not_r_or_r_plus_raises_valueerror(mode) -> None:
    with pytest.raises(ValueError, match="mode must be 'r'"):
        ReplayStore.open("/nonexistent/store.mmr", mode)


# -- create --------------------------------------------------------------------------------------------

BAD_CREATE = [
    (dict(frame_shape=(0, 4)), ValueError), (dict(frame_shape=(-1,)), ValueError), (dict(frame_shape=()), ValueError),
    (dict(frame_shape="84x84"), TypeError), (dict(frame_shape=(84.0, 84)), TypeError),
    (dict(capacity=0), ValueError), (dict(capacity=-5), ValueError), (dict(capacity=10.5), TypeError),
    (dict(capacity="10"), TypeError), (dict(stack_size=0), ValueError), (dict(stack_size=None), TypeError),
    (dict(num_envs=0), ValueError), (dict(num_envs=20), ValueError),  # capacity < num_envs
    (dict(action_shape=(0,)), ValueError), (dict(action_shape="x"), TypeError),
    (dict(action_dtype=object), TypeError), (dict(action_dtype="U3"), TypeError), (dict(action_dtype="nope"), TypeError),
]


@fixture_settings
@given(case=st.sampled_from(BAD_CREATE))
def test_create_rejects_bad_layouts_and_writes_nothing(tmp_path: Path, case) -> None:
    kwargs, error = case
    path = tmp_path / "bad.mmr"
    with pytest.raises(error):
        ReplayStore.create(path, **{"frame_shape": SHAPE, "capacity": 10, **kwargs})
    assert not path.exists()


def test_create_on_an_existing_path_raises_fileexistserror(store: ReplayStore, tmp_path: Path) -> None:
    before = snapshot(store)
    with pytest.raises(FileExistsError) as caught:
        ReplayStore.create(store.path, frame_shape=SHAPE, capacity=10)
    assert isinstance(caught.value, StoreExistsError)
    (tmp_path / "a_file").write_text("not a store")
    with pytest.raises(StoreExistsError):
        ReplayStore.create(tmp_path / "a_file", frame_shape=SHAPE, capacity=10)
    assert (tmp_path / "a_file").read_text() == "not a store"
    assert_same_snapshot(before, snapshot(store))


# -- foreign files -------------------------------------------------------------------------------------


@settings(max_examples=30)
@given(names=st.lists(st.sampled_from(["data.bin", "transitions.tbl", "frames", "header.jsn", "x"]), max_size=4,
                      unique=True), content=st.binary(max_size=64))
def test_open_of_a_directory_of_other_files_raises_filenotfounderror(tmp_path_factory, names, content) -> None:
    directory = tmp_path_factory.mktemp("foreign")
    for name in names:
        (directory / name).write_bytes(content)
    for mode in ("r", "r+"):
        with pytest.raises(FileNotFoundError, match="no mmreplay store") as caught:
            ReplayStore.open(directory, mode)
        assert isinstance(caught.value, StoreNotFoundError)
    assert sorted(p.name for p in directory.iterdir()) == sorted(names)


@settings(max_examples=60)
@given(content=st.one_of(
    st.binary(max_size=200),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                 max_leaves=8).map(lambda doc: json.dumps(doc).encode()),
))
def test_a_header_that_is_not_ours_raises_corruptstoreerror(tmp_path_factory, content: bytes) -> None:
    directory = tmp_path_factory.mktemp("foreign")
    (directory / "header.json").write_bytes(content)
    for mode in ("r", "r+"):
        with pytest.raises(CorruptStoreError, match="header.json") as caught:
            ReplayStore.open(directory, mode)
        assert isinstance(caught.value, ValueError)
    assert (directory / "header.json").read_bytes() == content


def test_a_header_of_another_format_version_names_both_versions(store: ReplayStore) -> None:
    path = store.path
    store.close()
    header = json.loads((path / "header.json").read_text())
    header["format_version"] = 2  # the format before: rows with a u8 next_frame, entries with a u4 length
    (path / "header.json").write_text(json.dumps(header))
    with pytest.raises(FormatVersionError, match="format version 2; this mmreplay reads format versions 3 and 4"):
        ReplayStore.open(path)


@settings(max_examples=30)
@given(cut=st.integers(0, 10_000))
def test_a_truncated_header_raises_corruptstoreerror(tmp_path_factory, cut: int) -> None:
    directory = tmp_path_factory.mktemp("cut")
    path = directory / "s.mmr"
    ReplayStore.create(path, frame_shape=SHAPE, capacity=4).close()
    raw = (path / "header.json").read_bytes()
    (path / "header.json").write_bytes(raw[: cut % len(raw)])
    with pytest.raises(CorruptStoreError, match="header.json"):
        ReplayStore.open(path, "r+")


def test_open_of_a_missing_path_raises_filenotfounderror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ReplayStore.open(tmp_path / "nowhere.mmr")
    with pytest.raises(FileNotFoundError):
        ReplayStore.open(tmp_path / "nowhere.mmr", "r+")
    assert not (tmp_path / "nowhere.mmr").exists()
