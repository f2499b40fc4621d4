"""A vectorized sum tree (with a min tree beside it) over a fixed number of leaves.

The trees are arrays in heap order: node 1 is the root, node ``i`` has children ``2i`` and ``2i + 1``,
and leaf ``j`` is node ``size + j`` with ``size`` a power of two. Updates and searches touch one level
per numpy call for a whole batch, so a batch of B costs O(B log n) work in O(log n) calls, with no
Python loop over the batch. The arrays may be memory-mapped files (so memory does not grow with
capacity); they are always rebuilt from the leaves, which are the only persistent truth.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def tree_size(num_leaves: int) -> int:
    """The number of leaves rounded up to a power of two."""
    return 1 << max(0, (num_leaves - 1).bit_length())


class SumTree:
    """Sums and minimums of non-negative leaf values; empty leaves are 0 (and +inf in the min tree)."""

    def __init__(self, sums: npt.NDArray[np.float64], minimums: npt.NDArray[np.float64]) -> None:
        """``sums`` and ``minimums`` are arrays of ``2 * size`` nodes whose leaves are already set."""
        self.size = len(sums) // 2
        self._sums = sums
        self._minimums = minimums
        self.rebuild()

    def rebuild(self) -> None:
        """Recompute every internal node from the leaves, one level at a time."""
        size, sums, minimums = self.size, self._sums, self._minimums
        minimums[size:][sums[size:] <= 0] = np.inf
        level = size
        while level > 1:
            parents = slice(level // 2, level)
            sums[parents] = sums[level : 2 * level : 2] + sums[level + 1 : 2 * level : 2]
            minimums[parents] = np.minimum(minimums[level : 2 * level : 2], minimums[level + 1 : 2 * level : 2])
            level //= 2

    @property
    def total(self) -> float:
        return float(self._sums[1])

    @property
    def minimum(self) -> float:
        """The smallest non-zero leaf (+inf when every leaf is 0)."""
        return float(self._minimums[1])

    def leaves(self, indices: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        return self._sums[self.size + indices]

    def set(self, indices: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> None:
        """Set leaves (0 empties a leaf); with repeated indices the last value wins."""
        if len(indices) == 0:
            return
        reversed_indices = indices[::-1]
        unique, last = np.unique(reversed_indices, return_index=True)
        values = np.asarray(values, np.float64)[::-1][last]
        nodes = unique + self.size
        self._sums[nodes] = values
        self._minimums[nodes] = np.where(values > 0, values, np.inf)
        while nodes[0] > 1:
            nodes = np.unique(nodes // 2)
            left, right = 2 * nodes, 2 * nodes + 1
            self._sums[nodes] = self._sums[left] + self._sums[right]
            self._minimums[nodes] = np.minimum(self._minimums[left], self._minimums[right])

    def find(self, targets: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """For each target in [0, total), the leaf whose cumulative range holds it (never an empty leaf)."""
        sums = self._sums
        nodes = np.ones(len(targets), np.int64)
        remaining = np.array(targets, np.float64)
        while nodes[0] < self.size:
            left = 2 * nodes
            left_sums = sums[left]
            # Rounding can put a target past the last non-empty leaf; never step into an empty subtree.
            go_right = ((remaining >= left_sums) & (sums[left + 1] > 0)) | (left_sums <= 0)
            remaining -= np.where(go_right, left_sums, 0.0)
            nodes = left + go_right
        return nodes - self.size
