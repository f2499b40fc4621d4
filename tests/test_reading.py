"""Batches of transitions read back through the compiled read of a batch (``_lz4batch.read_transitions``,
where it is built) equal the reference model, equal what the pure-Python path reads bit for bit, and
still refuse corrupt rows and frames, for frames of every dtype and stacks of one and four frames.

Small frames are the case this path exists for (CartPole's float32 (4,) states): the property runs on
vectors and small images, episodes that end with a final observation stored as given (DETACHED rows,
which the general path reads) and stores that wrapped around.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import store_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import ReferenceStore, assert_batch_matches, bits
from strategies import FrameSource

from mmreplay import CorruptStoreError, ReplayStore

DTYPES = [np.uint8, np.float32, np.float16, np.int16, np.bool_]
DTYPE_IDS = ["uint8", "float32", "float16", "int16", "bool"]

# One episode: how many transitions, whether it ends (terminated, truncated), and whether its last
# next_obs is a fresh stack (the reset observation CleanRL passes: a DETACHED row) rather than obs shifted.
episodes = st.lists(
    st.tuples(st.integers(1, 9), st.sampled_from([(False, False), (True, False), (False, True)]), st.booleans()),
    min_size=1,
    max_size=8,
)


def record(store: ReplayStore, ref: ReferenceStore, plan: list, *, stacks: bool, source: FrameSource) -> None:
    """Add the episodes of ``plan`` to both, as stacks or as single frames."""
    size = store.stack_size
    for length, (terminated, truncated), detached in plan:
        obs = source.stack(size)
        for i in range(length):
            last = i == length - 1
            newest = source.frame()
            next_obs = np.concatenate([obs[1:], newest[None]])
            ended = last and (terminated or truncated)
            if ended and detached and stacks:
                next_obs = source.stack(size)
            flags = (terminated, truncated) if last else (False, False)
            args = (obs if stacks else obs[-1], np.int64(i), float(i) / 4, next_obs if stacks else newest, *flags)
            store.add(*args)
            ref.add(*args)
            obs = next_obs


def assert_discounts(batch, gamma: float) -> None:
    want = np.where(batch.terminated, np.float32(0.0), np.float32(gamma)).astype(np.float32)
    np.testing.assert_array_equal(batch.discount, want)
    np.testing.assert_array_equal(batch.weight, np.ones(len(batch), np.float32))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    frame_dtype=st.sampled_from(DTYPES),
    stack_size=st.sampled_from([1, 4]),
    frame_shape=st.sampled_from([(4,), (1,), (3, 4)]),
    capacity=st.integers(3, 30),
    padding=st.sampled_from(["first", "zeros"]),
    stacks=st.booleans(),
    plan=episodes,
    seed=st.integers(0, 2**32 - 1),
)
def test_sampled_and_read_batches_equal_the_reference_for_every_frame_dtype_and_stack_size(
    tmp_path_factory, frame_dtype, stack_size, frame_shape, capacity, padding, stacks, plan, seed
) -> None:
    config = dict(frame_shape=frame_shape, capacity=capacity, stack_size=stack_size, frame_dtype=frame_dtype,
                  stack_padding=padding)
    ref = ReferenceStore(**config)
    path = tmp_path_factory.mktemp("reading") / "s.mmr"
    with ReplayStore.create(path, **config) as store:
        record(store, ref, plan, stacks=stacks, source=FrameSource(frame_shape, frame_dtype))
        for draw in range(3):  # the first read maps the segment; the later ones take the compiled read
            batch = store.sample(37, rng=seed + draw, gamma=0.5)
            assert_batch_matches(batch, ref)
            assert_discounts(batch, 0.5)
        steps = ref.stored_steps()
        batch = store.read(steps[::-1])
        assert_batch_matches(batch, ref, steps[::-1])
        assert_discounts(batch, 1.0)


@pytest.mark.parametrize("stack_size", [1, 4])
@pytest.mark.parametrize("frame_dtype", DTYPES, ids=DTYPE_IDS)
def test_a_batch_refilled_in_place_equals_a_fresh_one_for_every_frame_dtype_and_stack_size(
    tmp_path: Path, frame_dtype, stack_size: int
) -> None:
    """``sample(out=...)`` with a batch an earlier call returned: the same batch object, refilled with
    exactly what a fresh call with an equal generator returns; a batch whose obs and next_obs share
    frames refuses one that holds a final observation stored as given (DETACHED), as always."""
    from dataclasses import fields

    config = dict(frame_shape=(4,), capacity=40, stack_size=stack_size, frame_dtype=frame_dtype)
    ref = ReferenceStore(**config)
    plan = [(6, (True, False), True), (9, (False, True), False), (30, (False, False), False)]
    refused = refilled = 0
    with ReplayStore.create(tmp_path / "s.mmr", **config) as store:
        record(store, ref, plan, stacks=True, source=FrameSource((4,), frame_dtype))
        out = store.sample(16, rng=np.random.default_rng(100), gamma=0.5)
        for seed in range(40):
            fresh = store.sample(16, rng=np.random.default_rng(seed), gamma=0.5)
            try:
                batch = store.sample(16, rng=np.random.default_rng(seed), gamma=0.5, out=out)
            except ValueError as error:
                assert "stored as given" in str(error) and stack_size > 1
                refused += 1
                out = fresh
                continue
            refilled += 1
            assert batch is out
            assert_batch_matches(batch, ref)
            assert_discounts(batch, 0.5)
            for item in fields(batch):
                assert np.array_equal(bits(getattr(batch, item.name)), bits(getattr(fresh, item.name))), item.name
    assert refilled > 10


# -- the pure-Python path --------------------------------------------------------------------------

PURE_SAMPLES = """
import sys, numpy as np
from dataclasses import fields
from mmreplay import ReplayStore
from mmreplay.frames import lz4_codec as codec
assert not codec.ACCELERATED, "MMREPLAY_PURE_PYTHON=1 should hide the extension"
for path in sys.argv[1:]:
    with ReplayStore.open(path, "r") as store:
        batches = [store.sample(64, rng=seed, gamma=0.9) for seed in range(3)]
        batches.append(store.read(np.arange(store.stored_steps.start, store.stored_steps.stop)))
    arrays = {f"{k}.{item.name}": getattr(b, item.name) for k, b in enumerate(batches) for item in fields(b)}
    np.savez(path + ".pure.npz", **arrays)
"""


def test_the_pure_python_path_reads_the_same_batches_bit_for_bit(tmp_path: Path) -> None:
    """Stores of every dtype and stack size, with DETACHED rows and a wrap-around: the batches of three
    seeds and a read of every stored step, here (compiled where built) and in a process whose extensions
    are hidden (MMREPLAY_PURE_PYTHON=1), are equal field for field, bit for bit."""
    from dataclasses import fields

    plan = [(5, (True, False), True), (3, (False, True), False), (7, (False, False), False),
            (4, (False, True), True), (9, (True, False), False), (2, (False, False), False)]
    paths = []
    for dtype, name in zip(DTYPES, DTYPE_IDS):
        for stack_size in (1, 4):
            for frame_shape in ((4,), (3, 4)):
                path = tmp_path / f"{name}-{stack_size}-{len(frame_shape)}.mmr"
                config = dict(frame_shape=frame_shape, capacity=24, stack_size=stack_size, frame_dtype=dtype)
                with ReplayStore.create(path, **config) as store:
                    record(store, ReferenceStore(**config), plan, stacks=True, source=FrameSource(frame_shape, dtype))
                paths.append(str(path))
    environment = {**os.environ, "MMREPLAY_PURE_PYTHON": "1"}
    subprocess.run([sys.executable, "-c", PURE_SAMPLES, *paths], check=True, env=environment)
    for path in paths:
        with ReplayStore.open(path, "r") as store:
            batches = [store.sample(64, rng=seed, gamma=0.9) for seed in range(3)]
            batches.append(store.read(np.arange(store.stored_steps.start, store.stored_steps.stop)))
        with np.load(path + ".pure.npz") as pure:
            for k, batch in enumerate(batches):
                for item in fields(batch):
                    got, want = getattr(batch, item.name), pure[f"{k}.{item.name}"]
                    assert got.dtype == want.dtype and got.shape == want.shape, (path, k, item.name)
                    assert np.array_equal(bits(got), bits(want)), f"{path}: batch {k}, {item.name} differs"


# -- corruption ------------------------------------------------------------------------------------



def small_store(path: Path, frame_dtype, stack_size: int) -> tuple[dict, dict]:
    """A closed store of 40 CartPole-like transitions in 20 slots (wrapped around): its header's layout
    and commit."""
    config = dict(frame_shape=(4,), capacity=20, stack_size=stack_size, frame_dtype=frame_dtype)
    with ReplayStore.create(path, **config) as store:
        record(store, ReferenceStore(**config), [(13, (True, False), False), (27, (False, False), False)],
               stacks=False, source=FrameSource((4,), frame_dtype))
    header = json.loads((path / "header.json").read_text())
    return header["layout"], header["commit"]


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        old = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([old ^ 0x01]))


def raised_by_reads(path: Path, step: int, damage: Callable[[], None]) -> list[str]:
    """The messages that ``read([step])`` and a sample of 256 (which draws every one of 20 stored steps)
    raise after ``damage`` ran on the files of the open store (opening reads every row: it would
    refuse a damaged row itself); each must raise."""
    messages = []
    with ReplayStore.open(path, "r") as store:
        store.sample(8, rng=0)  # the reads below find the segment mapped: they take the compiled read first
        damage()
        for read in (lambda: store.read([step]), lambda: store.sample(256, rng=0)):
            with pytest.raises(CorruptStoreError) as error:
                read()
            messages.append(str(error.value))
    return messages


@pytest.mark.parametrize("stack_size", [1, 4])
@pytest.mark.parametrize("frame_dtype", DTYPES, ids=DTYPE_IDS)
def test_a_flipped_byte_in_a_row_of_small_frames_raises_naming_the_table_and_the_step(
    tmp_path: Path, frame_dtype, stack_size: int
) -> None:
    path = tmp_path / "s.mmr"
    layout, _ = small_store(path, frame_dtype, stack_size)
    step = 31
    rows = store_files.rows_dtype(path)  # the reward's first byte (docs/formats.md, "The store's files")
    offset = (step % layout["row_slots"]) * rows.itemsize + store_files.field_offsets(rows)["reward"]
    damage = functools.partial(flip, path / "transitions.tbl", offset)
    for message in raised_by_reads(path, step, damage):
        assert "transitions.tbl" in message and f"transition {step} fails its checksum" in message, message


@pytest.mark.parametrize("stack_size", [1, 4])
@pytest.mark.parametrize("frame_dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("where", ["segment", "entry link"])
def test_a_flipped_byte_in_a_frame_of_small_frames_raises_naming_the_file_and_the_transition(
    tmp_path: Path, frame_dtype, stack_size: int, where: str
) -> None:
    """The newest frame is the next_obs of the newest transition (step 39): a flipped byte in its stored
    block, or in its entry's episode link, fails its CRC."""
    path = tmp_path / "s.mmr"
    layout, commit = small_store(path, frame_dtype, stack_size)
    frame = commit["frames_written"] - 1
    table = store_files.frame_table_path(path)
    entries = store_files.entry_format(path)
    entry = store_files.frame_table(path)[frame % commit["frame_slots"] :][:1]
    if where == "segment":
        position = int(entries.positions(entry, commit["bytes_written"])[0])
        segment, offset = divmod(position + int(entry["length"][0]) // 2, layout["segment_bytes"])
        named = f"{segment:010d}.seg"
        damage = functools.partial(flip, path / "frames" / named, offset)
    else:
        named = table.name
        link = (frame % commit["frame_slots"]) * entries.size + store_files.field_offsets(entries.dtype)["links"]
        damage = functools.partial(flip, table, link)
    for message in raised_by_reads(path, 39, damage):
        assert named in message and "transition" in message, message
