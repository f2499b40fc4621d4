"""MmreplayStorage against a plain model: what was extended is what is read at its slot, through any
sequence of extends, reopenings and dump/load round trips, with stacks or single frames, several envs,
any end schedule and a ring that wraps. The model is a dict of slot -> (trajectory, step, flags), and the
frames encode their own trajectory and step (tests/torchrl_transitions.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("torchrl")
from torchrl.data import TensorDictReplayBuffer

from mmreplay.torchrl import MmreplayStorage
from tests.test_torchrl import check
from tests.torchrl_transitions import FakeCollector

ENDS = st.sampled_from([(False, False)] * 4 + [(True, False), (False, True), (True, True)])
OPERATION = st.one_of(st.integers(1, 6), st.sampled_from(["reopen", "dump"]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_slot_reads_back_what_the_writer_put_there(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    envs = data.draw(st.integers(1, 3), "envs")
    stacked = data.draw(st.booleans(), "stacked")
    stack_size = data.draw(st.integers(1, 4), "stack_size")
    # Single frames rebuild CatFrames' stacks only while each trajectory keeps its lane: one per env.
    lanes = data.draw(st.integers(1, envs), "lanes") if stacked else envs
    capacity = data.draw(st.integers(max(envs, 2), 30), "capacity")
    collector = FakeCollector(envs=envs, stack_size=stack_size, stacked=stacked,
                              ends=data.draw(st.lists(ENDS, min_size=1, max_size=8), "ends"))
    directory = tmp_path_factory.mktemp("model")
    paths = (directory / f"s{i}.mmr" for i in range(100))

    def storage(mode: str = "w-", path: Path | None = None) -> MmreplayStorage:
        return MmreplayStorage(capacity, path or next(paths), stack_size=stack_size, num_envs=lanes, mode=mode)

    rb = TensorDictReplayBuffer(storage=storage())
    by_slot: dict[int, tuple[int, int, bool, bool]] = {}
    written = 0
    for operation in data.draw(st.lists(OPERATION, min_size=1, max_size=8), "operations"):
        if operation in ("reopen", "dump") and not stacked and not every_going_trajectory_is_stored(collector, by_slot):
            # A reopened store, and a storage loaded from a dump, rebuild each env's episode in progress
            # from the stored transitions: an env whose every transition was evicted starts a new episode,
            # so single frames restart their stacks there (stacks written whole are read back exactly
            # regardless).
            continue
        if operation == "reopen":
            rb.storage.close()
            rb = TensorDictReplayBuffer(storage=storage("a", rb.storage.path))
            rb.writer.load_state_dict(rb.storage.writer_state())
        elif operation == "dump":
            if not written:
                continue
            rb.dumps(directory / "checkpoint")
            rb = TensorDictReplayBuffer(storage=storage())
            rb.loads(directory / "checkpoint")
        else:
            before = len(collector.rows)
            index = rb.extend(collector.next_batch(operation))
            new = collector.rows[before:]
            assert index.tolist() == [(written + i) % capacity for i in range(len(new))]
            by_slot.update(zip(index.tolist(), new))
            written += len(new)
        assert len(rb) == min(written, capacity)
        if written:
            check(rb[:], [by_slot[slot] for slot in range(len(rb))], stack_size)


def every_going_trajectory_is_stored(collector: FakeCollector, by_slot: dict[int, tuple[int, int, bool, bool]]) -> bool:
    """Whether each env's trajectory in progress still has its newest transition stored."""
    stored = {(trajectory, step) for trajectory, step, _, _ in by_slot.values()}
    return all((env.trajectory, env.step - 1) in stored for env in collector._envs if env.step > 0)
