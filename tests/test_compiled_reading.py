"""The compiled index helpers of the read path equal their numpy definitions, bit for bit, on any
bytes: ``gather_rows`` (TransitionTable.read's copy and checksum check) and ``follow_links``
(``stacking.transition_frames`` over a frame table), also at steps that wrap or go negative, as a
corrupt link can make them."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest
import store_files
from extension_status import absent_reason
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mmreplay import extensions
from mmreplay.rows import stacking
from mmreplay.store import internals

_lz4batch = extensions.load("_lz4batch")
pytestmark = pytest.mark.skipif(_lz4batch is None, reason=absent_reason("_lz4batch"))

STEP_MIX = 2654435761


def row_checksums(rows: np.ndarray, steps: np.ndarray, version_3: bool = False) -> np.ndarray:
    """The row checksum, restated: the CRC-32 of the step (8 little-endian bytes) then the bytes after
    the first 8; in format version 3, those bytes weighted 1, 3, 5, ..., plus the step times Knuth's
    constant, mod 2**32."""
    if not version_3:
        return np.array(
            [zlib.crc32(row[8:].tobytes(), zlib.crc32(int(step).to_bytes(8, "little", signed=True)))
             for row, step in zip(rows, steps)],
            np.uint32,
        )
    weights = np.arange(1, 2 * (rows.shape[1] - 8), 2, dtype=np.uint64)
    sums = rows[:, 8:].astype(np.uint64) @ weights + steps.astype(np.uint64) * np.uint64(STEP_MIX)
    return (sums & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def row_checksums_skipping(rows: np.ndarray, steps: np.ndarray, skip: int) -> np.ndarray:
    """``row_checksums`` of versions 4 and 5 over the bytes after the first ``skip`` (version 5's rows leave
    out the checksum and a next_delta of 2 to 4 bytes)."""
    return np.array(
        [zlib.crc32(row[skip:].tobytes(), zlib.crc32(int(step).to_bytes(8, "little", signed=True)))
         for row, step in zip(rows, steps)],
        np.uint32,
    )


@settings(max_examples=60, deadline=None)
@given(
    row_size=st.integers(9, 40),
    slots=st.integers(1, 50),
    steps=st.lists(st.integers(-(2**40), 2**40), min_size=0, max_size=40),
    seed=st.integers(0, 2**32 - 1),
    valid=st.floats(0, 1),
)
@pytest.mark.parametrize("version_3", [False, True])
def test_gather_rows_copies_each_steps_row_and_finds_the_first_that_fails(
    row_size, slots, steps, seed, valid, version_3
) -> None:
    rng = np.random.default_rng(seed)
    table = rng.integers(0, 256, (slots, row_size), dtype=np.uint8)
    step_array = np.array(steps, np.int64)
    # make most rows valid for the step they are read at (a slot read at two steps can match only one)
    fix = rng.random(len(step_array)) < valid
    for i in np.flatnonzero(fix):
        slot = step_array[i] % slots
        checksum = row_checksums(table[slot : slot + 1], step_array[i : i + 1], version_3)
        table[slot, :4] = np.frombuffer(checksum.tobytes(), np.uint8)
    expected = table[step_array % slots]
    out = np.full((len(step_array), row_size), 0xEE, np.uint8)
    first_bad = _lz4batch.gather_rows(table, slots, step_array, out, version_3)
    np.testing.assert_array_equal(out, expected)
    bad = expected[:, :4].copy().view("<u4").reshape(-1) != row_checksums(expected, step_array, version_3)
    assert first_bad == (int(np.argmax(bad)) if bad.any() else -1)


@settings(max_examples=60, deadline=None)
@given(
    slots=st.integers(1, 64),
    columns=st.integers(1, 6),
    next_frames=st.lists(st.integers(0, 2**40), min_size=0, max_size=30),
    seed=st.integers(0, 2**32 - 1),
    big_links=st.booleans(),
    version=st.sampled_from([4, 5]),
    references=st.booleans(),
)
# one slot: prev_delta has one bit (0 or 1), the smallest links field
@example(slots=1, columns=1, next_frames=[0, 1], seed=0, big_links=False, version=5, references=False)
def test_follow_links_equals_transition_frames_over_the_same_table(
    slots, columns, next_frames, seed, big_links, version, references
) -> None:
    """Over entries of format version 4 (prev_delta u32) and 5 (prev_delta in the low bits of ``links``,
    ref_delta above it in a reference ring's)."""
    from mmreplay.frames.frame_entries import EntryFormat

    rng = np.random.default_rng(seed)
    entries = EntryFormat(7056, frame_slots=slots, version=version, max_distance=8192 if references else None,
                          extra=0)
    largest = (1 << entries.prev_bits) if version == 5 else 2**32
    prevs = rng.integers(0, largest if big_links else min(4, largest), slots, dtype=np.int64)
    refs = rng.integers(0, 8193, slots, dtype=np.int64) if references else np.zeros(slots, np.int64)
    table = entries.pack(np.zeros(slots, np.uint64), np.zeros(slots, np.int64), np.zeros(slots, np.uint32), prevs,
                         refs)
    assert (entries.prev_deltas(table) == prevs).all() and (entries.ref_deltas(table) == refs).all()
    frames = np.array(next_frames, np.int64)

    def prev_deltas(steps: np.ndarray) -> np.ndarray:
        return prevs[steps % slots]

    expected = stacking.transition_frames(frames, prev_deltas, columns - 1)
    out = np.empty((len(frames), columns), np.int64)
    references_of = {"depth": 8, "row_nbytes": 84, "unit": 7} if references else {}
    geometry = _lz4batch.ring_geometry(entries.layout, slots, 2654435761, 1 << 20, 7056, **references_of)
    _lz4batch.follow_links((geometry, table, 0, [], 0), frames, out)
    np.testing.assert_array_equal(out, expected)


@settings(max_examples=60, deadline=None)
@given(
    spec=st.sampled_from([((), "<i8", 256), ((2,), "<f4", 300), ((), "u1", 3), ((3, 2), "<i2", 70_000)]),
    slots=st.integers(1, 50),
    steps=st.lists(st.integers(0, 2**40), min_size=0, max_size=40),
    seed=st.integers(0, 2**32 - 1),
    valid=st.floats(0, 1),
    ring=st.sampled_from([(4, 50), (5, 50), (5, 70_000), (5, 1 << 24)]),
)
def test_read_fields_unpacks_what_read_gives_and_fails_at_the_same_row(
    tmp_path_factory, spec, slots, steps, seed, valid, ring
) -> None:
    """``TransitionTable.read_fields`` through ``gather_fields`` against its numpy definition (``read``,
    then the fields), on rows of random bytes that mostly match their checksums, in format versions 4 and
    5 (next_delta of 2, 3 and 4 bytes: a row layout for a larger ring than the table holds)."""
    from mmreplay.rows.transitions import (
        DamagedRowError,
        TransitionTable,
        row_dtype,
        row_envs,
        row_flags,
        unchecked_bytes,
    )

    version, layout_slots = ring
    action_shape, action_dtype, num_envs = spec
    dtype = row_dtype(action_shape, np.dtype(action_dtype), num_envs, row_slots=layout_slots, version=version)
    skip = unchecked_bytes(dtype)
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (slots, dtype.itemsize), dtype=np.uint8)
    step_array = np.array(steps, np.int64)
    for i in np.flatnonzero(rng.random(len(step_array)) < valid):
        slot = step_array[i] % slots
        checksum = row_checksums_skipping(raw[slot : slot + 1], step_array[i : i + 1], skip)
        raw[slot, :4] = np.frombuffer(checksum.tobytes(), np.uint8)
    path = tmp_path_factory.mktemp("rows") / "t.tbl"
    path.write_bytes(raw.tobytes())  # the table file, as a writer would have left it
    table = TransitionTable(path, dtype=dtype, row_slots=slots, writable=False)
    assert table._gather_fields  # the compiled path is the one under test
    try:
        rows = table.read(step_array)
    except DamagedRowError as error:  # a checksum that fails, or an env beyond num_envs: the same first row
        with pytest.raises(type(error), match=f"the row of transition {error.step} "):
            table.read_fields(step_array)
        return
    fields = table.read_fields(step_array)
    np.testing.assert_array_equal(fields.next_frames, step_array + rows["frame_lead"])
    np.testing.assert_array_equal(fields.action.view(np.uint8), rows["action"].astype(fields.action.dtype).view(np.uint8))
    np.testing.assert_array_equal(fields.reward.view(np.uint32), rows["reward"].view(np.uint32))  # nan bits too
    np.testing.assert_array_equal(fields.terminated, (row_flags(rows) & 1) != 0)
    np.testing.assert_array_equal(fields.truncated, (row_flags(rows) & 2) != 0)
    np.testing.assert_array_equal(fields.env_index, row_envs(rows))
    table.close()


# -- the compiled read of a batch, against the general path, on damaged files ----------------------


@pytest.fixture(scope="module")
def damaged_store(tmp_path_factory):
    """A closed store of float32 (4,) frames, stacks of 4, wrapped around, with ended episodes."""
    from mmreplay import ReplayStore

    path = tmp_path_factory.mktemp("damage") / "s.mmr"
    states = np.random.default_rng(5).normal(size=(80, 4)).astype(np.float32)
    with ReplayStore.create(path, frame_shape=(4,), capacity=30, stack_size=4, frame_dtype=np.float32,
                            stack_padding="zeros") as store:
        obs = states[0]
        for i in range(1, 80):
            store.add(obs, np.int64(i), float(i), states[i], i % 17 == 0, i % 23 == 0)
            obs = states[i]
    return path


def _outcome(read):
    """Every array of the batch ``read`` returns, or the type and message of what it raised."""
    from dataclasses import fields

    from mmreplay import CorruptStoreError

    try:
        batch = read()
    except (CorruptStoreError, IndexError) as error:
        return type(error).__name__, str(error)
    return [(item.name, getattr(batch, item.name).tobytes()) for item in fields(batch)]


@settings(max_examples=150, deadline=None)
@given(
    flips=st.lists(st.tuples(st.sampled_from(["transitions.tbl", "frames-0.idx", "frames/0000000000.seg"]),
                             st.floats(0, 1, exclude_max=True), st.integers(0, 7)), min_size=1, max_size=4),
    picks=st.lists(st.integers(49, 78), min_size=1, max_size=40),
)
def test_read_transitions_gives_what_the_general_path_gives_on_damaged_files(damaged_store, flips, picks) -> None:
    """Bits flipped in live rows, live frame-table entries or live frames of an open store (its maps see
    them): the compiled read of a batch (``_lz4batch.read_transitions``) returns the batch the general
    path returns, bit for bit, or declines and the general path raises; never a different batch."""
    from mmreplay import ReplayStore

    steps = np.array(picks, np.int64)
    with ReplayStore.open(damaged_store, "r") as store:
        store.read(steps)  # maps the segment: the compiled read can run
        reader = internals.reader_of(store)
        assert reader.compiled and reader.frames.compiled_ring() is not None
        originals = []
        header = json.loads((damaged_store / "header.json").read_text())
        commit, layout = header["commit"], header["layout"]
        live_frames = commit["frames_written"] - commit["frame_tail"]
        row_bytes = store_files.rows_dtype(damaged_store).itemsize
        entry_bytes = store_files.entry_format(damaged_store).size
        for name, where, bit in flips:  # a bit of a live row, a live frame entry, or a live frame's bytes
            path = damaged_store / name
            if name == "transitions.tbl":
                offset = ((49 + int(where * 30)) % layout["row_slots"]) * row_bytes + int(where * 30 * row_bytes) % row_bytes
            elif name == "frames-0.idx":
                frame = commit["frame_tail"] + int(where * live_frames)
                offset = (frame % commit["frame_slots"]) * entry_bytes + int(where * live_frames * entry_bytes) % entry_bytes
            else:
                offset = int(where * commit["bytes_written"])
            data = path.read_bytes()
            originals.append((path, offset, data[offset]))
            with open(path, "r+b") as file:
                file.seek(offset)
                file.write(bytes([data[offset] ^ (1 << bit)]))
        try:
            def read(compiled: bool):
                reader.compiled = compiled
                try:
                    ones = np.ones(len(steps), np.float32)
                    return _outcome(lambda: reader.transitions(steps, weight=ones, discount=ones.copy()))
                finally:
                    reader.compiled = True

            assert read(True) == read(False)
        finally:
            for path, offset, byte in reversed(originals):
                with open(path, "r+b") as file:
                    file.seek(offset)
                    file.write(bytes([byte]))


@pytest.mark.skipif(_lz4batch is None, reason="needs mmreplay._lz4batch")
def test_a_rings_geometry_is_made_once_and_the_calls_refuse_anything_else(tmp_path):
    """A ring's geometry (its entry layout, slots, seeds, segments and frames) is ``ring_geometry``'s capsule,
    made once per table; it refuses an entry layout that is not 13 ints, and the calls that take a ``ring``
    refuse anything but the capsule in its place, naming what they expected."""
    from mmreplay.frames.frame_entries import EntryFormat

    entry = EntryFormat(7056, frame_slots=1000, version=5, max_distance=None, extra=0)
    geometry = _lz4batch.ring_geometry(entry.layout, 4, 2654435761, 1 << 20, 7056)
    assert type(geometry).__name__ == "PyCapsule"
    table = np.zeros(4, entry.dtype)
    frames = np.zeros((1, 1), np.int64)
    _lz4batch.follow_links((geometry, table, 0, [], 0), np.zeros(1, np.int64), frames)
    with pytest.raises(TypeError, match="must be sequence of length 13, not 12"):
        _lz4batch.ring_geometry(entry.layout[:12], 4, 2654435761, 1 << 20, 7056)
    with pytest.raises(TypeError, match=r"expected ring_geometry\(\)'s capsule; got tuple"):
        _lz4batch.follow_links((entry.layout, table, 0, [], 0), np.zeros(1, np.int64), frames)
    with pytest.raises(ValueError, match="depth -1 out of range"):  # ref_delta in the entries: a depth is needed
        _lz4batch.ring_geometry(EntryFormat(7056, frame_slots=1000, version=5, max_distance=8192, extra=0).layout, 4,
                                2654435761, 1 << 20, 7056)
