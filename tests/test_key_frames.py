"""A reference store's reader keeps its key frames decoded across batches (``_c/key_frames.h``).

The cache must be invisible but for speed: every batch equals the reference model's, a slot serves only
the block it was decoded from, a key frame damaged after it was kept still fails its checksum, and
threads sampling at once each get their own frames. (Every other test of a reference store samples
through it as well.)
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


def test_a_key_frame_damaged_after_it_was_kept_still_fails_its_checksum(tmp_path: Path) -> None:
    path, ref = dense_pong_store(tmp_path)  # frames 8 to 15 form a group: 8 alone, 9-15 against 8
    with ReplayStore.open(path, "r") as store:
        for _ in range(2):  # the first may take the general path, which maps the segment
            assert_batch_matches(store.read([10, 12]), ref, [10, 12])
        assert counts(store)[1] > 0  # frame 8 kept
        flip_frame_byte(path, 8)
        with pytest.raises(FrameChecksumError, match=r"frame 8 \(a frame that a requested frame is compressed"):
            store.read([10])


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


@pytest.mark.parametrize(("frame_nbytes", "slots"), [(64, 3), (64, 1), (0, 4), (64, 2**31)])
def test_key_frames_refuses_sizes_it_cannot_hold(frame_nbytes: int, slots: int) -> None:
    with pytest.raises(ValueError, match=r"expected 1 to \d+ bytes and a power of two from 2 to 2\*\*30 slots"):
        _lz4batch.key_frames(frame_nbytes, slots)


def test_threads_sampling_at_once_each_read_their_own_frames(tmp_path: Path) -> None:
    """Four threads sample one store at once (their decodes run together, without the GIL), reading and
    filling the same slots; every batch equals the model's."""
    store, ref = make(tmp_path, capacity=3000)
    for args in transitions("breakout")[:2500]:
        store.add(*args)
        ref.add(*args)
    store.flush()
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
