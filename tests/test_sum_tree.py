"""The vectorized sum tree against a plain numpy model: totals, minimums, last-wins updates, and ``find``
returning the leaf whose cumulative range holds each target (``searchsorted`` over the leaves' cumsum)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mmreplay.sum_tree import SumTree, tree_size


def make_tree(leaves: np.ndarray) -> SumTree:
    """A tree over ``leaves`` (padded with empty leaves to a power of two); both trees' leaves are set
    before construction, as the contract of ``SumTree`` asks."""
    size = tree_size(len(leaves))
    sums, minimums = np.zeros(2 * size), np.zeros(2 * size)
    sums[size : size + len(leaves)] = leaves
    minimums[size : size + len(leaves)] = leaves
    return SumTree(sums, minimums)


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


def test_find_returns_the_leaf_whose_cumulative_range_holds_each_target():
    rng = np.random.default_rng(1)
    leaves = rng.random(1000) * (rng.random(1000) < 0.7)  # about 30% empty leaves
    tree = make_tree(leaves)
    targets = rng.random(5000) * leaves.sum()
    np.testing.assert_array_equal(tree.find(targets), model_find(leaves, targets))


def test_find_at_a_leaf_boundary_goes_to_the_right_leaf():
    tree = make_tree(np.array([1.0, 2.0, 4.0, 1.0]))
    np.testing.assert_array_equal(tree.find(np.array([0.0, 1.0, 3.0, 7.0, 7.999])), [0, 1, 2, 3, 3])


def test_find_never_returns_an_empty_leaf_even_for_targets_rounded_past_the_total():
    leaves = np.zeros(16)
    leaves[[2, 5]] = [0.1, 0.2]  # sums that are not exact in binary
    tree = make_tree(leaves)
    top = np.nextafter(tree.total, np.inf)
    targets = np.array([0.0, np.nextafter(0.1, 0), 0.1, np.nextafter(tree.total, 0), tree.total, top])
    found = tree.find(targets)
    assert set(found.tolist()) <= {2, 5}, found


def test_rebuild_from_the_leaves_gives_the_same_nodes_as_incremental_sets():
    rng = np.random.default_rng(2)
    tree = make_tree(np.zeros(100))
    for _ in range(20):
        indices = rng.integers(0, 100, 17)
        tree.set(indices, rng.random(17) * (rng.random(17) < 0.8))
    leaves = tree.leaves(np.arange(100)).copy()
    rebuilt = make_tree(leaves)
    assert tree.total == pytest.approx(rebuilt.total, rel=1e-12)
    assert tree.minimum == rebuilt.minimum
    targets = rng.random(2000) * rebuilt.total
    np.testing.assert_array_equal(tree.find(targets), rebuilt.find(targets))


@given(
    num_leaves=st.integers(1, 40),
    updates=st.lists(
        st.lists(st.tuples(st.integers(0, 39), st.floats(0, 1e6) | st.just(0.0)), min_size=1, max_size=12),
        min_size=1,
        max_size=8,
    ),
    fractions=st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=20),
)
def test_the_tree_agrees_with_a_plain_array_after_any_batch_of_updates(num_leaves, updates, fractions):
    model = np.zeros(num_leaves)
    tree = make_tree(model)
    for batch in updates:
        indices = np.array([i % num_leaves for i, _ in batch], np.int64)
        values = np.array([v for _, v in batch])
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
