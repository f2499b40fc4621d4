"""``store.batches``: background prefetch yields exactly what successive ``sample`` calls with an equal
generator yield, in order; re-raises errors of its thread; stops on ``close``, garbage collection and
closing the store; and is safe while the caller keeps adding."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest
from reference_windows import FailingSampler
from reference import BATCH_FIELDS, ReferenceStore, assert_batch_matches
from strategies import numbered_frame

from mmreplay import PrioritizedSampler, ReplayStore

FRAME = (3, 4)


def fill(store, count, *, first=0, ref=None):
    for i in range(first, first + count):
        args = (numbered_frame(FRAME, i), i % 5, float(i), numbered_frame(FRAME, i + 1), (i + 1) % 6 == 0, False)
        store.add(*args)
        if ref is not None:
            ref.add(*args)


def assert_same(a, b, fields=(*BATCH_FIELDS, "weight", "discount")):
    for name in fields:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=f"batch.{name}")


def new_threads(before):
    return [t for t in threading.enumerate() if t not in before]


def wait_until_stopped(threads, seconds=10.0):
    """Poll (not a timing assertion: a generous bound) until the threads have ended."""
    deadline = time.monotonic() + seconds
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    return [t for t in threads if t.is_alive()]


@pytest.mark.parametrize(
    "kwargs",
    [dict(), dict(n_step=3, gamma=0.9), dict(beta=0.7)],
    ids=["plain", "n_step", "beta"],
)
@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_batches_yield_exactly_what_successive_samples_with_an_equal_generator_yield(make_store, kwargs, prioritized):
    sampler = PrioritizedSampler() if prioritized else None
    store = make_store(frame_shape=FRAME, capacity=40, stack_size=3, sampler=sampler)
    fill(store, 50)
    if prioritized:
        store.update_priorities(np.arange(10, 50), np.linspace(0.1, 5, 40))
    expected_rng = np.random.default_rng(123)
    expected = [store.sample(16, expected_rng, **kwargs) for _ in range(12)]
    with store.batches(16, prefetch=3, rng=np.random.default_rng(123), **kwargs) as batches:
        got = [next(batches) for _ in range(12)]
    for a, b in zip(got, expected):
        assert_same(a, b)


def test_batches_with_an_int_seed_equal_samples_from_a_generator_with_that_seed(make_store):
    store = make_store(frame_shape=FRAME, capacity=20)
    fill(store, 20)
    rng = np.random.default_rng(7)
    with store.batches(8, rng=7) as batches:
        for _, batch in zip(range(5), batches):
            assert_same(batch, store.sample(8, rng))


def test_an_error_in_the_thread_is_raised_in_the_caller_after_the_batches_before_it(make_store):
    store = make_store(frame_shape=FRAME, capacity=20, sampler=FailingSampler(fail_at=4))
    fill(store, 10)
    before = threading.enumerate()
    batches = store.batches(4, prefetch=2, rng=0)  # draw 1 validates the arguments in the caller
    threads = new_threads(before)
    assert len(threads) == 1
    assert len(next(batches)) == 4 and len(next(batches)) == 4
    with pytest.raises(RuntimeError, match=r"^injected failure in draw 4$"):
        next(batches)
    assert wait_until_stopped(threads) == []
    with pytest.raises(StopIteration):
        next(batches)


def test_invalid_sample_arguments_fail_in_the_caller_and_start_no_thread(make_store):
    store = make_store(frame_shape=FRAME, capacity=20)
    fill(store, 5)
    before = threading.enumerate()
    with pytest.raises(ValueError, match=r"n_step"):
        store.batches(4, n_step=0)
    with pytest.raises(ValueError, match=r"prefetch"):
        store.batches(4, prefetch=0)
    with pytest.raises(TypeError):
        store.batches(4, bogus=1)
    assert new_threads(before) == []


def test_close_stops_the_thread(make_store):
    store = make_store(frame_shape=FRAME, capacity=20)
    fill(store, 10)
    before = threading.enumerate()
    batches = store.batches(4, prefetch=2, rng=0)
    next(batches)
    threads = new_threads(before)
    assert [t.name for t in threads] == ["mmreplay-prefetch"]
    batches.close()
    assert wait_until_stopped(threads) == []
    assert new_threads(before) == []
    with pytest.raises(StopIteration):
        next(batches)


def test_garbage_collection_of_an_abandoned_iterator_stops_the_thread(make_store):
    store = make_store(frame_shape=FRAME, capacity=20)
    fill(store, 10)
    before = threading.enumerate()
    batches = store.batches(4, prefetch=2, rng=0)
    next(batches)
    threads = new_threads(before)
    assert len(threads) == 1
    del batches
    gc.collect()
    assert wait_until_stopped(threads) == []


def test_closing_the_store_stops_its_prefetchers(make_store):
    store = make_store(frame_shape=FRAME, capacity=20)
    fill(store, 10)
    before = threading.enumerate()
    first, second = store.batches(4, rng=0), store.batches(2, rng=1)
    next(first)
    threads = new_threads(before)
    assert len(threads) == 2
    store.close()
    assert all(not t.is_alive() for t in threads)
    with pytest.raises(StopIteration):
        next(second)


def test_adding_while_a_prefetcher_runs_gives_only_transitions_that_were_stored(make_store):
    store = make_store(frame_shape=FRAME, capacity=24, stack_size=2)
    ref = ReferenceStore(frame_shape=FRAME, capacity=24, stack_size=2)
    history = []  # every transition ever added: a batch may predate the adds since
    fill(store, 24, ref=ref)
    history += [ref.transition(s) for s in ref.stored_steps().tolist()]
    seen = 0
    with store.batches(8, prefetch=2, rng=0) as batches:
        for round in range(60):
            fill(store, 3, first=24 + 3 * round, ref=ref)
            history += [ref.transition(s) for s in range(ref.transitions_added - 3, ref.transitions_added)]
            batch = next(batches)
            oldest = batch.index.min()
            # sampled at most (prefetch + 1) rounds of 3 adds ago, from the 24 stored then
            assert oldest >= len(history) - 24 - 3 * 3, "a batch older than the prefetch depth"
            for i, step in enumerate(batch.index.tolist()):
                want = history[step]
                np.testing.assert_array_equal(batch.obs[i], want.obs)
                np.testing.assert_array_equal(batch.next_obs[i], want.next_obs)
                assert batch.reward[i] == want.reward and batch.action[i] == want.action
            seen += len(batch)
    assert seen == 480
    assert_batch_matches(store.sample(100, rng=1), ref)


def test_prefetching_from_a_reader_follows_the_writer(make_store):
    store = make_store(frame_shape=FRAME, capacity=16)
    fill(store, 8)
    store.flush()
    with ReplayStore.open(store.path, "r") as reader, reader.batches(4, rng=0) as batches:
        next(batches)
        fill(store, 8, first=8)
        store.flush()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # batches prepared before the flush drain first
            if next(batches).index.max() >= 8:
                break
        else:
            pytest.fail("the prefetching reader never sampled the writer's new transitions")


# -- the hand-over: refilled once every ready result is taken ----------------------------------------------


def test_the_handoff_makes_room_below_its_depth_and_then_only_once_every_result_is_taken():
    from mmreplay.store.feeds.prefetch import Handoff

    handoff = Handoff(3)
    for item in range(3):
        assert handoff.wait_for_room(0.0)  # filling: at once
        handoff.put(item)
    assert not handoff.wait_for_room(0.01)  # full
    assert handoff.get() == 0
    assert not handoff.wait_for_room(0.01)  # one taken, two still ready: no refill yet
    assert handoff.get() == 1 and handoff.get() == 2
    assert handoff.wait_for_room(0.0)  # all taken
    handoff.put(3)
    handoff.clear()  # the consumer stops: what was ready is dropped, the thread may go on to its stop
    assert handoff.wait_for_room(0.0)


def test_the_thread_refills_in_one_go_once_the_consumer_has_taken_every_prepared_batch():
    # One wake-up of the thread per `depth` batches, not one per batch (each costs a Python-bound consumer
    # a wait for the GIL). Polls with generous bounds: no timing is asserted.
    from mmreplay.store.feeds.prefetch import Prefetcher

    produced = []
    prefetcher = Prefetcher(lambda: produced.append(len(produced)) or len(produced) - 1, depth=3)
    try:
        deadline = time.monotonic() + 10
        while len(produced) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert next(prefetcher) == 0
        time.sleep(0.2)  # ample for a thread that would refill now
        assert len(produced) == 3
        assert next(prefetcher) == 1 and next(prefetcher) == 2
        deadline = time.monotonic() + 10
        while len(produced) < 6 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert len(produced) == 6 and [next(prefetcher) for _ in range(3)] == [3, 4, 5]
    finally:
        prefetcher.close()
