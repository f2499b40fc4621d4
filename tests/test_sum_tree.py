"""The vectorized sum tree against a plain numpy model: totals, minimums, last-wins updates, lazily settled
range fills, and ``find`` returning the leaf whose cumulative range holds each target (``searchsorted``
over the leaves' cumsum). Trees are checked with the default top level and with small ones, so that both
the whole-level top and the per-path levels below it are exercised at every size.

These tests run on the compiled extension (mmreplay._sumtree) when it is built, and again on the numpy
code under MMREPLAY_PURE_PYTHON=1 (scripts/test.sh); the last ones compare the two bit for bit."""

from __future__ import annotations

import os

import numpy as np
import pytest
from extension_status import absent_reason
from hypothesis import given
from hypothesis import strategies as st

from mmreplay.sampling import sum_tree
from mmreplay.sampling.sum_tree import ACCELERATED, TOP_LEVEL, SumTree, tree_size


def tree_and_nodes(
    leaves: np.ndarray, top_level: int = TOP_LEVEL, *, accelerated: bool = ACCELERATED
) -> tuple[SumTree, np.ndarray, np.ndarray]:
    """A tree over ``leaves`` (padded with empty leaves to a power of two) and its two node arrays; the
    leaves are set before construction, as the contract of ``SumTree`` asks."""
    size = tree_size(len(leaves))
    sums, minimums = np.zeros(2 * size), np.zeros(2 * size)
    sums[size : size + len(leaves)] = leaves
    return SumTree(sums, minimums, top_level=top_level, accelerated=accelerated), sums, minimums


def make_tree(leaves: np.ndarray, top_level: int = TOP_LEVEL) -> SumTree:
    return tree_and_nodes(leaves, top_level)[0]


def model_find(leaves: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The leaf j with cumsum[j - 1] <= target < cumsum[j]."""
    return np.searchsorted(np.cumsum(leaves), targets, side="right")


@pytest.mark.parametrize(("leaves", "size"), [(1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (1_000_000, 1 << 20)])
def test_tree_size_is_the_leaf_count_rounded_up_to_a_power_of_two(leaves, size):
    assert tree_size(leaves) == size


def test_total_and_minimum_are_over_the_non_empty_leaves():
    tree = make_tree(np.array([0.0, 3.0, 0.5, 0.0, 2.0]))
    assert tree.total == pytest.approx(5.5)
    assert tree.minimum == 0.5


def test_an_empty_tree_has_total_zero_and_minimum_infinity():
    tree = make_tree(np.zeros(6))
    assert tree.total == 0.0
    assert tree.minimum == np.inf


def test_setting_a_leaf_to_zero_empties_it_for_the_minimum_and_for_find():
    tree = make_tree(np.array([1.0, 0.25, 2.0, 4.0]))
    tree.set(np.array([1]), np.array([0.0]))
    assert tree.minimum == 1.0
    assert tree.total == pytest.approx(7.0)
    found = tree.find(np.linspace(0, 7, 1000, endpoint=False))
    assert 1 not in found.tolist()


def test_repeated_leaves_in_one_set_take_the_last_value():
    tree = make_tree(np.ones(8))
    tree.set(np.array([3, 5, 3, 3, 5]), np.array([10.0, 20.0, 30.0, 0.5, 7.0]))
    np.testing.assert_array_equal(tree.leaves(np.array([3, 5])), [0.5, 7.0])
    assert tree.total == pytest.approx(6 + 0.5 + 7.0)
    assert tree.minimum == 0.5


def test_set_with_no_indices_changes_nothing():
    tree = make_tree(np.array([1.0, 2.0]))
    tree.set(np.array([], np.int64), np.array([]))
    assert tree.total == 3.0


@pytest.mark.parametrize(
    ("num_leaves", "top_level"), [(1000, TOP_LEVEL), (1000, 3), (5000, TOP_LEVEL), (70_000, TOP_LEVEL)]
)
def test_find_returns_the_leaf_whose_cumulative_range_holds_each_target(num_leaves, top_level):
    rng = np.random.default_rng(1)
    leaves = rng.random(num_leaves) * (rng.random(num_leaves) < 0.7)  # about 30% empty leaves
    tree = make_tree(leaves, top_level)
    targets = rng.random(5000) * leaves.sum()
    found = tree.find(targets)
    assert np.all(leaves[found] > 0)
    # Away from rounding at leaf boundaries, find agrees with the cumulative sums.
    cumsum = np.cumsum(leaves)
    position = np.searchsorted(cumsum, targets)
    gap = np.minimum(np.abs(cumsum[np.minimum(position, len(cumsum) - 1)] - targets),
                     np.abs(cumsum[np.maximum(position - 1, 0)] - targets))
    clear = gap > 1e-9 * leaves.sum()
    assert clear.mean() > 0.99
    np.testing.assert_array_equal(found[clear], model_find(leaves, targets)[clear])


@pytest.mark.parametrize("top_level", [TOP_LEVEL, 1, 0])
def test_find_at_a_leaf_boundary_goes_to_the_right_leaf(top_level):
    tree = make_tree(np.array([1.0, 2.0, 4.0, 1.0]), top_level)
    np.testing.assert_array_equal(tree.find(np.array([0.0, 1.0, 3.0, 7.0, 7.999])), [0, 1, 2, 3, 3])


@pytest.mark.parametrize("top_level", [TOP_LEVEL, 2, 0])
def test_find_never_returns_an_empty_leaf_even_for_targets_rounded_past_the_total(top_level):
    leaves = np.zeros(16)
    leaves[[2, 5]] = [0.1, 0.2]  # sums that are not exact in binary
    tree = make_tree(leaves, top_level)
    top = np.nextafter(tree.total, np.inf)
    targets = np.array([0.0, np.nextafter(0.1, 0), 0.1, np.nextafter(tree.total, 0), tree.total, top])
    found = tree.find(targets)
    assert set(found.tolist()) <= {2, 5}, found


@pytest.mark.parametrize(("num_leaves", "top_level"), [(100, TOP_LEVEL), (100, 2), (3000, TOP_LEVEL), (3000, 0)])
def test_a_tree_updated_by_sets_and_fills_is_bit_for_bit_the_tree_rebuilt_from_its_leaves(num_leaves, top_level):
    rng = np.random.default_rng(2)
    tree, sums, minimums = tree_and_nodes(np.zeros(num_leaves), top_level)
    for round_ in range(30):
        if round_ % 3:
            indices = rng.integers(0, num_leaves, 17)
            tree.set(indices, rng.random(17) * (rng.random(17) < 0.8))
        else:
            start = int(rng.integers(0, num_leaves))
            tree.fill(start, min(num_leaves, start + int(rng.integers(1, 300))), float(rng.random() * (round_ % 2)))
    leaves = tree.leaves(np.arange(num_leaves)).copy()
    rebuilt, rebuilt_sums, rebuilt_minimums = tree_and_nodes(leaves, top_level)
    assert tree.total == rebuilt.total  # reading the total settles the fills the tree deferred
    np.testing.assert_array_equal(sums[1:], rebuilt_sums[1:])
    np.testing.assert_array_equal(minimums[1:], rebuilt_minimums[1:])
    targets = rng.random(2000) * rebuilt.total
    np.testing.assert_array_equal(tree.find(targets), rebuilt.find(targets))


def test_filled_ranges_count_once_the_tree_is_read():
    tree = make_tree(np.ones(3000))
    tree.fill(10, 20, 0.0)  # emptied (evicted)
    tree.fill(20, 25, 7.0)
    tree.fill(25, 26, 0.5)  # adjacent: merged with the range before
    tree.fill(2990, 3000, 0.0)
    model = np.ones(3000)
    model[10:20], model[20:25], model[25], model[2990:] = 0.0, 7.0, 0.5, 0.0
    assert tree.total == pytest.approx(model.sum())
    assert tree.minimum == 0.5
    found = tree.find(np.random.default_rng(3).random(4000) * tree.total)
    assert np.all(model[found] > 0)
    np.testing.assert_array_equal(tree.leaves(np.arange(3000)), model)


def test_a_set_after_fills_sees_the_filled_leaves():
    tree = make_tree(np.ones(5000))
    tree.fill(0, 4000, 0.0)
    tree.set(np.array([4500, 10]), np.array([3.0, 2.0]))
    assert tree.total == pytest.approx(999 + 3.0 + 2.0)
    found = tree.find(np.linspace(0, tree.total, 2000, endpoint=False))
    assert set(found.tolist()) <= {10} | set(range(4000, 5000))


def test_find_in_a_tree_whose_leaves_are_all_empty_is_a_value_error():
    tree = make_tree(np.ones(8))
    tree.fill(0, 8, 0.0)
    with pytest.raises(ValueError, match="^cannot search a sum tree whose leaves are all empty$"):
        tree.find(np.array([0.0]))


values_ = st.floats(0, 1e6) | st.just(0.0)
a_set = st.lists(st.tuples(st.integers(0, 39), values_), min_size=1, max_size=12)
a_fill = st.tuples(st.integers(0, 39), st.integers(0, 39), values_)


@given(
    num_leaves=st.integers(1, 40),
    top_level=st.integers(0, 6),
    updates=st.lists(a_set | a_fill, min_size=1, max_size=8),
    fractions=st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=20),
)
def test_the_tree_agrees_with_a_plain_array_after_any_batch_of_updates(num_leaves, top_level, updates, fractions):
    model = np.zeros(num_leaves)
    tree = make_tree(model, top_level)
    for update in updates:
        if isinstance(update, tuple):  # a fill of leaves [start, stop)
            start, stop = sorted((update[0] % num_leaves, update[1] % num_leaves + 1))
            tree.fill(start, stop, update[2])
            model[start:stop] = update[2]
            continue
        indices = np.array([i % num_leaves for i, _ in update], np.int64)
        values = np.array([v for _, v in update])
        tree.set(indices, values)
        for i, v in zip(indices.tolist(), values.tolist()):
            model[i] = v  # the last value of a repeated index wins
    np.testing.assert_array_equal(tree.leaves(np.arange(num_leaves)), model)
    assert tree.total == pytest.approx(model.sum(), rel=1e-9, abs=1e-9)
    assert tree.minimum == (model[model > 0].min() if (model > 0).any() else np.inf)
    if model.sum() > 0:
        targets = np.array(fractions) * tree.total
        found = tree.find(targets)
        assert np.all(model[found] > 0), "find returned an empty leaf"
        # Away from rounding at leaf boundaries, find agrees with the cumulative sums.
        cumsum = np.cumsum(model)
        clear = np.min(np.abs(targets[:, None] - np.concatenate([[0.0], cumsum])[None]), axis=1) > 1e-6 * tree.total
        np.testing.assert_array_equal(found[clear], model_find(model, targets)[clear])


# -- the compiled extension against the numpy code, bit for bit ------------------------------------------

compiled_only = pytest.mark.skipif(not ACCELERATED, reason=absent_reason("_sumtree"))


def test_the_extension_is_hidden_under_mmreplay_pure_python():
    hidden = os.environ.get("MMREPLAY_PURE_PYTHON", "") not in ("", "0")
    assert make_tree(np.ones(5)).accelerated == (ACCELERATED and not hidden)
    if hidden:
        assert not ACCELERATED


def test_asking_for_the_extension_when_it_is_missing_is_a_value_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sum_tree, "_sumtree", None)  # as extensions.load leaves it without a build
    with pytest.raises(ValueError, match="^accelerated=True but mmreplay._sumtree is not built"):
        tree_and_nodes(np.ones(5), accelerated=True)


@compiled_only
def test_arrays_the_extension_cannot_take_keep_to_the_numpy_code():
    sums, minimums = np.zeros((2, 16)), np.zeros((2, 16))
    sums[0, 8:] = 1.0
    strided = SumTree(sums[0], minimums[0], accelerated=True)
    assert strided.accelerated
    assert not SumTree(np.zeros(32)[::2], np.zeros(32)[::2], accelerated=True).accelerated
    assert not SumTree(np.zeros(16, ">f8"), np.zeros(16, ">f8"), accelerated=True).accelerated


@compiled_only
def test_a_compiled_set_of_a_leaf_out_of_range_is_an_index_error_and_changes_nothing():
    tree, sums, minimums = tree_and_nodes(np.arange(5.0), accelerated=True)
    before = sums.copy(), minimums.copy()
    with pytest.raises(IndexError, match="^leaf index 8 is out of range for 8 leaves$"):
        tree.set(np.array([1, 8]), np.array([3.0, 4.0]))
    with pytest.raises(IndexError, match="^leaf index -1 is out of range for 8 leaves$"):
        tree.set(np.array([-1]), np.array([3.0]))
    np.testing.assert_array_equal(sums, before[0])
    np.testing.assert_array_equal(minimums, before[1])


def twin_trees(leaves: np.ndarray, top_level: int) -> tuple[tuple[SumTree, np.ndarray, np.ndarray], ...]:
    """The same tree twice: on the numpy code, and on the extension."""
    return tree_and_nodes(leaves, top_level, accelerated=False), tree_and_nodes(leaves, top_level, accelerated=True)


def assert_same_bits(numpy_tree: tuple[SumTree, np.ndarray, np.ndarray], compiled: tuple[SumTree, ...]) -> None:
    """The same nodes, bit for bit (-0.0 is not 0.0 here), once both have settled their fills."""
    assert numpy_tree[0].total == compiled[0].total or np.isnan(numpy_tree[0].total)
    assert numpy_tree[1].tobytes() == compiled[1].tobytes(), "sums differ"
    assert numpy_tree[2].tobytes() == compiled[2].tobytes(), "minimums differ"


def boundary_targets(tree: SumTree, leaves: np.ndarray, fractions: list[float]) -> np.ndarray:
    """Targets where rounding decides: the cumulative sums of the leaves and of the top level's nodes, the
    total, each with its neighbours, and 0, -0.0, a negative one, +inf and NaN."""
    total = tree.total
    top = 1 << min(tree.size.bit_length() - 1, TOP_LEVEL)
    edges = np.concatenate([np.cumsum(leaves), np.cumsum(tree._sums[top : 2 * top]), [total]])
    near = np.concatenate([edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf)])
    special = np.array([0.0, -0.0, -1.0, np.inf, np.nan])
    return np.concatenate([np.array(fractions) * total, near, special])


leaf_values = st.sampled_from([0.0, 0.1, 0.2, 0.3, 0.7, 1.0, 3.0, 5e-324, 1e300]) | st.floats(0, 1e6)


@compiled_only
@given(
    leaves=st.lists(leaf_values, min_size=1, max_size=300),
    top_level=st.integers(0, 10),
    updates=st.lists(
        st.tuples(st.integers(0, 299), st.integers(0, 299), leaf_values)
        | st.lists(st.tuples(st.integers(0, 299), leaf_values), min_size=1, max_size=40),
        max_size=6,
    ),
    fractions=st.lists(st.floats(0, 1, exclude_max=True), max_size=20),
)
def test_the_extension_builds_the_same_nodes_and_finds_the_same_leaves_as_numpy(leaves, top_level, updates, fractions):
    model = np.array(leaves)
    numpy_tree, compiled = twin_trees(model, top_level)
    for update in updates:
        if isinstance(update, tuple):  # a fill of leaves [start, stop)
            start, stop = sorted((update[0] % len(model), update[1] % len(model) + 1))
            for tree in (numpy_tree[0], compiled[0]):
                tree.fill(start, stop, update[2])
            model[start:stop] = update[2]
        else:
            indices = np.array([i % len(model) for i, _ in update], np.int64)
            values = np.array([v for _, v in update])
            for tree in (numpy_tree[0], compiled[0]):
                tree.set(indices, values)
            model[indices] = values  # numpy's last-wins for repeats, as the trees promise
        assert_same_bits(numpy_tree, compiled)
    if not numpy_tree[0].total > 0:
        return
    targets = boundary_targets(numpy_tree[0], model, fractions)
    np.testing.assert_array_equal(compiled[0].find(targets), numpy_tree[0].find(targets))


@compiled_only
@pytest.mark.parametrize(("num_leaves", "top_level"), [(70_000, TOP_LEVEL), (5000, 3), (3000, 0)])
def test_large_trees_agree_bit_for_bit_after_sets_and_fills(num_leaves, top_level):
    rng = np.random.default_rng(4)
    leaves = np.round(rng.random(num_leaves), 1) * (rng.random(num_leaves) < 0.7)  # many equal, 30% empty
    numpy_tree, compiled = twin_trees(leaves, top_level)
    for round_ in range(12):
        if round_ % 3:
            indices = rng.integers(0, num_leaves, 300)
            values = np.round(rng.random(300), 1) * (rng.random(300) < 0.8)
            for tree in (numpy_tree[0], compiled[0]):
                tree.set(indices, values)
        else:
            start = int(rng.integers(0, num_leaves))
            stop, value = min(num_leaves, start + int(rng.integers(1, 5000))), float(rng.random() * (round_ % 2))
            for tree in (numpy_tree[0], compiled[0]):
                tree.fill(start, stop, value)
                tree.fill(0, 64, 0.3)  # a second range, as ring wraps make
        assert_same_bits(numpy_tree, compiled)
    model = numpy_tree[0].leaf_values[:num_leaves].copy()
    targets = boundary_targets(numpy_tree[0], model, rng.random(20_000).tolist())
    np.testing.assert_array_equal(compiled[0].find(targets), numpy_tree[0].find(targets))


# -- a prioritized batch's draw, weights and update (one compiled call each) ----------------------------


def test_c_powers_gives_the_c_librarys_pow_with_its_poles_and_overflows_as_infinity():
    bases = np.array([0.0, 0.0, 0.0, 2.0, 1e300, 0.5, np.inf])
    np.testing.assert_array_equal(sum_tree.c_powers(bases, -0.4)[:2], [np.inf, np.inf])
    assert sum_tree.c_powers(bases, 0.0).tolist() == [1.0] * 7
    assert sum_tree.c_powers(np.array([1e300]), 2.0).tolist() == [np.inf]
    assert sum_tree.c_powers(np.array([2.0, 0.0]), 0.5).tolist() == [2.0**0.5, 0.0]
    assert sum_tree.c_powers(np.zeros(0), 3.0).shape == (0,)


@pytest.mark.parametrize("accelerated", [False, pytest.param(True, marks=compiled_only)])
def test_draw_maps_each_found_leaf_to_the_step_of_its_slot_in_the_stored_range(accelerated):
    leaves = np.zeros(8)
    leaves[[1, 6]] = [1.0, 3.0]  # slots 1 and 6 of a ring of 7 slots whose first stored step is 12
    tree = tree_and_nodes(leaves, accelerated=accelerated)[0]
    steps = tree.draw(np.random.default_rng(5), 4000, first_step=12, slots=7)
    assert set(steps.tolist()) == {13, 15}  # 13 % 7 == 6, 15 % 7 == 1: the steps 12 ... 18 hold
    assert 0.7 < np.mean(steps == 13) < 0.8  # slot 6 holds 3 of the 4 units of mass


@pytest.mark.parametrize("accelerated", [False, pytest.param(True, marks=compiled_only)])
def test_update_skips_steps_outside_the_stored_range_and_says_the_largest_priority_it_set(accelerated):
    tree, sums, _ = tree_and_nodes(np.ones(8), accelerated=accelerated)
    largest = tree.update(np.array([3, 20, 4, 4]), np.array([2.0, 9.0, 5.0, 1.0]), stored=range(2, 10), slots=8,
                          alpha=1.0, epsilon=0.5)
    assert largest == 5.0  # 9.0 belongs to step 20, evicted since it was drawn
    assert tree.leaf_values.tolist() == [1.0, 1.0, 1.0, 2.5, 1.5, 1.0, 1.0, 1.0]  # step 4's last value won
    assert tree.update(np.array([0, 11]), np.array([1.0, 1.0]), stored=range(2, 10), slots=8, alpha=1.0,
                       epsilon=0.0) is None
    assert tree.total == sums[8:].sum()


@pytest.mark.parametrize("accelerated", [False, pytest.param(True, marks=compiled_only)])
def test_weights_are_leaf_over_minimum_to_the_minus_beta_as_float32(accelerated):
    tree = tree_and_nodes(np.array([2.0, 0.5, 0.0, 8.0]), accelerated=accelerated)[0]
    weights = tree.weights(np.array([4, 5, 6, 7, 0]), slots=4, beta=0.5)
    assert weights.dtype == np.float32
    assert weights.tolist() == [0.5, 1.0, np.inf, 0.25, 0.5]  # step 6's empty leaf: never drawn, weight inf


steps_of_a_ring = st.lists(st.integers(0, 400), max_size=80)


@compiled_only
@given(
    leaves=st.lists(leaf_values, min_size=1, max_size=300),
    top_level=st.integers(0, 10),
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(0, 300),
    first_step=st.integers(0, 10**12),
    beta=st.sampled_from([0.0, 0.4, 1.0]) | st.floats(0, 5),
)
def test_compiled_draws_and_weights_are_the_numpy_codes_bit_for_bit(leaves, top_level, seed, count, first_step, beta):
    model = np.array(leaves)
    numpy_tree, compiled = twin_trees(model, top_level)
    slots = len(model)
    if not numpy_tree[0].total > 0:
        for tree in (numpy_tree[0], compiled[0]):
            with pytest.raises(ValueError, match="^cannot search a sum tree whose leaves are all empty$"):
                tree.draw(np.random.default_rng(seed), 3, first_step=first_step, slots=slots)
        return
    drawn = [tree[0].draw(np.random.default_rng(seed), count, first_step=first_step, slots=slots)
             for tree in (numpy_tree, compiled)]
    np.testing.assert_array_equal(drawn[0], drawn[1])
    assert drawn[1].dtype == np.int64 and np.all((drawn[1] >= first_step) & (drawn[1] < first_step + slots))
    weights = [tree[0].weights(drawn[0], slots=slots, beta=beta) for tree in (numpy_tree, compiled)]
    assert weights[0].tobytes() == weights[1].tobytes()


@compiled_only
@given(
    leaves=st.lists(leaf_values, min_size=1, max_size=300),
    top_level=st.integers(0, 10),
    batches=st.lists(
        st.lists(st.tuples(st.integers(0, 600), st.sampled_from([0.0, 1.0, 7.5]) | st.floats(0, 1e6)), max_size=50),
        max_size=5,
    ),
    stored_start=st.integers(0, 300),
    alpha=st.sampled_from([0.0, 0.6, 1.0, 2.0]) | st.floats(0, 3),
    epsilon=st.sampled_from([0.0, 1e-6, 0.3]),
)
def test_compiled_updates_set_the_numpy_codes_leaves_and_largest_priority_bit_for_bit(
    leaves, top_level, batches, stored_start, alpha, epsilon
):
    model = np.array(leaves)
    numpy_tree, compiled = twin_trees(model, top_level)
    stored = range(stored_start, stored_start + len(model))
    for batch in batches:
        steps = np.array([step for step, _ in batch], np.int64)
        priorities = np.array([priority for _, priority in batch], np.float64)
        largest = [tree[0].update(steps, priorities, stored=stored, slots=len(model), alpha=alpha, epsilon=epsilon)
                   for tree in (numpy_tree, compiled)]
        assert largest[0] == largest[1]
        assert_same_bits(numpy_tree, compiled)


@compiled_only
@given(
    leaves=st.lists(leaf_values, min_size=1, max_size=100),
    batch=st.lists(
        st.tuples(st.integers(-3, 400), st.sampled_from([0.0, 1.0, -0.0, -1.0, np.inf, -np.inf, np.nan, 5e-324])
                  | st.floats(0, 1e6)),
        max_size=40,
    ),
    added=st.integers(0, 400),
)
def test_a_checked_update_applies_exactly_when_the_stores_checks_pass_and_as_update_does(leaves, batch, added):
    model = np.array(leaves)
    checked, plain = twin_trees(model, TOP_LEVEL)[1], twin_trees(model, TOP_LEVEL)[1]
    steps = np.array([step for step, _ in batch], np.int64)
    priorities = np.array([priority for _, priority in batch], np.float64)
    stored = range(max(0, added - len(model)), added)
    valid = bool(np.all((steps >= 0) & (steps < added) & np.isfinite(priorities) & (priorities >= 0)))
    before = checked[1].tobytes(), checked[2].tobytes()
    applied, largest = checked[0].update_checked(steps, priorities, added=added, stored=stored, slots=len(model),
                                                 alpha=0.6, epsilon=1e-6)
    assert applied == valid
    if not valid:
        assert (checked[1].tobytes(), checked[2].tobytes()) == before and largest is None
        return
    assert largest == plain[0].update(steps, priorities, stored=stored, slots=len(model), alpha=0.6, epsilon=1e-6)
    assert_same_bits(plain, checked)


def test_without_the_extension_a_checked_update_declines_and_changes_nothing():
    tree, sums, _ = tree_and_nodes(np.ones(4), accelerated=False)
    before = sums.tobytes()
    assert tree.update_checked(np.array([1]), np.array([2.0]), added=4, stored=range(4), slots=4, alpha=1.0,
                               epsilon=0.0) == (False, None)
    assert sums.tobytes() == before
