"""``update_priorities`` of a writer: what a training loop passes goes to a prioritized sampler whole, which
checks it in the same compiled call that applies it; anything else, or anything it refuses, is checked
here, naming what is wrong, before the sampler applies it."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from mmreplay.errors import ClosedStoreError
from mmreplay.sampling.samplers import Sampler
from mmreplay.validation import parse_priorities, parse_steps

_INT64, _FLOAT64 = np.dtype(np.int64), np.dtype(np.float64)  # numpy's builtin dtypes are singletons

CheckedUpdate = Callable[..., bool]  # PrioritizedSampler.update_priorities_checked(index, priority, *, added)


def checked_update_of(sampler: Sampler) -> CheckedUpdate | None:
    """A sampler's update that checks and applies priorities in one call, if it has one (PrioritizedSampler)."""
    return getattr(sampler, "update_priorities_checked", None)


def update_priorities(
    sampler: Sampler, checked_update: CheckedUpdate | None, lock: threading.RLock | threading.Lock,
    index: npt.ArrayLike, priority: npt.ArrayLike, *, added: int, first_step: int,
) -> None:
    """Set the priorities of the steps ``index`` (drawn from ``[first_step, added)``: the steps added since
    the last ``clear()``) under the files' ``lock``."""
    if (
        checked_update is not None
        and type(index) is np.ndarray
        and type(priority) is np.ndarray
        and index.dtype is _INT64
        and priority.dtype is _FLOAT64
        and index.ndim == 1
        and priority.shape == index.shape
        and index.flags.c_contiguous
        and priority.flags.c_contiguous
        # after a clear(), an index from before it is refused below (the compiled check knows [0, added))
        and (first_step == 0 or int(index.min(initial=added)) >= first_step)
    ):
        with lock:
            if checked_update(index, priority, added=added):
                return
    steps = parse_steps(index, "index")
    priorities = parse_priorities(priority, like=steps)
    never = (steps < 0) | (steps >= added)
    if never.any():
        raise ValueError(f"index {int(steps[never][0])} was never added; transitions added so far: {added}")
    cleared = steps < first_step
    if cleared.any():  # steps keep counting across clear(): an older index is refused, never reused
        raise ClosedStoreError(
            f"update_priorities: index {int(steps[cleared][0])} was drawn before clear(): the store's steps "
            f"start at {first_step} since; sample a new batch"
        )
    with lock:
        sampler.update_priorities(steps, priorities)
