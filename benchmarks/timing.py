"""How the benchmarks time sampling: batches per second over a window, after an untimed warm-up."""

from __future__ import annotations

import time
from collections.abc import Callable

WARMUP_SECONDS = 0.25


def batches_per_second(sample: Callable[[], object], seconds: float, *, warmup: float = WARMUP_SECONDS) -> float:
    """Call ``sample`` for ``warmup`` seconds untimed, then for ``seconds``; the timed calls per second.

    The warm-up pays for page faults and for the allocator's growing mmap threshold (a batch of 4-stacks
    is ~1.8 MB), not for the buffer. Calls are timed in groups of 10, so a window ends at most 9 calls late.
    """
    clock = time.perf_counter
    start = clock()
    while clock() - start < min(warmup, seconds):
        sample()
    batches, start = 0, clock()
    while (elapsed := clock() - start) < seconds:
        for _ in range(10):
            sample()
        batches += 10
    return batches / elapsed
