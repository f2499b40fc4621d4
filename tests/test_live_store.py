"""A live store: readers and the command line work while a writer appends and wraps.

The stress run (``live_stress.py``) deschedules reader processes in bursts (SIGSTOP/SIGCONT) while they
open, refresh, read, sample, list episodes, verify and export; every outcome must be ``ok`` or a
``StepsEvictedError`` naming the steps the writer evicted, never a corruption error on this healthy
store. Longer runs: ``python tests/live_stress.py --seconds 120``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from live_stress import failures, run

from mmreplay import ReplayStore, StepsEvictedError


def test_readers_descheduled_in_bursts_and_the_cli_never_fail_on_a_live_store() -> None:
    counts = run(seconds=8.0, readers=2, rate=3000.0, cli_rounds=1)
    assert failures(counts) == {}
    assert counts["SIGSTOP bursts"] > 10 and counts["transitions written"] > 600  # it wrapped


def test_reading_steps_the_writer_evicted_since_names_them(tmp_path: Path) -> None:
    frame = np.zeros((1, 2, 2), np.uint8)
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(2, 2), capacity=8, stack_size=1) as writer:
        for t in range(8):
            writer.add(frame, t, 0.0, frame, False, False)
        writer.flush()
        with ReplayStore.open(tmp_path / "s.mmr") as reader:
            asked = reader.stored_steps[:3]  # steps 0, 1, 2
            for t in range(4):
                writer.add(frame, t, 0.0, frame, False, False)
            writer.flush()
            with pytest.raises(StepsEvictedError, match=r"step\(s\) 0\.\.2 were evicted") as caught:
                reader.read(asked)
            assert caught.value.steps == [0, 1, 2]
            assert reader.read(reader.stored_steps[-3:]).index.tolist() == [9, 10, 11]


def test_a_step_never_added_is_an_index_error_and_not_an_eviction(tmp_path: Path) -> None:
    frame = np.zeros((1, 2, 2), np.uint8)
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(2, 2), capacity=8, stack_size=1) as store:
        store.add(frame, 0, 0.0, frame, False, False)
        with pytest.raises(IndexError, match=r"step 5 is not stored; stored steps are \[0, 1\)$") as caught:
            store.read([5])
        assert not isinstance(caught.value, StepsEvictedError)
