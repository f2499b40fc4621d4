"""``sample(out=...)``, ``sample_sequences(out=...)`` and ``batches(reuse=True)``: a batch an earlier call
returned is refilled in place, with exactly what a fresh call with an equal generator returns; anything
else given as ``out`` is refused with an error naming it, before a frame is decoded into it."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
from strategies import numbered_frame

from mmreplay import Batch, PrioritizedSampler, SequenceBatch

FRAME = (3, 4)


def fill(store, count: int) -> None:
    for i in range(count):
        ended = (i + 1) % 7 == 0
        store.add(numbered_frame(FRAME, i), i % 5, float(i), numbered_frame(FRAME, i + 1), ended, i % 11 == 10)


def addresses(batch) -> dict[str, int]:
    return {item.name: getattr(batch, item.name).__array_interface__["data"][0] for item in fields(batch)}


def assert_equal(a, b) -> None:
    assert type(a) is type(b)
    for item in fields(a):
        np.testing.assert_array_equal(getattr(a, item.name), getattr(b, item.name), err_msg=item.name)


@pytest.mark.parametrize(
    "kwargs", [dict(), dict(n_step=3, gamma=0.9), dict(beta=0.7)], ids=["plain", "n_step", "beta"]
)
@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_a_batch_refilled_in_place_equals_a_fresh_one(make_store, kwargs, prioritized) -> None:
    sampler = PrioritizedSampler() if prioritized else None
    store = make_store(frame_shape=FRAME, capacity=40, stack_size=3, sampler=sampler)
    fill(store, 60)
    if prioritized:
        store.update_priorities(np.arange(20, 60), np.linspace(0.1, 5, 40))
    fresh_rng, reused_rng = np.random.default_rng(5), np.random.default_rng(5)
    out = store.sample(16, reused_rng, **kwargs)
    store.sample(16, fresh_rng, **kwargs)
    where = addresses(out)
    for _ in range(10):
        expected = store.sample(16, fresh_rng, **kwargs)
        assert store.sample(16, reused_rng, out=out, **kwargs) is out
        assert_equal(out, expected)
        assert addresses(out) == where  # the same memory, refilled


def test_a_sequence_batch_refilled_in_place_equals_a_fresh_one(make_store) -> None:
    store = make_store(frame_shape=FRAME, capacity=50, stack_size=2)
    fill(store, 70)
    fresh_rng, reused_rng = np.random.default_rng(9), np.random.default_rng(9)
    out = store.sample_sequences(6, 5, reused_rng)
    store.sample_sequences(6, 5, fresh_rng)
    where = addresses(out)
    for _ in range(10):
        expected = store.sample_sequences(6, 5, fresh_rng)
        assert not expected.mask.all()  # windows cut by episode ends: their zeroed tails are refilled too
        assert store.sample_sequences(6, 5, reused_rng, out=out) is out
        assert_equal(out, expected)
        assert addresses(out) == where


def test_an_out_batch_of_other_sizes_or_of_another_kind_is_refused_untouched(make_store) -> None:
    store = make_store(frame_shape=FRAME, capacity=30, stack_size=3)
    fill(store, 30)
    out = store.sample(8, 1)
    before = {item.name: getattr(out, item.name).copy() for item in fields(out)}
    with pytest.raises(ValueError, match=r"out must be a Batch that this store returned"):
        store.sample(9, 2, out=out)  # another batch size
    with pytest.raises(ValueError, match=r"out must be a Batch that this store returned"):
        store.sample(8, 2, n_step=2, out=out)  # n-step batches hold 2 x stack_size frames
    with pytest.raises(TypeError, match=r"out must be a Batch .*; got SequenceBatch"):
        store.sample(8, 2, out=store.sample_sequences(8, 2, 0))
    with pytest.raises(TypeError, match=r"out must be a SequenceBatch .*; got Batch"):
        store.sample_sequences(8, 2, 0, out=out)
    separate = Batch(**{item.name: getattr(out, item.name).copy() for item in fields(out)})
    with pytest.raises(ValueError, match=r"obs and next_obs viewing one writeable uint8 array"):
        store.sample(8, 2, out=separate)  # obs and next_obs of their own: next_obs would not follow obs
    for name, value in before.items():
        np.testing.assert_array_equal(getattr(out, name), value, err_msg=name)


def test_a_sequence_batch_of_another_length_is_refused(make_store) -> None:
    store = make_store(frame_shape=FRAME, capacity=30, stack_size=2)
    fill(store, 30)
    out = store.sample_sequences(4, 3, 0)
    with pytest.raises(ValueError, match=r"out must be a SequenceBatch that this store returned"):
        store.sample_sequences(4, 4, 0, out=out)
    assert isinstance(store.sample_sequences(4, 3, 1, out=out), SequenceBatch)


@pytest.mark.parametrize("prefetch", [1, 3])
def test_reused_batches_equal_successive_samples_and_come_round_every_prefetch_plus_two(make_store, prefetch) -> None:
    store = make_store(frame_shape=FRAME, capacity=40, stack_size=3)
    fill(store, 60)
    expected_rng = np.random.default_rng(3)
    seen: list[Batch] = []
    with store.batches(8, prefetch=prefetch, rng=np.random.default_rng(3), reuse=True, n_step=2) as batches:
        for _ in range(4 * (prefetch + 2)):
            batch = next(batches)
            assert_equal(batch, store.sample(8, expected_rng, n_step=2))  # before the next next() reuses it
            seen.append(batch)
    assert len({id(batch) for batch in seen}) == prefetch + 2
    assert all(seen[k] is seen[k % (prefetch + 2)] for k in range(len(seen)))


def test_batches_take_no_out(make_store) -> None:
    store = make_store(frame_shape=FRAME, capacity=20)
    fill(store, 10)
    with pytest.raises(TypeError, match=r"reuse=True"):
        store.batches(4, out=store.sample(4, 0))
