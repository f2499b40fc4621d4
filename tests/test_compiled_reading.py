"""The compiled index helpers of the read path equal their numpy definitions, bit for bit, on any
bytes: ``gather_rows`` (TransitionTable.read's copy and checksum check) and ``follow_links``
(``stacking.transition_frames`` over a frame table), also at steps that wrap or go negative, as a
corrupt link can make them."""

from __future__ import annotations

import numpy as np
import pytest
from extension_status import absent_reason
from hypothesis import given, settings
from hypothesis import strategies as st

from mmreplay import extensions, stacking

_lz4batch = extensions.load("_lz4batch")
pytestmark = pytest.mark.skipif(_lz4batch is None, reason=absent_reason("_lz4batch"))

STEP_MIX = 2654435761


def row_checksums(rows: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """transition_table._checksums, restated: bytes after the first 8 weighted 1, 3, 5, ..., plus the
    step times Knuth's constant, mod 2**32."""
    weights = np.arange(1, 2 * (rows.shape[1] - 8), 2, dtype=np.uint64)
    sums = rows[:, 8:].astype(np.uint64) @ weights + steps.astype(np.uint64) * np.uint64(STEP_MIX)
    return (sums & np.uint64(0xFFFFFFFF)).astype(np.uint32)


@settings(max_examples=60, deadline=None)
@given(
    row_size=st.integers(9, 40),
    slots=st.integers(1, 50),
    steps=st.lists(st.integers(-(2**40), 2**40), min_size=0, max_size=40),
    seed=st.integers(0, 2**32 - 1),
    valid=st.floats(0, 1),
)
def test_gather_rows_copies_each_steps_row_and_finds_the_first_that_fails(
    row_size, slots, steps, seed, valid
) -> None:
    rng = np.random.default_rng(seed)
    table = rng.integers(0, 256, (slots, row_size), dtype=np.uint8)
    step_array = np.array(steps, np.int64)
    # make most rows valid for the step they are read at (a slot read at two steps can match only one)
    fix = rng.random(len(step_array)) < valid
    for i in np.flatnonzero(fix):
        slot = step_array[i] % slots
        checksum = row_checksums(table[slot : slot + 1], step_array[i : i + 1])
        table[slot, :4] = np.frombuffer(checksum.tobytes(), np.uint8)
    expected = table[step_array % slots]
    out = np.full((len(step_array), row_size), 0xEE, np.uint8)
    first_bad = _lz4batch.gather_rows(table, slots, step_array, out)
    np.testing.assert_array_equal(out, expected)
    bad = expected[:, :4].copy().view("<u4").reshape(-1) != row_checksums(expected, step_array)
    assert first_bad == (int(np.argmax(bad)) if bad.any() else -1)


@settings(max_examples=60, deadline=None)
@given(
    slots=st.integers(1, 64),
    columns=st.integers(1, 6),
    next_frames=st.lists(st.integers(0, 2**40), min_size=0, max_size=30),
    seed=st.integers(0, 2**32 - 1),
    big_links=st.booleans(),
)
def test_follow_links_equals_transition_frames_over_the_same_table(
    slots, columns, next_frames, seed, big_links
) -> None:
    rng = np.random.default_rng(seed)
    entry = np.dtype([("position", "<u8"), ("length", "<u2"), ("checksum", "<u4"), ("prev_delta", "<u4")])
    table = np.zeros(slots, entry)
    table["prev_delta"] = rng.integers(0, 2**32 if big_links else 4, slots, dtype=np.uint64)
    frames = np.array(next_frames, np.int64)

    def prev_deltas(steps: np.ndarray) -> np.ndarray:
        return table["prev_delta"][steps % slots].astype(np.int64)

    expected = stacking.transition_frames(frames, prev_deltas, columns - 1)
    out = np.empty((len(frames), columns), np.int64)
    _lz4batch.follow_links(table, slots, entry.itemsize, entry.fields["prev_delta"][1], frames, out)
    np.testing.assert_array_equal(out, expected)


@settings(max_examples=60, deadline=None)
@given(
    spec=st.sampled_from([((), "<i8", 256), ((2,), "<f4", 300), ((), "u1", 3), ((3, 2), "<i2", 70_000)]),
    slots=st.integers(1, 50),
    steps=st.lists(st.integers(0, 2**40), min_size=0, max_size=40),
    seed=st.integers(0, 2**32 - 1),
    valid=st.floats(0, 1),
)
def test_read_fields_unpacks_what_read_gives_and_fails_at_the_same_row(tmp_path_factory, spec, slots, steps, seed, valid) -> None:
    """``TransitionTable.read_fields`` through ``gather_fields`` against its numpy definition (``read``,
    then the fields), on rows of random bytes that mostly match their checksums."""
    from mmreplay.transition_table import RowChecksumError, TransitionTable, row_dtype

    action_shape, action_dtype, num_envs = spec
    dtype = row_dtype(action_shape, np.dtype(action_dtype), num_envs)
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (slots, dtype.itemsize), dtype=np.uint8)
    step_array = np.array(steps, np.int64)
    for i in np.flatnonzero(rng.random(len(step_array)) < valid):
        slot = step_array[i] % slots
        raw[slot, :4] = np.frombuffer(row_checksums(raw[slot : slot + 1], step_array[i : i + 1]).tobytes(), np.uint8)
    path = tmp_path_factory.mktemp("rows") / "t.tbl"
    path.write_bytes(raw.tobytes())  # the table file, as a writer would have left it
    table = TransitionTable(path, dtype=dtype, row_slots=slots, writable=False)
    assert table._gather_fields  # the compiled path is the one under test
    try:
        rows = table.read(step_array)
    except RowChecksumError as error:
        with pytest.raises(RowChecksumError, match=f"transition {error.step} fails"):
            table.read_fields(step_array)
        return
    fields = table.read_fields(step_array)
    np.testing.assert_array_equal(fields.next_frames, step_array + rows["frame_lead"])
    np.testing.assert_array_equal(fields.action.view(np.uint8), rows["action"].astype(fields.action.dtype).view(np.uint8))
    np.testing.assert_array_equal(fields.reward.view(np.uint32), rows["reward"].view(np.uint32))  # nan bits too
    np.testing.assert_array_equal(fields.terminated, (rows["flags"] & 1) != 0)
    np.testing.assert_array_equal(fields.truncated, (rows["flags"] & 2) != 0)
    np.testing.assert_array_equal(fields.env_index, rows["env"].astype(np.int64))
    table.close()
