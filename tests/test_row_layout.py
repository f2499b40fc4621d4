"""The transition row's layout is defined once, in Python (``rows.transitions.row_dtype`` and its flag
constants), and passed to the compiled code (``row_layout``): the C code reads and writes each field
where ``row_dtype`` puts it, and each flag by its constant, for every action shape, action dtype and
number of envs a store supports, in format versions 4 and 5 (5: next_delta of 2 to 4 bytes by the ring's
size, the env packed with the flags in a word of 1 to 3 bytes); and refuses a layout it cannot honour,
naming the field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from extension_status import absent_reason

from mmreplay import ReplayStore, extensions
from mmreplay.rows import transitions
from mmreplay.rows.transitions import (
    DETACHED,
    EPISODE_START,
    FRAGMENT_START,
    TERMINATED,
    TRUNCATED,
    TransitionTable,
    row_dtype,
    row_envs,
    row_flags,
    row_layout,
    row_next_deltas,
    unchecked_bytes,
)
from mmreplay.store import internals

_lz4batch = extensions.load("_lz4batch")
pytestmark = pytest.mark.skipif(_lz4batch is None, reason=absent_reason("_lz4batch"))

# Every kind of action dtype a store takes (numeric or bool), of every width, in both byte orders.
ACTION_DTYPES = ["?", "u1", "i1", "<u2", ">i2", "<u4", "<i4", ">f4", "<u8", "<i8", ">i8", "<f2", "<f8"]
# A scalar, vectors, a matrix, and one whose rows are longer than the compiled read unpacks (256 bytes).
ACTION_SHAPES = [(), (1,), (3,), (2, 3), (4, 4, 4)]
# One env; the most that keep env in one byte (version 5: with the flags); the fewest that need two; the
# most version 5 keeps in two with the flags, and the fewest it needs three for; the most a store holds.
NUM_ENVS = [1, 8, 9, 256, 257, 2048, 2049, 65536]
ALL_FLAGS = TERMINATED | TRUNCATED | EPISODE_START | DETACHED | FRAGMENT_START


def test_row_layout_names_the_offsets_widths_and_flag_bits_of_row_dtype() -> None:
    dtype = row_dtype((3,), np.dtype("<i2"), 300, row_slots=1000, version=4)
    assert row_layout(dtype, 300) == {
        "size": dtype.itemsize, "checksum": dtype.fields["checksum"][1], "next_delta": dtype.fields["next_delta"][1],
        "frame_lead": dtype.fields["frame_lead"][1], "env": dtype.fields["env"][1], "env_bytes": 2,
        "reward": dtype.fields["reward"][1], "flags": dtype.fields["flags"][1], "action": dtype.fields["action"][1],
        "action_bytes": 6, "terminated": TERMINATED, "truncated": TRUNCATED, "detached": DETACHED,
        "next_delta_bytes": 4, "env_shift": 0, "num_envs": 300,
    }
    # the bytes the row checksum leaves out are the compiled code's default, and checksum and next_delta fill them
    assert _lz4batch.UNCHECKED_BYTES == unchecked_bytes(dtype) == dtype.fields["frame_lead"][1]


@pytest.mark.parametrize(("row_slots", "next_delta_bytes"), [(100, 2), (65535, 2), (65536, 3), (1 << 24, 4)])
@pytest.mark.parametrize(("num_envs", "flags_env_bytes"), [(1, 1), (8, 1), (9, 2), (2048, 2), (2049, 3), (65536, 3)])
def test_a_version_5_row_packs_next_delta_by_the_ring_and_the_env_with_the_flags(
    row_slots: int, next_delta_bytes: int, num_envs: int, flags_env_bytes: int
) -> None:
    dtype = row_dtype((), np.dtype("<i8"), num_envs, row_slots=row_slots, version=5)
    assert dtype.names == ("checksum", "next_delta", "frame_lead", "flags_env", "reward", "action")
    assert dtype["next_delta"].itemsize == next_delta_bytes and dtype["flags_env"].itemsize == flags_env_bytes
    assert dtype.itemsize == 4 + next_delta_bytes + 4 + flags_env_bytes + 4 + 8
    assert unchecked_bytes(dtype) == 4 + next_delta_bytes
    layout = row_layout(dtype)
    assert layout["env"] == layout["flags"] == dtype.fields["flags_env"][1] and layout["env_bytes"] == flags_env_bytes
    assert (layout["next_delta_bytes"], layout["env_shift"]) == (next_delta_bytes, 5)


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("num_envs", NUM_ENVS)
@pytest.mark.parametrize("action_shape", ACTION_SHAPES, ids=str)
@pytest.mark.parametrize("action_dtype", ACTION_DTYPES)
def test_compiled_rows_hold_each_field_where_row_dtype_puts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, action_dtype: str, action_shape: tuple[int, ...], num_envs: int,
    version: int,
) -> None:
    """Rows written by the compiled fast add (``write_rows``) are the bytes the Python writer packs, and
    the compiled read (``gather_fields``) unpacks them into what numpy reads at ``row_dtype``'s offsets."""
    envs = min(num_envs, 300)  # past 255: env's second byte
    slots = 2 * envs + 5
    dtype = row_dtype(action_shape, np.dtype(action_dtype), num_envs, row_slots=slots, version=version)
    first_step = 3 * slots - 4  # the new rows wrap around the ring
    rng = np.random.default_rng(envs * 7 + len(action_shape))
    stored_action = dtype["action"].base
    actions = rng.integers(0, 256, (envs, dtype["action"].itemsize), dtype=np.uint8)
    if stored_action.kind == "b":
        actions &= 1  # a bool holds 0 or 1
    rewards = [float(v) for v in rng.normal(size=envs) * 100]
    flags = [env % (ALL_FLAGS + 1) for env in range(envs)]  # every combination of the flag bits
    arguments = {
        "frame_lead": 1 + envs, "previous_steps": [first_step - envs + env for env in range(envs)],
        "rewards": rewards, "flags": flags, "actions": actions.tobytes(),
    }
    compiled = TransitionTable.create(tmp_path / "compiled.tbl", dtype=dtype, row_slots=slots)
    compiled.write_continuations(first_step, **arguments)
    compiled.close()
    monkeypatch.setattr(transitions, "_lz4batch", None)  # the Python writer
    general = TransitionTable.create(tmp_path / "general.tbl", dtype=dtype, row_slots=slots)
    general.write_continuations(first_step, **arguments)
    general.close()
    monkeypatch.undo()
    assert (tmp_path / "compiled.tbl").read_bytes() == (tmp_path / "general.tbl").read_bytes()

    table = TransitionTable(tmp_path / "compiled.tbl", dtype=dtype, row_slots=slots, writable=False)
    native = stored_action.newbyteorder("=") == stored_action
    assert table._gather_fields == (dtype.itemsize <= 256 and native)  # the compiled read where it runs
    steps = np.arange(first_step, first_step + envs, dtype=np.int64)
    rows = np.fromfile(tmp_path / "compiled.tbl", dtype)[steps % slots]  # numpy, at row_dtype's offsets
    fields = table.read_fields(steps)
    np.testing.assert_array_equal(fields.next_frames, steps + 1 + envs)
    np.testing.assert_array_equal(fields.env_index, np.arange(envs))
    np.testing.assert_array_equal(fields.reward.view(np.uint32), np.array(rewards, np.float32).view(np.uint32))
    np.testing.assert_array_equal(fields.terminated, (np.array(flags) & TERMINATED) != 0)
    np.testing.assert_array_equal(fields.truncated, (np.array(flags) & TRUNCATED) != 0)
    np.testing.assert_array_equal(fields.detached, (np.array(flags) & DETACHED) != 0)
    np.testing.assert_array_equal(row_flags(rows), flags)
    np.testing.assert_array_equal(row_envs(rows), np.arange(envs))
    expected_action = actions.view(stored_action).reshape(envs, *action_shape)
    expected_bytes = expected_action.astype(fields.action.dtype).view(np.uint8)
    np.testing.assert_array_equal(fields.action.view(np.uint8), expected_bytes)
    np.testing.assert_array_equal(row_next_deltas(rows), 0)
    # each env's previous row got its link to the new row
    linked = row_next_deltas(np.fromfile(tmp_path / "compiled.tbl", dtype)[(steps - envs) % slots])
    np.testing.assert_array_equal(linked, envs)
    table.close()


@pytest.mark.parametrize("num_envs", [1, 257])
@pytest.mark.parametrize("action_shape", [(), (3,), (2, 3)], ids=str)
@pytest.mark.parametrize("action_dtype", ["?", "i1", "<u2", "<i4", "<f4", "<i8", "<f8"])
def test_a_compiled_batch_read_gives_each_field_as_added(
    tmp_path: Path, action_dtype: str, action_shape: tuple[int, ...], num_envs: int
) -> None:
    """``read_transitions`` (the compiled read of a whole batch) takes the same layout: what a store of
    each action field and env count gives back through it is what was added, and what its general path
    gives."""
    rng = np.random.default_rng(num_envs)
    adds = 6
    frames = rng.integers(0, 256, (adds + 1, num_envs, 3), dtype=np.uint8)
    actions = rng.integers(0, 2 if action_dtype == "?" else 100, (adds, num_envs, *action_shape)).astype(action_dtype)
    rewards = rng.normal(size=(adds, num_envs)).astype(np.float32)
    terminated = np.zeros((adds, num_envs), bool)
    truncated = np.zeros((adds, num_envs), bool)
    terminated[-1, ::2] = True  # the last add ends every env's episode, one way or the other
    truncated[-1, 1::2] = True
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(3,), capacity=adds * num_envs + 8, stack_size=2,
                            num_envs=num_envs, action_shape=action_shape, action_dtype=action_dtype) as store:
        envs = (lambda array: array[0]) if num_envs == 1 else (lambda array: array)  # one env: no env axis
        for i in range(adds):
            store.add(envs(frames[i]), envs(actions[i]), envs(rewards[i]), envs(frames[i + 1]), envs(terminated[i]),
                      envs(truncated[i]))
        steps = np.arange(adds * num_envs, dtype=np.int64)  # add i, env e: step i * num_envs + e
        store.read(steps[:1])  # maps the segment: the compiled read can run
        reader = internals.reader_of(store)
        ones = np.ones(len(steps), np.float32)
        batch = reader.compiled_transitions(steps, ones, ones.copy(), True)
        assert batch is not None  # the compiled read ran
        reader.compiled = False
        general = reader.transitions(steps, weight=ones, discount=ones.copy())
    np.testing.assert_array_equal(batch.action, actions.reshape(-1, *action_shape))
    np.testing.assert_array_equal(batch.reward.view(np.uint32), rewards.reshape(-1).view(np.uint32))
    np.testing.assert_array_equal(batch.terminated, terminated.reshape(-1))
    np.testing.assert_array_equal(batch.truncated, truncated.reshape(-1))
    np.testing.assert_array_equal(batch.env_index, np.tile(np.arange(num_envs), adds))
    np.testing.assert_array_equal(batch.discount, np.where(terminated.reshape(-1), 0.0, 1.0))
    np.testing.assert_array_equal(batch.next_obs[:, -1], frames[1:].reshape(-1, 3))
    for name in ("obs", "action", "reward", "next_obs", "terminated", "truncated", "env_index", "discount"):
        assert getattr(batch, name).tobytes() == getattr(general, name).tobytes(), name


def layout_with(version: int = 4, **changes: int) -> dict[str, int]:
    """row_layout of a (3,) int16 action row of 300 envs (a ring of 1,000 rows), with some of its fields
    replaced."""
    return row_layout(row_dtype((3,), np.dtype("<i2"), 300, row_slots=1000, version=version)) | changes


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"checksum": 4, "next_delta": 0}, (r"^row layout: checksum at byte 4 and next_delta at byte 0; expected 0 "
                                            r"and 4, the first 8 bytes, which the row checksum leaves out$")),
        ({"env_bytes": 4}, r"^row layout: env is 4 bytes wide; expected 1 or 2, or up to 3 with the flags$"),
        ({"next_delta_bytes": 5}, r"^row layout: next_delta is 5 bytes wide; expected 2 to 4$"),
        ({"env_shift": 3}, r"^row layout: env shifted by 3 bits at byte 12; expected 0, or 5 in the flags' word \(byte 18\)$"),
        ({"frame_lead": 6}, (r"^row layout: frame_lead at byte 6 \(4 bytes\) does not lie in bytes 8 to 25 of "
                             r"the row \(after the checksum and next_delta\)$")),
        ({"action_bytes": 7}, r"^row layout: action at byte 19 \(7 bytes\) does not lie in bytes 8 to 25"),
        ({"reward": 22}, r"^row layout: reward at byte 22 \(4 bytes\) does not lie in bytes 8 to 25"),
        ({"truncated": 3}, r"^row layout: flag truncated is 3; expected a single bit \(1 to 128\) of its own$"),
        ({"detached": 1}, r"^row layout: flag detached is 1; expected a single bit \(1 to 128\) of its own$"),
        ({"num_envs": 0}, r"^row layout: num_envs is 0; expected at least 1$"),
    ],
)
def test_a_row_layout_the_compiled_code_cannot_honour_is_refused_naming_the_field(
    changes: dict[str, int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        _lz4batch.row_layout(**layout_with(**changes))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"terminated": 32}, r"^row layout: flag terminated is 32; expected a single bit \(1 to 128\) of its own$"),
        ({"frame_lead": 5}, (r"^row layout: frame_lead at byte 5 \(4 bytes\) does not lie in bytes 6 to 22 of "
                             r"the row \(after the checksum and next_delta\)$")),
    ],
)
def test_a_version_5_row_layout_keeps_the_flags_below_the_env_and_the_fields_after_next_delta(
    changes: dict[str, int], message: str
) -> None:
    _lz4batch.row_layout(**layout_with(5))  # the layout itself is honoured
    with pytest.raises(ValueError, match=message):
        _lz4batch.row_layout(**layout_with(5, **changes))


def test_the_row_functions_refuse_anything_but_a_row_layout() -> None:
    rows = np.zeros(4, row_dtype((), np.dtype("<i8"), 1, row_slots=4, version=5))
    steps = np.zeros(0, np.int64)
    arrays = tuple(np.zeros(0, t) for t in "qqf??q?")
    with pytest.raises(TypeError, match=r"^layout must be a row layout that row_layout\(\) made; got dict$"):
        _lz4batch.gather_fields((rows, 4, layout_with(), False), steps, arrays)
    with pytest.raises(TypeError, match=r"^row_layout\(\) takes no positional arguments$"):
        _lz4batch.row_layout(*layout_with().values())
