"""Samplers through the public store: uniform and prioritized distributions (chi-square tolerances from
the number of draws, fixed seeds), importance weights, ``update_priorities`` and persistence of priorities.

Frames encode their own step (``numbered_frame``), so a sampled batch can be checked against the
reference model as well as counted.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest
from extension_status import absent_reason
from reference_windows import assert_distribution
from reference import ReferenceStore, assert_batch_matches
from strategies import numbered_frame

from mmreplay import CorruptStoreError, PrioritizedSampler, ReplayStore, UniformSampler

FRAME = (2, 3)


def fill(store, count: int, *, first: int = 0, episode_length: int = 5, ref: ReferenceStore | None = None) -> None:
    """Add ``count`` single-env transitions; episodes of ``episode_length`` end with a termination."""
    for i in range(first, first + count):
        args = (numbered_frame(FRAME, i), i % 7, float(i), numbered_frame(FRAME, i + 1),
                (i + 1) % episode_length == 0, False)
        store.add(*args)
        if ref is not None:
            ref.add(*args)


def prioritized(make_store, *, capacity=16, alpha=0.6, epsilon=1e-6, **kwargs):
    return make_store(frame_shape=FRAME, capacity=capacity, stack_size=2,
                      sampler=PrioritizedSampler(alpha=alpha, epsilon=epsilon), **kwargs)


def draw(store, draws: int, seed: int, **kwargs):
    return store.sample(draws, rng=seed, **kwargs)


def probabilities(priorities: np.ndarray, alpha: float, epsilon: float) -> np.ndarray:
    scaled = (np.asarray(priorities, np.float64) + epsilon) ** alpha
    return scaled / scaled.sum()


# -- uniform ---------------------------------------------------------------------------------------


def test_uniform_sampling_draws_every_stored_transition_equally_often(make_store):
    store = make_store(frame_shape=FRAME, capacity=24, stack_size=2)
    fill(store, 30)  # steps 0..5 evicted
    batch = draw(store, 12_000, seed=11)
    stored = np.arange(6, 30)
    assert_distribution(batch.index, stored, np.full(24, 1 / 24))


def test_uniform_sampling_after_the_row_ring_wraps_draws_only_stored_steps_equally(make_store):
    store = make_store(frame_shape=FRAME, capacity=10, stack_size=1)
    fill(store, 1_200)  # more than capacity + row slack: slots wrap
    batch = draw(store, 5_000, seed=3)
    assert_distribution(batch.index, np.arange(1_190, 1_200), np.full(10, 0.1))


def test_uniform_sampling_returns_weights_of_one(make_store):
    store = make_store(frame_shape=FRAME, capacity=8)
    fill(store, 5)
    batch = store.sample(64, rng=0, beta=0.9)
    assert batch.weight.dtype == np.float32
    np.testing.assert_array_equal(batch.weight, np.ones(64, np.float32))


def test_uniform_sampled_batches_equal_the_reference(make_store):
    store = make_store(frame_shape=FRAME, capacity=12, stack_size=3)
    ref = ReferenceStore(frame_shape=FRAME, capacity=12, stack_size=3)
    fill(store, 40, ref=ref)
    assert_batch_matches(store.sample(200, rng=5), ref)


def test_update_priorities_on_a_uniform_store_is_a_type_error(make_store):
    store = make_store(frame_shape=FRAME, capacity=8)
    fill(store, 4)
    with pytest.raises(TypeError, match=r"update_priorities needs a store created with sampler=PrioritizedSampler"):
        store.update_priorities([0], [1.0])


# -- prioritized distributions ---------------------------------------------------------------------


def test_new_transitions_are_drawn_uniformly_at_the_initial_priority(make_store):
    store = prioritized(make_store, capacity=16)
    fill(store, 16)
    assert_distribution(draw(store, 8_000, seed=1).index, np.arange(16), np.full(16, 1 / 16))


@pytest.mark.parametrize(("alpha", "epsilon"), [(0.6, 1e-6), (1.0, 0.0), (0.0, 1e-6), (0.5, 0.3)])
def test_prioritized_sampling_draws_each_step_with_probability_priority_to_the_alpha(make_store, alpha, epsilon):
    store = prioritized(make_store, capacity=16, alpha=alpha, epsilon=epsilon)
    fill(store, 21)  # steps 0..4 evicted
    stored = np.arange(5, 21)
    priorities = np.linspace(0.2, 3.0, 16) ** 2
    store.update_priorities(stored, priorities)
    batch = draw(store, 20_000, seed=7)
    assert_distribution(batch.index, stored, probabilities(priorities, alpha, epsilon))


def test_prioritized_sampling_after_the_row_ring_wraps_follows_the_priorities(make_store):
    store = prioritized(make_store, capacity=12)
    fill(store, 1_100)  # row slots are capacity + 1024: the stored steps straddle the slot wrap
    stored = np.arange(1_088, 1_100)
    priorities = np.arange(1, 13, dtype=np.float64)
    store.update_priorities(stored, priorities)
    batch = draw(store, 12_000, seed=2)
    assert_distribution(batch.index, stored, probabilities(priorities, 0.6, 1e-6))


def test_a_priority_of_zero_with_epsilon_zero_is_never_drawn(make_store):
    store = prioritized(make_store, capacity=8, alpha=1.0, epsilon=0.0)
    fill(store, 8)
    store.update_priorities(np.arange(8), [0.0, 1, 1, 0.0, 1, 1, 1, 0.0])
    batch = draw(store, 4_000, seed=4)
    assert not set(batch.index.tolist()) & {0, 3, 7}
    assert np.all(np.isfinite(batch.weight))


def test_evicted_transitions_are_never_drawn_even_with_the_largest_priority(make_store):
    store = prioritized(make_store, capacity=8)
    fill(store, 8)
    store.update_priorities(np.arange(4), np.full(4, 50.0))  # the largest priorities, then evicted
    fill(store, 4, first=8)  # evicts steps 0..3; new ones get the max priority 50
    batch = draw(store, 6_000, seed=9)
    stored = np.arange(4, 12)
    p = probabilities([1, 1, 1, 1, 50, 50, 50, 50], 0.6, 1e-6)
    assert_distribution(batch.index, stored, p)


def test_prioritized_sampled_batches_equal_the_reference(make_store):
    store = prioritized(make_store, capacity=10)
    ref = ReferenceStore(frame_shape=FRAME, capacity=10, stack_size=2)
    fill(store, 23, ref=ref)
    store.update_priorities(np.arange(13, 23), np.arange(10, dtype=np.float64))
    assert_batch_matches(store.sample(300, rng=8), ref)


def test_when_every_priority_is_zero_steps_are_drawn_uniformly_with_weights_of_one(make_store):
    store = prioritized(make_store, capacity=8, alpha=1.0, epsilon=0.0)
    fill(store, 12)  # steps 0..3 evicted
    store.update_priorities(np.arange(4, 12), np.zeros(8))
    batch = store.sample(8_000, rng=3, beta=0.7)
    assert_distribution(batch.index, np.arange(4, 12), np.full(8, 1 / 8))
    np.testing.assert_array_equal(batch.weight, np.ones(8_000, np.float32))
    store.update_priorities([6], [2.0])  # mass again: only step 6 has any
    assert set(store.sample(200, rng=4).index.tolist()) == {6}


def test_a_large_store_draws_by_priority_after_the_row_ring_wraps(make_store):
    """Thousands of row slots: the tree is deeper than its whole-level top, so paths are exercised."""
    store = prioritized(make_store, capacity=3000, alpha=1.0, epsilon=0.0)
    fill(store, 5000, episode_length=50)  # row slots are 4024: steps wrap round the ring
    stored = np.arange(2000, 5000)
    chosen = np.array([2000, 2001, 3333, 4023, 4024, 4999])  # both sides of the slot wrap
    priorities = np.zeros(3000)
    priorities[chosen - 2000] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    store.update_priorities(stored, priorities)
    batch = store.sample(12_000, rng=5, beta=1.0)
    assert_distribution(batch.index, chosen, probabilities([1, 2, 3, 4, 5, 6], 1.0, 0.0))
    np.testing.assert_allclose(batch.weight, 1.0 / priorities[batch.index - 2000], rtol=1e-6)


# -- importance weights ----------------------------------------------------------------------------


def expected_weights(index, stored, priorities, *, alpha, epsilon, beta):
    """(N P(i))^-beta divided by its maximum over the stored transitions."""
    p = probabilities(priorities, alpha, epsilon)
    n = len(stored)
    all_weights = (n * p) ** -beta
    lookup = dict(zip(np.asarray(stored).tolist(), (all_weights / all_weights.max()).tolist()))
    return np.array([lookup[i] for i in np.asarray(index).tolist()])


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0, 2.5])
def test_weights_are_n_times_probability_to_the_minus_beta_over_their_maximum(make_store, beta):
    store = prioritized(make_store, capacity=16, alpha=0.7, epsilon=0.01)
    fill(store, 20)
    stored = np.arange(4, 20)
    priorities = np.geomspace(0.01, 50, 16)
    store.update_priorities(stored, priorities)
    batch = store.sample(500, rng=1, beta=beta)
    assert batch.weight.dtype == np.float32
    want = expected_weights(batch.index, stored, priorities, alpha=0.7, epsilon=0.01, beta=beta)
    np.testing.assert_allclose(batch.weight, want, rtol=1e-5)
    assert batch.weight.max() <= 1.0


def test_weights_are_normalised_over_the_stored_transitions_only(make_store):
    store = prioritized(make_store, capacity=8, alpha=1.0, epsilon=0.0)
    fill(store, 8)
    store.update_priorities(np.arange(8), [0.001, 1, 2, 2, 2, 2, 2, 2])  # step 0: the largest weight
    fill(store, 1, first=8)  # evicts step 0; step 8 gets the max priority, 2
    stored = np.arange(1, 9)
    batch = store.sample(400, rng=2, beta=1.0)
    want = expected_weights(batch.index, stored, [1, 2, 2, 2, 2, 2, 2, 2], alpha=1.0, epsilon=0.0, beta=1.0)
    np.testing.assert_allclose(batch.weight, want, rtol=1e-6)
    assert batch.weight[batch.index == 1].tolist()[:1] == [1.0]


# -- update_priorities -----------------------------------------------------------------------------


def weight_of(store, step: int, *, draws: int = 2_000) -> float:
    """The importance weight (beta = 1) the store gives ``step``: with alpha = 1 and epsilon = 0 it is
    min priority / priority of ``step``."""
    batch = store.sample(draws, rng=0, beta=1.0)
    hits = batch.weight[batch.index == step]
    assert len(hits), f"step {step} was not drawn in {draws} draws"
    return float(hits[0])


def test_repeated_steps_in_one_update_take_the_last_priority(make_store):
    store = prioritized(make_store, capacity=8, alpha=1.0, epsilon=0.0)
    fill(store, 8)
    store.update_priorities(np.arange(8), np.full(8, 4.0))
    store.update_priorities([3, 5, 3, 5, 3], [100.0, 1.0, 0.5, 8.0, 2.0])
    batch = store.sample(8_000, rng=3, beta=1.0)
    p = probabilities([4, 4, 4, 2, 4, 8, 4, 4], 1.0, 0.0)
    assert_distribution(batch.index, np.arange(8), p)
    assert weight_of(store, 3) == pytest.approx(1.0)
    assert weight_of(store, 5) == pytest.approx(2.0 / 8.0)


def test_updates_of_evicted_steps_are_ignored_and_the_others_applied(make_store):
    store = prioritized(make_store, capacity=8, alpha=1.0, epsilon=0.0)
    fill(store, 8)
    batch = store.sample(64, rng=0)  # indices the agent holds while more is added
    fill(store, 4, first=8)  # evicts steps 0..3
    steps = np.array([0, 2, 6, 9])
    store.update_priorities(steps, [1e9, 1e9, 3.0, 0.5])
    p = probabilities([1, 1, 3.0, 1, 1, 0.5, 1, 1], 1.0, 0.0)
    assert_distribution(store.sample(10_000, rng=5).index, np.arange(4, 12), p)
    # The evicted steps' priorities were not "seen": a new transition gets 3.0, not 1e9.
    fill(store, 1, first=12)
    assert weight_of(store, 12) == pytest.approx(0.5 / 3.0)
    assert set(batch.index.tolist()) <= set(range(8))


def test_new_transitions_get_the_largest_priority_seen_so_far(make_store):
    store = prioritized(make_store, capacity=8, alpha=1.0, epsilon=0.0)
    fill(store, 4)
    store.update_priorities([1], [7.0])
    store.update_priorities([1], [0.25])  # lowered again: 7 stays the largest seen
    fill(store, 1, first=4)
    p = probabilities([1, 0.25, 1, 1, 7.0], 1.0, 0.0)
    assert_distribution(store.sample(6_000, rng=6).index, np.arange(5), p)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), -float("inf")])
def test_a_negative_or_non_finite_priority_is_rejected_and_changes_nothing(make_store, bad):
    store = prioritized(make_store, capacity=8, alpha=1.0, epsilon=0.0)
    fill(store, 6)
    store.update_priorities(np.arange(6), np.arange(1, 7, dtype=np.float64))
    before = store.sample(100, rng=1, beta=1.0)
    with pytest.raises(ValueError, match=r"^priority must be finite and >= 0; got"):
        store.update_priorities([0, 1, 2], [5.0, bad, 9.0])
    after = store.sample(100, rng=1, beta=1.0)
    np.testing.assert_array_equal(after.index, before.index)
    np.testing.assert_array_equal(after.weight, before.weight)
    fill(store, 1, first=6)  # the max priority seen is still 6
    p = probabilities([1, 2, 3, 4, 5, 6, 6], 1.0, 0.0)
    assert_distribution(store.sample(6_000, rng=2).index, np.arange(7), p)


@pytest.mark.parametrize("step", [6, 100, -1])
def test_a_step_never_added_is_rejected_naming_index(make_store, step):
    store = prioritized(make_store, capacity=8)
    fill(store, 6)
    with pytest.raises(ValueError, match=rf"^index {step} was never added; transitions added so far: 6$"):
        store.update_priorities([0, step], [1.0, 2.0])


def test_priorities_must_match_the_shape_of_index(make_store):
    store = prioritized(make_store, capacity=8)
    fill(store, 6)
    with pytest.raises(ValueError, match=r"priority has shape \(2,\); expected \(3,\) like index"):
        store.update_priorities([0, 1, 2], [1.0, 2.0])


def test_priorities_updated_with_batch_index_change_what_is_drawn(make_store):
    store = prioritized(make_store, capacity=16, alpha=1.0, epsilon=0.0)
    fill(store, 16)
    batch = store.sample(32, rng=0)
    # Every stored step to 0, then the batch's: the first step of the batch to 50 (later values win).
    steps = np.concatenate([np.arange(16), batch.index])
    store.update_priorities(steps, np.where(steps == batch.index[0], 50.0, 0.0)[: len(steps)])
    assert set(store.sample(200, rng=1).index.tolist()) == {int(batch.index[0])}


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_sampling_when_every_priority_is_zero_draws_stored_steps_or_says_why_not(make_store):
    store = prioritized(make_store, capacity=8, alpha=1.0, epsilon=0.0)
    fill(store, 8)
    store.update_priorities(np.arange(8), np.zeros(8))
    try:
        batch = store.sample(16, rng=0)
    except CorruptStoreError:
        raise  # the store's data is fine: a "corrupt" error is the bug
    except ValueError as error:
        assert "priorit" in str(error)
    else:
        assert set(batch.index.tolist()) <= set(range(8))
        assert np.all(np.isfinite(batch.weight))


# -- persistence -----------------------------------------------------------------------------------


def test_priorities_survive_close_and_reopen(make_store):
    store = prioritized(make_store, capacity=16, alpha=0.8, epsilon=0.01)
    fill(store, 20)
    store.update_priorities(np.arange(4, 20), np.linspace(0.1, 9.0, 16))
    before = store.sample(500, rng=4, beta=0.7)
    path = store.path
    store.close()
    for mode in ("r", "r+"):
        with ReplayStore.open(path, mode) as reopened:
            assert repr(reopened.sampler) == "PrioritizedSampler(alpha=0.8, epsilon=0.01)"
            after = reopened.sample(500, rng=4, beta=0.7)
            np.testing.assert_array_equal(after.index, before.index)
            np.testing.assert_array_equal(after.weight, before.weight)


def test_the_largest_priority_seen_survives_close_and_reopen(make_store):
    store = prioritized(make_store, capacity=8, alpha=1.0, epsilon=0.0)
    fill(store, 4)
    store.update_priorities([0, 1, 2, 3], [9.0, 1.0, 1.0, 1.0])
    store.update_priorities([0], [1.0])
    path = store.path
    store.close()
    with ReplayStore.open(path, "r+") as reopened:
        fill(reopened, 1, first=4)
        p = probabilities([1, 1, 1, 1, 9.0], 1.0, 0.0)
        assert_distribution(reopened.sample(6_000, rng=0).index, np.arange(5), p)


def test_a_reader_sees_priorities_once_the_writer_flushes(make_store):
    store = prioritized(make_store, capacity=8, alpha=1.0, epsilon=0.0)
    fill(store, 8)
    store.flush()
    with ReplayStore.open(store.path, "r") as reader:
        store.update_priorities(np.arange(8), [0, 0, 0, 0, 0, 0, 0, 1.0])
        store.flush()
        assert set(reader.sample(100, rng=0).index.tolist()) == {7}


def test_a_reader_keeps_the_committed_priorities_until_the_writer_flushes(make_store):
    store = prioritized(make_store, capacity=8, alpha=1.0, epsilon=0.0)
    fill(store, 8)
    store.update_priorities(np.arange(8), [0, 0, 0, 1.0, 0, 0, 0, 0])
    store.flush()
    with ReplayStore.open(store.path, "r") as reader:
        store.update_priorities(np.arange(8), [0, 0, 0, 0, 0, 1.0, 0, 0])  # not flushed
        assert reader.refresh() is False
        assert set(reader.sample(100, rng=0).index.tolist()) == {3}
        store.flush()
        assert reader.refresh() is True
        assert set(reader.sample(100, rng=0).index.tolist()) == {5}
        store.flush()  # nothing changed: the commit is the same
        assert reader.refresh() is False


def test_priorities_committed_by_flush_survive_a_crash(tmp_path: Path):
    path = tmp_path / "store.mmr"
    pid = os.fork()
    if pid == 0:  # commit priorities, then die without closing
        try:
            store = ReplayStore.create(path, frame_shape=FRAME, capacity=8, stack_size=1,
                                       sampler=PrioritizedSampler(alpha=1.0, epsilon=0.0))
            fill(store, 8)
            store.update_priorities(np.arange(8), [1.0, 2, 3, 4, 5, 6, 7, 8])
            store.update_priorities([0], [0.5])
            store.flush()
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    with ReplayStore.open(path, "r+") as store:
        assert list(store.stored_steps) == list(range(8))
        p = probabilities([0.5, 2, 3, 4, 5, 6, 7, 8], 1.0, 0.0)
        assert_distribution(store.sample(8_000, rng=1).index, np.arange(8), p)
        fill(store, 1, first=8)  # evicts step 0; the largest priority seen (8) was committed too
        p = probabilities([2, 3, 4, 5, 6, 7, 8, 8], 1.0, 0.0)
        assert_distribution(store.sample(8_000, rng=2).index, np.arange(1, 9), p)


# -- the sampler object ----------------------------------------------------------------------------


def test_a_store_opens_with_its_own_sampler_when_none_is_given(make_store):
    store = prioritized(make_store, alpha=0.5, epsilon=0.25)
    fill(store, 3)
    store.close()
    with ReplayStore.open(store.path) as reopened:
        assert isinstance(reopened.sampler, PrioritizedSampler)
        assert (reopened.sampler.alpha, reopened.sampler.epsilon) == (0.5, 0.25)


@pytest.mark.parametrize(
    ("created", "given"),
    [
        (PrioritizedSampler(alpha=0.6), UniformSampler()),
        (PrioritizedSampler(alpha=0.6), PrioritizedSampler(alpha=0.5)),
        (PrioritizedSampler(epsilon=1e-6), PrioritizedSampler(epsilon=1e-3)),
        (UniformSampler(), PrioritizedSampler()),
    ],
)
def test_opening_with_a_mismatching_sampler_is_a_value_error(make_store, created, given):
    store = make_store(frame_shape=FRAME, capacity=8, sampler=created)
    fill(store, 2)
    store.close()
    with pytest.raises(ValueError, match=r"does not match the store's sampler .*open without sampler="):
        ReplayStore.open(store.path, "r+", sampler=given)
    with ReplayStore.open(store.path, "r+") as reopened:  # the refused open left the store usable
        assert reopened.transitions_added == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(alpha=-0.1), r"^alpha must be a finite number >= 0; got -0.1$"),
        (dict(alpha=float("nan")), r"^alpha must be a finite number >= 0; got nan$"),
        (dict(epsilon=-1.0), r"^epsilon must be a finite number >= 0; got -1.0$"),
        (dict(epsilon=float("inf")), r"^epsilon must be a finite number >= 0; got inf$"),
    ],
)
def test_prioritized_sampler_parameters_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PrioritizedSampler(**kwargs)


@pytest.mark.parametrize("beta", [-0.1, float("nan")])
def test_a_negative_beta_is_rejected_naming_beta(make_store, beta):
    store = prioritized(make_store)
    fill(store, 2)
    with pytest.raises(ValueError, match=r"^beta must be >= 0; got"):
        store.sample(4, rng=0, beta=beta)


@pytest.mark.parametrize("stored", [range(0, 1), range(5, 8), range(3, 3 + 2**40 + 1), range(7, 7 + 10**9)])
def test_uniform_draws_stay_inside_the_stored_steps_at_both_ends_of_the_unit_interval(
    stored: range, monkeypatch: pytest.MonkeyPatch
) -> None:
    """u = 0 draws the oldest step and the largest u below 1 the newest, never one past it (the numpy
    code; the compiled draws equal it, below)."""
    from mmreplay.sampling import uniform_sampler as samplers  # where uniform_steps and _sumtree live

    class Extremes:
        def random(self, size: int) -> np.ndarray:
            return np.array([0.0, np.nextafter(1.0, 0.0), 0.5])

    monkeypatch.setattr(samplers, "_sumtree", None)
    steps = samplers.uniform_steps(3, stored, Extremes())  # type: ignore[arg-type]
    assert steps[0] == stored.start
    assert steps[1] == stored.stop - 1
    assert stored.start <= steps[2] < stored.stop


@pytest.mark.parametrize("bit_generator", [np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937, np.random.Philox,
                                           np.random.SFC64])
def test_compiled_uniform_draws_equal_the_numpy_draws_bit_for_bit(
    bit_generator: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same seed gives the same steps with and without the extension, and leaves the generator in the
    same state, at every size of store up to 2^53 transitions."""
    from mmreplay.sampling import uniform_sampler as samplers  # where uniform_steps and _sumtree live

    if samplers._sumtree is None:
        pytest.skip(absent_reason("_sumtree"))
    stores = [range(0, 1), range(5, 8), range(0, 100_000), range(3, 3 + 2**40 + 1), range(7, 7 + 10**9 + 7),
              range(2**60, 2**60 + 2**53)]
    for seed, stored in enumerate(stores):
        compiled, plain = np.random.Generator(bit_generator(seed)), np.random.Generator(bit_generator(seed))
        for batch_size in (1, 32, 5_000):
            expected_steps = _numpy_uniform_steps(batch_size, stored, plain, monkeypatch)
            steps = samplers.uniform_steps(batch_size, stored, compiled)
            assert steps.dtype == np.int64
            np.testing.assert_array_equal(steps, expected_steps, err_msg=f"{bit_generator.__name__}, {stored}")
            assert stored.start <= steps.min() and steps.max() < stored.stop
        assert compiled.random() == plain.random()  # the same number of draws was taken


def _numpy_uniform_steps(batch_size: int, stored: range, rng: np.random.Generator,
                         monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    from mmreplay.sampling import uniform_sampler as samplers  # where uniform_steps and _sumtree live

    with monkeypatch.context() as patch:
        patch.setattr(samplers, "_sumtree", None)
        return samplers.uniform_steps(batch_size, stored, rng)
