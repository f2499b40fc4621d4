"""A vectorized sum tree (with a min tree beside it) over a fixed number of leaves.

The trees are arrays in heap order: node 1 is the root, node ``i`` has children ``2i`` and ``2i + 1``,
and leaf ``j`` is node ``size + j`` with ``size`` a power of two. Updates and searches work one level at
a time for a whole batch (a few numpy calls per level, none per element), so a batch of B costs
O(B log n) work in O(log n) calls. The arrays may be memory-mapped files (so memory does not grow with
capacity); they can always be rebuilt from the leaves.

Every internal node is the sum (the minimum) of its two children computed as ``left + right``, whatever
updated it, so a tree updated leaf by leaf is bit for bit the tree rebuilt from its leaves.

At a batch of 32 the numpy calls cost far more than the work (one set per level, 20 levels at a million
leaves), so ``find``, ``set`` and the settling of filled ranges run in the compiled extension
``mmreplay._sumtree`` when it was built and the arrays are native, aligned, C-contiguous float64. It
makes the same double operations as the numpy code here, which stays as the fallback: both give the same
nodes and find the same leaves, bit for bit. ``ACCELERATED`` says whether the extension is there.

A prioritized batch takes one compiled call for each of its three steps: ``draw`` (its steps),
``weights`` (their importance weights) and ``update`` (their new priorities). Their powers are the C
library's ``pow`` on both paths (``c_powers``): numpy's ``np.power`` may take a vectorized pow (SVML
on AVX-512 CPUs) whose last bit differs from it for ~5% of doubles.
"""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np
import numpy.typing as npt

from mmreplay import extensions

TOP_LEVEL = 10  # the tree's top (levels up to this one, 2^10 nodes wide) is handled whole, not by paths

_sumtree: ModuleType | None = extensions.load("_sumtree")

ACCELERATED: bool = _sumtree is not None


def c_powers(bases: npt.NDArray[np.float64], exponent: float) -> npt.NDArray[np.float64]:
    """``bases ** exponent`` element by element, as the C library's ``pow`` gives it (what the compiled
    calls use): +inf for 0 to a negative power and for an overflow, where ``math.pow`` raises. One Python
    step per element: the fallback's price for agreeing with the compiled code to the bit."""
    return np.fromiter((_c_pow(base, exponent) for base in bases.tolist()), np.float64, len(bases))


def _c_pow(base: float, exponent: float) -> float:
    try:
        return math.pow(base, exponent)
    except (ValueError, OverflowError):  # pow's pole (0 ** -y) and overflow: +inf for the bases here (>= 0)
        return math.inf


def tree_size(num_leaves: int) -> int:
    """The number of leaves rounded up to a power of two."""
    return 1 << max(0, (num_leaves - 1).bit_length())


class SumTree:
    """Sums and minimums of non-negative leaf values; empty leaves are 0 (and +inf in the min tree).

    ``fill`` (contiguous leaves to one value: transitions added or evicted) only writes the leaves and
    defers their ancestors until the tree is next read, so many small adds between two samples cost one
    update of the ancestors. ``set`` (scattered leaves: new priorities) updates the ancestors at once.
    """

    def __init__(
        self,
        sums: npt.NDArray[np.float64],
        minimums: npt.NDArray[np.float64],
        *,
        top_level: int = TOP_LEVEL,
        accelerated: bool = ACCELERATED,
    ) -> None:
        """``sums`` and ``minimums`` are arrays of ``2 * size`` nodes; the leaves of ``sums`` are already set.

        Levels up to ``top_level`` are narrow: there one numpy call over a whole level is cheaper than the
        several calls per level that paths through the tree cost (it changes the speed, not the results).
        ``accelerated=False`` keeps to the numpy code; otherwise the extension runs the hot loops where the
        arrays allow it (``accelerated`` says whether it does), with the same results.
        """
        if accelerated and _sumtree is None:
            raise ValueError("accelerated=True but mmreplay._sumtree is not built (sum_tree.ACCELERATED is False)")
        usable = accelerated and all(_compiled_layout(nodes) for nodes in (sums, minimums))
        self._compiled = _sumtree if usable else None  # the extension, when this tree runs on it
        self.size = len(sums) // 2
        self._depth = self.size.bit_length() - 1
        self._top = min(self._depth, top_level)
        self._sums = sums
        self._minimums = minimums
        self._shifts = np.arange(self._depth - self._top + 1, dtype=np.int64)[:, None]
        self._top_levels = [  # the views that recompute each level of the top from the one below it
            (sums[first : 2 * first : 2], sums[first + 1 : 2 * first : 2], sums[first // 2 : first],
             minimums[first : 2 * first : 2], minimums[first + 1 : 2 * first : 2], minimums[first // 2 : first])
            for first in (1 << level for level in range(self._top, 0, -1))
        ]
        self._stale: list[list[int]] = []  # leaf ranges [start, stop) whose ancestors are out of date
        self.rebuild()

    def rebuild(self) -> None:
        """Recompute the min leaves and every internal node from the leaves, one level at a time."""
        size, sums, minimums = self.size, self._sums, self._minimums
        np.copyto(minimums[size:], sums[size:])
        minimums[size:][sums[size:] <= 0] = np.inf
        first = size
        while first > 1 << self._top:
            children = slice(first, 2 * first, 2), slice(first + 1, 2 * first, 2)
            np.add(sums[children[0]], sums[children[1]], out=sums[first // 2 : first])
            np.minimum(minimums[children[0]], minimums[children[1]], out=minimums[first // 2 : first])
            first //= 2
        self._rebuild_top()
        self._stale.clear()

    def _rebuild_top(self) -> None:
        """Recompute the levels above the top level, two numpy calls per level."""
        for left_sums, right_sums, sums, left_minimums, right_minimums, minimums in self._top_levels:
            np.add(left_sums, right_sums, out=sums)
            np.minimum(left_minimums, right_minimums, out=minimums)

    @property
    def accelerated(self) -> bool:
        """Whether ``find``, ``set`` and settling run in the extension (else in numpy, with the same results)."""
        return self._compiled is not None

    @property
    def total(self) -> float:
        self._settle()
        return float(self._sums[1])

    @property
    def minimum(self) -> float:
        """The smallest non-zero leaf (+inf when every leaf is 0)."""
        self._settle()
        return float(self._minimums[1])

    @property
    def leaf_values(self) -> npt.NDArray[np.float64]:
        """The leaves, as a view (read it, never write it)."""
        return self._sums[self.size :]

    def leaves(self, indices: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        return self._sums[self.size + indices]

    def fill(self, start: int, stop: int, value: float) -> None:
        """Set leaves ``[start, stop)`` to ``value`` (0 empties them); their ancestors follow lazily."""
        if start >= stop:
            return
        self._sums[self.size + start : self.size + stop] = value
        self._minimums[self.size + start : self.size + stop] = value if value > 0 else np.inf
        for stale in self._stale:
            if start <= stale[1] and stale[0] <= stop:  # overlapping or adjacent: one range
                stale[0], stale[1] = min(start, stale[0]), max(stop, stale[1])
                return
        self._stale.append([start, stop])

    def set(self, indices: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> None:
        """Set leaves (0 empties a leaf); with repeated indices the last value wins."""
        if len(indices) == 0:
            return
        self._settle()
        if self._compiled is not None:
            # In call order, so the last of repeated indices wins; then every path up to the root.
            self._compiled.set(
                self._sums,
                self._minimums,
                np.ascontiguousarray(indices, np.int64),
                np.ascontiguousarray(values, np.float64),
            )
            return
        indices = np.asarray(indices, np.int64)
        values = np.asarray(values, np.float64)
        if len(indices) > 1:
            # Sort once; a stable sort keeps repeats in call order, so the last of each run wins.
            order = np.argsort(indices, kind="stable")
            ordered = indices[order]
            last = np.empty(len(ordered), np.bool_)
            last[-1] = True
            np.not_equal(ordered[1:], ordered[:-1], out=last[:-1])
            indices, values = ordered[last], values[order[last]]
        nodes = indices + self.size
        minimums = np.where(values > 0, values, np.inf)
        self._sums[nodes] = values
        self._minimums[nodes] = minimums
        self._update_ancestors(nodes, values, minimums)

    def _update_ancestors(
        self, nodes: npt.NDArray[np.int64], sums: npt.NDArray[np.float64], minimums: npt.NDArray[np.float64]
    ) -> None:
        """Recompute the ancestors of ``nodes`` (distinct leaves holding ``sums`` and ``minimums``).

        Up to the top level, each parent on a path is its child plus that child's sibling. Where two paths
        meet, both compute the same parent from children that the level before already wrote, so repeats
        are harmless. The top is then recomputed whole.
        """
        path = nodes >> self._shifts  # row k: the ancestors k levels up (row 0: the nodes themselves)
        siblings = path[:-1] ^ 1
        tree_sums, tree_minimums = self._sums, self._minimums
        for level in range(self._depth - self._top):
            sums = sums + tree_sums[siblings[level]]
            tree_sums[path[level + 1]] = sums
            minimums = np.minimum(minimums, tree_minimums[siblings[level]])
            tree_minimums[path[level + 1]] = minimums
        self._rebuild_top()

    def _settle(self) -> None:
        """Bring the ancestors of filled leaf ranges up to date: two numpy calls per level and range up to
        the top level, then the top whole."""
        if not self._stale:
            return
        sums, minimums = self._sums, self._minimums
        if self._compiled is not None:
            for start, stop in self._stale:  # each range's ancestors up to the root, level by level
                self._compiled.settle(sums, minimums, start, stop)
            self._stale.clear()
            return
        top = 1 << self._top
        for start, stop in self._stale:
            low, high = self.size + start, self.size + stop - 1  # nodes, inclusive
            while low >= 2 * top:
                low, high = low // 2, high // 2
                children = slice(2 * low, 2 * high + 2, 2), slice(2 * low + 1, 2 * high + 2, 2)
                np.add(sums[children[0]], sums[children[1]], out=sums[low : high + 1])
                np.minimum(minimums[children[0]], minimums[children[1]], out=minimums[low : high + 1])
        self._rebuild_top()
        self._stale.clear()

    def draw(self, rng: np.random.Generator, count: int, *, first_step: int, slots: int) -> npt.NDArray[np.int64]:
        """``count`` steps drawn with replacement, each slot with probability leaf / total: a target
        ``u * total`` for each (``u`` from ``rng.random``), the leaf that holds it (``find``), and the
        step of that slot counting from ``first_step`` (``first_step + (leaf - first_step) % slots``).
        Raises ``ValueError`` when every leaf is empty."""
        self._settle()
        if self._compiled is not None:
            steps = np.empty(count, np.int64)
            bit_generator = rng.bit_generator
            with bit_generator.lock:
                self._compiled.draw(bit_generator, self._sums, self._top, first_step, slots, steps)
            return steps
        targets = rng.random(count)
        targets *= float(self._sums[1])  # in place: the same products as rng.random(count) * total
        steps = self.find(targets)
        steps -= first_step
        steps %= slots
        steps += first_step
        return steps

    def weights(self, steps: npt.NDArray[np.int64], *, slots: int, beta: float) -> npt.NDArray[np.float32]:
        """``(leaf / minimum) ** -beta`` of each step's slot (``step % slots``), as float32: importance
        weights normalised by the largest any non-empty leaf gets (an empty leaf's is +inf)."""
        self._settle()
        if self._compiled is not None:
            weights = np.empty(len(steps), np.float32)
            self._compiled.weights(self._sums, self._minimums, np.ascontiguousarray(steps, np.int64), slots, beta,
                                   weights)
            return weights
        with np.errstate(over="ignore"):  # a huge leaf over a tiny minimum is +inf, as in C
            ratios = self.leaves(steps % slots) / float(self._minimums[1])
        return c_powers(ratios, -beta).astype(np.float32)

    def update(
        self,
        steps: npt.NDArray[np.int64],
        priorities: npt.NDArray[np.float64],
        *,
        stored: range,
        slots: int,
        alpha: float,
        epsilon: float,
    ) -> float | None:
        """Set the leaves of the steps inside ``stored`` (slot ``step % slots``) to ``(priority +
        epsilon) ** alpha``, the last of repeats winning; steps outside are skipped (evicted since they
        were drawn). Returns the largest priority set (numpy's max), None when none was."""
        self._settle()
        if self._compiled is not None:
            largest: float | None = self._compiled.update(
                self._sums, self._minimums, np.ascontiguousarray(steps, np.int64),
                np.ascontiguousarray(priorities, np.float64), (stored.start, stored.stop, slots), (alpha, epsilon),
            )
            return largest
        inside = (steps >= stored.start) & (steps < stored.stop)
        if not inside.all():
            steps, priorities = steps[inside], priorities[inside]
        if len(steps) == 0:
            return None
        self.set(steps % slots, c_powers(priorities + epsilon, alpha))
        return float(priorities.max())

    def update_checked(
        self,
        steps: npt.NDArray[np.int64],
        priorities: npt.NDArray[np.float64],
        *,
        added: int,
        stored: range,
        slots: int,
        alpha: float,
        epsilon: float,
    ) -> tuple[bool, float | None]:
        """``update`` in one compiled call with the store's checks of its arguments made in it: every step
        in ``[0, added)`` and every priority finite and >= 0. (True, ``update``'s result) when they hold;
        (False, None), with nothing written, when one does not, or where the compiled call is not there
        (the caller then checks, names what is wrong, and calls ``update``). ``steps`` int64 and
        ``priorities`` float64 arrays of one length, C-contiguous."""
        if self._compiled is None:
            return False, None
        self._settle()
        result: float | None | bool = self._compiled.update(
            self._sums, self._minimums, steps, priorities, (stored.start, stored.stop, slots), (alpha, epsilon), added
        )
        if result is False:
            return False, None
        return True, None if result is None else float(result)

    def find(self, targets: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """For each target in [0, total), the leaf whose cumulative range holds it (never an empty leaf).

        Raises ``ValueError`` when every leaf is empty (there is nothing to find).
        """
        self._settle()
        sums = self._sums
        if not sums[1] > 0:
            raise ValueError("cannot search a sum tree whose leaves are all empty")
        if self._compiled is not None:
            targets = np.ascontiguousarray(targets, np.float64)
            leaves = np.empty(targets.shape, np.int64)
            self._compiled.find(sums, targets, leaves, self._top)
            return leaves
        # The top level at once: the cumulative sums of its nodes, searched.
        top = 1 << self._top
        cumulative = np.zeros(top + 1)
        np.cumsum(sums[top : 2 * top], out=cumulative[1:])
        remaining = np.array(targets, np.float64)
        found = np.searchsorted(cumulative[1:], remaining, side="right")
        np.minimum(found, top - 1, out=found)  # a target rounded past the last node (an empty one is redone)
        remaining -= cumulative[found]
        nodes = found + top
        for _ in range(self._depth - self._top):
            nodes <<= 1
            left = sums[nodes]
            go_right = remaining >= left
            np.subtract(remaining, left, out=remaining, where=go_right)
            nodes += go_right
        # Rounding can carry a target past the last non-empty leaf of a subtree, into an empty one:
        # rare, so those targets alone take the careful descent.
        empty = sums[nodes] <= 0
        if empty.any():
            nodes[empty] = self._find_guarded(np.asarray(targets, np.float64)[empty])
        return nodes - self.size

    def _find_guarded(self, targets: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """The descent that never steps into an empty subtree (nodes, not leaves)."""
        sums = self._sums
        nodes = np.ones(len(targets), np.int64)
        remaining = np.array(targets, np.float64)
        for _ in range(self._depth):
            left = 2 * nodes
            left_sums = sums[left]
            go_right = ((remaining >= left_sums) & (sums[left + 1] > 0)) | (left_sums <= 0)
            remaining -= np.where(go_right, left_sums, 0.0)
            nodes = left + go_right
        return nodes


def _compiled_layout(nodes: npt.NDArray[np.float64]) -> bool:
    """Whether the extension can take ``nodes`` as it is: native, aligned, C-contiguous, writable float64."""
    flags = nodes.flags
    return nodes.dtype == np.float64 and flags.c_contiguous and flags.aligned and flags.writeable
