"""Priorities commit with the header or not at all: after flushes that failed (an injected ENOSPC or EIO
where the header is written) and a crash in a later flush, the store reopens with exactly the
priorities of the header it reopens at.

The error is injected at the one place a commit becomes visible, ``format.write_header`` (a full disk
hits it as the header's temporary file is written); the crash is a SIGKILL of a forked writer in the
middle of a flush, after its priorities were written and before its header.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from mmreplay import PrioritizedSampler, ReplayStore
from mmreplay.disk import header as format

fork = multiprocessing.get_context("fork")
STEPS = np.arange(20)


def fill(path: Path) -> ReplayStore:
    store = ReplayStore.create(path, frame_shape=(2, 2), capacity=32, stack_size=1, sampler=PrioritizedSampler(alpha=1.0))
    for t in STEPS.tolist():
        store.add(np.full((1, 2, 2), t, np.uint8), 0, 0.0, np.full((1, 2, 2), t + 1, np.uint8), False, False)
    return store


def priorities_of(path: Path) -> np.ndarray:
    """Each stored step's priority relative to the smallest (weights with beta=1 are p_min / p_i)."""
    with ReplayStore.open(path) as store:
        return 1.0 / store.sampler.weights(STEPS, beta=1.0)


def failing(error: int):  # type: ignore[no-untyped-def]
    def write_header(*_: object) -> None:
        raise OSError(error, os.strerror(error))
    return write_header


def killing(*_: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _writer(path: Path, failures: list[int]) -> None:
    store = ReplayStore.open(path, "r+", commit_interval_s=None)
    original = format.write_header
    for round, error in enumerate(failures):
        store.update_priorities(STEPS[round::3], np.full(len(STEPS[round::3]), 100.0 + round))
        format.write_header = failing(error)  # type: ignore[assignment]
        try:
            store.flush()
        except OSError:
            pass
        format.write_header = original
    store.update_priorities(STEPS[1::2], np.full(10, 7.0))
    format.write_header = killing  # type: ignore[assignment]
    store.flush()


@pytest.mark.parametrize("failures", [[errno.ENOSPC], [errno.EIO, errno.ENOSPC], [errno.ENOSPC] * 3])
def test_a_crash_after_failed_flushes_reopens_with_the_priorities_of_the_last_header(
    tmp_path: Path, failures: list[int]
) -> None:
    path = tmp_path / "s.mmr"
    store = fill(path)
    store.update_priorities(STEPS[::2], np.full(10, 3.0))
    store.close()  # commit N: these priorities
    want = priorities_of(path)
    writer = fork.Process(target=_writer, args=(path, failures))
    writer.start()
    writer.join()
    assert writer.exitcode == -signal.SIGKILL
    np.testing.assert_array_equal(priorities_of(path), want)


def test_a_failed_flush_keeps_the_priorities_and_the_next_flush_commits_them(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "s.mmr"
    store = fill(path)
    store.flush()
    store.update_priorities(STEPS[:5], np.full(5, 9.0))
    monkeypatch.setattr(format, "write_header", failing(errno.ENOSPC))
    with pytest.raises(OSError, match="No space left on device"):
        store.flush()
    monkeypatch.undo()
    assert priorities_of(path).tolist() == [1.0] * 20  # the header's: none of the updates
    store.close()
    np.testing.assert_allclose(priorities_of(path), [(9.0 + 1e-6) / (1.0 + 1e-6)] * 5 + [1.0] * 15, rtol=1e-6)
