"""A reference store's batch read on several threads is split into parts, each planned, located and
decoded by one thread in its own memory (``_c/reference_table.c``, ``split_decode``); a part whose chain
reaches a segment its caller did not map first hands the batch back, decoded again unsplit.

Both paths must be invisible but for speed: every batch equals the reference model's whatever the
threads, the batch size and the segments its chains cross, and a damaged frame is named as it is unsplit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from extension_status import absent_reason
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import ReferenceStore, assert_batch_matches
from test_dense_store import DENSE, flip_frame_byte, transitions

from mmreplay import ReplayStore
from mmreplay.frames import threads as frame_threads
from mmreplay.frames.ring import FrameChecksumError, _lz4batch

pytestmark = pytest.mark.skipif(_lz4batch is None, reason=absent_reason("_lz4batch"))


def split_counts() -> tuple[int, int]:
    """(batches split, of those decoded again unsplit) since the extension loaded."""
    split, unsplit = _lz4batch.reference_split_counts()
    return int(split), int(unsplit)


@pytest.fixture
def four_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads may take four threads, however many cores the machine has (the pool runs them anyway)."""
    monkeypatch.setattr(frame_threads, "usable_cores", lambda: 4)


def noise_store(path: Path, count: int) -> tuple[ReplayStore, ReferenceStore]:
    """A store of ``count`` transitions of incompressible 84x168 frames (~14 KB stored each, 74 to a 1 MiB
    segment): a chain that stops at its group's first level (places 32, 64 and 128 of 256, kept decoded)
    reaches up to 127 frames back, so some reach two segments back."""
    config = dict(frame_shape=(84, 168), capacity=2000, stack_size=4)
    store = ReplayStore.create(path, **config, frame_encoding=DENSE)
    ref = ReferenceStore(**config)
    frames = np.random.default_rng(5).integers(0, 256, (count + 1, 84, 168), dtype=np.uint8)
    for t in range(count):
        args = (frames[t], t % 4, float(t % 3), frames[t + 1], t % 700 == 699, False)
        store.add(*args)
        ref.add(*args)
    store.flush()
    return store, ref


def test_a_batch_whose_chains_cross_segments_is_split_or_handed_back_and_equals_the_model(
    tmp_path: Path, four_cores: None
) -> None:
    store, ref = noise_store(tmp_path / "noise.mmr", 1800)
    assert store._reader.thread_limit == 4
    assert len(list((tmp_path / "noise.mmr" / "frames").glob("*.seg"))) >= 20
    store.sample(32, rng=np.random.default_rng(99))  # a first read maps the segments (the general path)
    split, unsplit = split_counts()
    for seed in range(40):
        assert_batch_matches(store.sample(32, rng=np.random.default_rng(seed)), ref)
    now_split, now_unsplit = split_counts()
    # a batch of 32 stacks (160 frames) is split, but for one whose segment no read mapped yet: the general
    # path maps it
    assert now_split - split >= 35
    assert now_unsplit > unsplit  # and some reach further back than the segment before their frames'
    assert now_split - split > now_unsplit - unsplit  # while most do not
    store.close()


def test_a_batch_of_real_frames_in_few_segments_is_split_and_never_handed_back(
    tmp_path: Path, four_cores: None
) -> None:
    config = dict(frame_shape=(84, 84), capacity=3000, stack_size=4)
    store = ReplayStore.create(tmp_path / "pong.mmr", **config, frame_encoding=DENSE)
    ref = ReferenceStore(**config)
    for args in transitions("pong")[:2500]:
        store.add(*args)
        ref.add(*args)
    store.sample(32, rng=np.random.default_rng(99))  # a first read maps the segments (the general path)
    split, unsplit = split_counts()
    for seed in range(20):
        assert_batch_matches(store.sample(32, rng=np.random.default_rng(seed)), ref)
    assert split_counts()[0] - split >= 20 and split_counts()[1] == unsplit
    store.close()


def test_a_batch_below_the_split_or_on_one_thread_is_not_split(tmp_path: Path, four_cores: None) -> None:
    store, ref = noise_store(tmp_path / "noise.mmr", 600)
    before = split_counts()
    assert_batch_matches(store.sample(8, rng=np.random.default_rng(0)), ref)  # 40 frames: below 64
    assert split_counts() == before
    store.close()
    with ReplayStore.open(tmp_path / "noise.mmr", "r", decode_threads=1) as one:
        assert_batch_matches(one.sample(64, rng=np.random.default_rng(1)), ref)
    assert split_counts() == before


def test_a_damaged_frame_read_by_a_split_batch_is_named_as_unsplit(tmp_path: Path, four_cores: None) -> None:
    config = dict(frame_shape=(84, 84), capacity=3000, stack_size=4)
    store = ReplayStore.create(tmp_path / "pong.mmr", **config, frame_encoding=DENSE)
    for args in transitions("pong")[:2500]:
        store.add(*args)
    store.close()
    flip_frame_byte(tmp_path / "pong.mmr", 1203)
    with ReplayStore.open(tmp_path / "pong.mmr", "r") as damaged:
        damaged.read(np.arange(0, 40))  # a first read maps the segments (the general path)
        split = split_counts()[0]
        with pytest.raises(FrameChecksumError, match=r"frame 1203\b"):
            damaged.read(np.arange(1150, 1220))  # ~74 frames, 1203 among them
        assert split_counts()[0] > split


@pytest.fixture(scope="module")
def pong_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ReplayStore, ReferenceStore]]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(frame_threads, "usable_cores", lambda: 8)
        config = dict(frame_shape=(84, 84), capacity=1500, stack_size=4)
        store = ReplayStore.create(tmp_path_factory.mktemp("split") / "pong.mmr", **config, frame_encoding=DENSE)
        ref = ReferenceStore(**config)
        for args in transitions("pong")[:2200]:  # evicts: chains start past the ring's oldest frames too
            store.add(*args)
            ref.add(*args)
        yield store, ref
        store.close()


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 300), seed=st.integers(0, 2**31), length=st.sampled_from([None, 3]))
def test_any_batch_on_up_to_eight_threads_equals_the_model(
    pong_store: tuple[ReplayStore, ReferenceStore], batch: int, seed: int, length: int | None
) -> None:
    store, ref = pong_store
    rng = np.random.default_rng(seed)
    if length is None:
        assert_batch_matches(store.sample(batch, rng=rng), ref)
    else:
        windows = store.sample_sequences(max(1, batch // 8), length, rng=rng)
        for k in range(length):
            steps = np.asarray(windows.index)[:, k]
            valid = np.asarray(windows.mask)[:, k]
            expected = ref.expected(steps[valid])
            assert np.array_equal(np.asarray(windows.obs)[valid, k], expected["obs"])
            assert np.array_equal(np.asarray(windows.next_obs)[valid, k], expected["next_obs"])
