"""Which steps a store holds: the contiguous range ``[oldest, transitions_added)`` (eviction is first in,
first out), and ``read``'s refusal of any other step, which names the steps a writer evicted."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mmreplay.errors import StepsEvictedError


def stored_steps(transitions_added: int, capacity: int, first_step: int = 0) -> range:
    """The steps of the stored transitions, oldest first, after ``transitions_added`` adds into
    ``capacity``, of which those before ``first_step`` were removed by a ``clear()``."""
    return range(max(first_step, transitions_added - capacity), transitions_added)


def check_stored(steps: npt.NDArray[np.int64], stored: range, first_step: int = 0) -> None:
    """Refuse steps outside ``stored``: ``IndexError`` naming the ``clear()`` for a step before
    ``first_step``; ``StepsEvictedError`` (an ``IndexError``) when every such step was added once and
    evicted since, naming them; else ``IndexError``."""
    outside = (steps < stored.start) | (steps >= stored.stop)
    if not outside.any():
        return
    cleared = (steps >= 0) & (steps < first_step)
    if cleared.any():
        raise IndexError(
            f"step {int(steps[cleared][0])} was removed by clear(): the store's steps start at {first_step} "
            f"since; stored steps are [{stored.start}, {stored.stop})"
        )
    message = f"step {int(steps[outside][0])} is not stored; stored steps are [{stored.start}, {stored.stop})"
    if ((steps >= 0) & (steps < stored.stop))[outside].all():
        evicted = np.unique(steps[outside]).tolist()
        raise StepsEvictedError(
            f"{message}: step(s) {_span_text(evicted)} were evicted (the writer wrapped past them)", steps=evicted
        )
    raise IndexError(message)


def _span_text(steps: list[int]) -> str:
    """``5``, or ``5..9`` for the smallest and largest of several steps."""
    return str(steps[0]) if len(steps) == 1 else f"{steps[0]}..{steps[-1]}"
