"""A reference store's reader keeps its key frames, and its groups' first level, decoded across batches
(``_c/key_frames.h``), where a batch's chains then stop.

The slots must be invisible but for speed: every batch equals the reference model's, a slot serves only
the block it was decoded from, a kept frame whose own block is damaged fails its checksum, and threads
sampling at once each get their own frames. (Every other test of a reference store samples through them
as well.)
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from extension_status import absent_reason
from reference import assert_batch_matches
from test_dense_store import dense_pong_store, flip_frame_byte, make, transitions

from mmreplay import ReplayStore
from mmreplay.frames.ring import FrameChecksumError, _lz4batch

pytestmark = pytest.mark.skipif(_lz4batch is None, reason=absent_reason("_lz4batch"))


def counts(store: ReplayStore) -> tuple[int, int]:
    """(hits, stores) of the store's reader's key frames."""
    keys = store._files.frames.compiled_references()[2]
    assert keys is not None
    hits, stores = _lz4batch.key_frames_counts(keys)
    return hits, stores


def test_a_batch_read_again_takes_its_key_frames_from_the_cache_and_equals_the_model(tmp_path: Path) -> None:
    store, ref = make(tmp_path, capacity=3000)
    for args in transitions("pong")[:2500]:
        store.add(*args)
        ref.add(*args)
    steps = np.random.default_rng(0).integers(0, len(ref), 64)
    batches = [store.read(steps)]  # may take the general path, which maps the segments
    batches.append(store.read(steps))
    hits, stores = counts(store)
    assert stores > 0  # the keys of the batch's groups (~10 groups of 256 frames)
    batches.append(store.read(steps))
    assert counts(store)[0] > hits
    for batch in batches:
        assert_batch_matches(batch, ref, steps)
    for _ in range(20):
        assert_batch_matches(store.sample(32, rng=np.random.default_rng(_)), ref)
    store.close()


def test_a_kept_frame_is_used_only_while_its_own_block_is_intact(tmp_path: Path) -> None:
    """Frames 8 (a key) to 15 form a group, 9 to 15 against 8, all of the tree's first level (a group of 8:
    kept from a delta of 1). Reading transitions 10 and 12 (frames 10 to 13) keeps 8 and 10 to 13. A kept
    frame's own block is still checked at every read: damaged, it fails; a damaged key fails the frames
    that need it and were never kept; frames kept before the damage, their own blocks intact, still read
    back exactly (decoded, and checked, before it)."""
    path, ref = dense_pong_store(tmp_path)
    with ReplayStore.open(path, "r") as store:
        for _ in range(2):  # the first may take the general path, which maps the segment
            assert_batch_matches(store.read([10, 12]), ref, [10, 12])
        assert counts(store)[1] >= 5
        flip_frame_byte(path, 12)
        with pytest.raises(FrameChecksumError, match=r"frame 12 fails its checksum"):
            store.read([12])
        flip_frame_byte(path, 8)
        with pytest.raises(FrameChecksumError, match=r"frame 8 \(a frame that a requested frame is compressed"):
            store.read([14])  # frames 14 and 15, never read
        hits = counts(store)[0]
        assert_batch_matches(store.read([10]), ref, [10])
        assert counts(store)[0] == hits + 2  # frames 10 and 11, from their slots


def test_a_slot_serves_only_the_block_it_was_decoded_from() -> None:
    """Two slots for 100 keys: each read gives its own frame or nothing (a miss), never another step's,
    nor one decoded from a block of another checksum or seed."""
    keys = _lz4batch.key_frames(64, 2)
    frames = {step: np.full(64, step % 251, np.uint8) for step in range(100)}
    for step, frame in frames.items():
        _lz4batch.key_frames_put(keys, step, 1000 + step, 7, frame)
    out = np.zeros(64, np.uint8)
    found = 0
    for step, frame in frames.items():
        if _lz4batch.key_frames_get(keys, step, 1000 + step, 7, out):
            np.testing.assert_array_equal(out, frame)
            found += 1
        assert not _lz4batch.key_frames_get(keys, step, 1000 + step + 1, 7, out)  # another checksum
        assert not _lz4batch.key_frames_get(keys, step, 1000 + step, 8, out)  # another seed
    assert 1 <= found <= 2
    assert _lz4batch.key_frames_counts(keys) == (found, 100)


def shares_a_slot_with_5(step: int) -> bool:
    """Whether ``step`` and step 5 share one of 2 slots (with no horizon, a later frame takes the slot)."""
    keys, out = _lz4batch.key_frames(16, 2), np.zeros(16, np.uint8)
    _lz4batch.key_frames_put(keys, 5, 1, 1, out)
    _lz4batch.key_frames_put(keys, step, 1, 1, out)
    return not _lz4batch.key_frames_get(keys, 5, 1, 1, out)


def test_a_frame_the_ring_may_still_hold_keeps_its_slot() -> None:
    """A slot's frame is replaced only by its own step's (from another block) or by a frame ``horizon``
    (the ring's frame slots) or more steps newer: a plan that stopped a chain at a frame finds it when it
    copies it, and frames sharing a slot do not evict each other in turn."""
    near = next(step for step in range(6, 100) if shares_a_slot_with_5(step))
    far = next(step for step in range(1005, 1100) if shares_a_slot_with_5(step))
    keys, out = _lz4batch.key_frames(16, 2, 0, 1000), np.zeros(16, np.uint8)
    _lz4batch.key_frames_put(keys, 5, 1, 1, np.full(16, 5, np.uint8))
    _lz4batch.key_frames_put(keys, near, 1, 1, np.full(16, 6, np.uint8))  # less than 1,000 steps newer
    assert not _lz4batch.key_frames_get(keys, near, 1, 1, out)
    assert _lz4batch.key_frames_get(keys, 5, 1, 1, out) and (out == 5).all()
    _lz4batch.key_frames_put(keys, 5, 2, 1, np.full(16, 7, np.uint8))  # its own step, another block
    assert _lz4batch.key_frames_get(keys, 5, 2, 1, out) and (out == 7).all()
    _lz4batch.key_frames_put(keys, far, 1, 1, np.full(16, 8, np.uint8))  # 1,000 or more newer: 5 is gone
    assert _lz4batch.key_frames_get(keys, far, 1, 1, out) and (out == 8).all()
    assert not _lz4batch.key_frames_get(keys, 5, 2, 1, out)


def test_a_slot_that_holds_a_frame_is_not_written_again_with_it() -> None:
    """Two parts of a split batch may both decode a frame, and keep it, while a third copies it out of its
    slot: the slot is written once, so that the copy never meets a write (which would fail its batch).
    Here the second put of the same step, checksum and seed brings other bytes: they are not written."""
    keys, out = _lz4batch.key_frames(16, 4), np.zeros(16, np.uint8)
    _lz4batch.key_frames_put(keys, 5, 1, 1, np.full(16, 5, np.uint8))
    _lz4batch.key_frames_put(keys, 5, 1, 1, np.full(16, 9, np.uint8))
    assert _lz4batch.key_frames_get(keys, 5, 1, 1, out) and (out == 5).all()
    assert _lz4batch.key_frames_counts(keys) == (1, 1)


@pytest.mark.parametrize(("frame_nbytes", "slots", "min_delta", "horizon"),
                         [(64, 3, 0, 0), (64, 1, 0, 0), (0, 4, 0, 0), (64, 2**31, 0, 0), (64, 4, -1, 0), (64, 4, 0, -1)])
def test_key_frames_refuses_sizes_it_cannot_hold(frame_nbytes: int, slots: int, min_delta: int, horizon: int) -> None:
    with pytest.raises(ValueError, match=r"expected 1 to \d+ bytes, a power of two from 2 to 2\*\*30 slots, "
                       r"min_delta >= 0 and horizon >= 0"):
        _lz4batch.key_frames(frame_nbytes, slots, min_delta, horizon)


@pytest.mark.parametrize("slots", [None, 2])
def test_threads_sampling_at_once_each_read_their_own_frames(tmp_path: Path, slots: int | None) -> None:
    """Four threads sample one store at once (their decodes run together, without the GIL), reading and
    filling the same slots; every batch equals the model's. With 2 slots for the whole store, a frame a
    plan takes from a slot is often replaced before it is copied: its batch then takes the general path."""
    store, ref = make(tmp_path, capacity=3000)
    for args in transitions("breakout")[:2500]:
        store.add(*args)
        ref.add(*args)
    store.flush()
    if slots is not None:
        ring = store._files.frames
        depth, row_nbytes, _ = ring.compiled_references()
        ring._compiled_references = (depth, row_nbytes, _lz4batch.key_frames(ring.frame_nbytes, slots, 1))
    failures: list[BaseException] = []

    def sample(seed: int) -> None:
        try:
            rng = np.random.default_rng(seed)
            for _ in range(40):
                assert_batch_matches(store.sample(32, rng=rng), ref)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=sample, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert not failures, failures[0]
    assert counts(store)[0] > 0
    store.close()
