"""Parsing a header's fields: every value is checked, none is trusted.

A header is protected by a CRC-32 that anyone can recompute, so a downloaded store's header is input like
any other: each field is parsed for its type, its range and its consistency with the others, before any
file is mapped or any array is allocated from it. What fails is a ``CorruptStoreError`` naming the field,
what was expected and what the header holds. Checks against the files' sizes (row and frame tables)
follow in the storage modules, which know their entry sizes; a count such as ``stack_size`` is bounded
here by a count those checks bound (``frame_slots``), so nothing is allocated beyond what the files hold.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from mmreplay.errors import CorruptStoreError
from mmreplay.validation import field_dtype_string, field_name_problem

MAX_DIMENSIONS = 8
MAX_FRAME_BYTES = 1 << 30  # one frame; lz4 blocks hold at most about 2 GiB
MAX_ACTION_BYTES = 1 << 12  # one action (rows of the compiled paths hold at most 256 bytes)
MAX_FIELDS = 64  # user fields of a store
MAX_FIELD_BYTES = 1 << 24  # one transition's value of one user field
MAX_COUNT = 1 << 62  # never-wrapping steps and byte positions
MAX_SLOTS = 1 << 40  # ring sizes: far beyond any disk, far below int64 arithmetic's limits
MAX_ENVS = 1 << 16  # as transition_table.MAX_ENVS: env indices fit a u2 field
# A reference scheme's bounds, as frames.reference_scheme.ReferenceScheme checks them: groups of at most
# MAX_GROUP_SIZE frames, branching 2 to the group's size, references at most 65,535 frame steps back.
MAX_GROUP_SIZE = 1 << 16
MAX_REFERENCE_DISTANCE = 0xFFFF
_SCHEME_FIELDS = ("group_size", "branching", "max_distance")
ACTION_KINDS = "biuf"  # bool, signed, unsigned, float: what bytes can never turn into pointers or objects

_LAYOUT_FIELDS = {
    "frame_shape", "capacity", "stack_size", "num_envs", "action_shape", "action_dtype", "row_slots",
    "segment_bytes", "sampler", "frame_encoding", "reference_scheme", "fields", "stack_padding", "frame_dtype",
}
_COMMIT_FIELDS = {
    "transitions_added", "frames_written", "bytes_written", "frame_tail", "frame_table_generation",
    "frame_slots", "sampler_state", "first_step",
}


def _fail(path: Path, name: str, expected: str, value: object) -> CorruptStoreError:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return CorruptStoreError(f"{path}: header field {name} is {text}; expected {expected}")


def parse_int(path: Path, name: str, value: object, *, low: int, high: int) -> int:
    """An integer (a JSON number without a fraction; never a bool) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail(path, name, f"an integer in [{low}, {high}]", value)
    return value


def parse_number(path: Path, name: str, value: object, *, low: float) -> float:
    """A finite number >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= low):
        raise _fail(path, name, f"a finite number >= {low}", value)
    return float(value)


def parse_dimensions(path: Path, name: str, value: object, *, low: int, high_bytes: int) -> tuple[int, ...]:
    """A shape: a list of at most ``MAX_DIMENSIONS`` integers >= ``low`` whose product is <= ``high_bytes``."""
    if not isinstance(value, (list, tuple)) or len(value) > MAX_DIMENSIONS:
        raise _fail(path, name, f"a list of at most {MAX_DIMENSIONS} integers", value)
    shape = tuple(parse_int(path, name, size, low=low, high=high_bytes) for size in value)
    if math.prod(shape) > high_bytes:
        raise _fail(path, name, f"a shape of at most {high_bytes} elements", value)
    return shape


def parse_frame_dtype(path: Path, value: object) -> np.dtype:
    """The frames' dtype (absent: uint8): numeric or bool as ``parse_plain_dtype`` takes them, and
    spelled little-endian as ``dtype.str`` spells it (frames are stored little-endian)."""
    expected = f"a little-endian numeric or bool dtype string (kinds {ACTION_KINDS})"
    dtype = parse_plain_dtype(path, "frame_dtype", value, expected=expected)
    if dtype.str != value or dtype.byteorder == ">":
        raise _fail(path, "frame_dtype", expected, value)
    return dtype


def parse_action_dtype(path: Path, value: object) -> np.dtype:
    """The action's dtype (``parse_plain_dtype``)."""
    return parse_plain_dtype(path, "action_dtype", value)


def parse_plain_dtype(path: Path, name: str, value: object, *, expected: str = "") -> np.dtype:
    """A plain numeric or bool dtype: never objects, datetimes, records or subarrays, whose bytes a
    store must not reinterpret."""
    expected = expected or f"a numeric or bool dtype string (kinds {ACTION_KINDS})"
    if not isinstance(value, str) or len(value) > 16:
        raise _fail(path, name, expected, value)
    try:
        dtype = np.dtype(value)
    except (TypeError, ValueError, SyntaxError):
        raise _fail(path, name, expected, value) from None
    if dtype.kind not in ACTION_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise _fail(path, name, expected, value)
    return dtype


def parse_sampler(path: Path, value: object) -> dict[str, object]:
    """The header's sampler: its kind and parameters, and ``max_times_sampled`` (an int >= 1) if set."""
    if isinstance(value, dict) and "max_times_sampled" in value:
        limit = value["max_times_sampled"]
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise _fail(path, "sampler.max_times_sampled", "an int >= 1", limit)
        rest = {key: item for key, item in value.items() if key != "max_times_sampled"}
        return {**parse_sampler(path, rest), "max_times_sampled": limit}
    if isinstance(value, dict) and value.get("kind") == "uniform" and set(value) == {"kind"}:
        return value
    if isinstance(value, dict) and value.get("kind") == "prioritized" and set(value) == {"kind", "alpha", "epsilon"}:
        parse_number(path, "sampler.alpha", value["alpha"], low=0.0)
        parse_number(path, "sampler.epsilon", value["epsilon"], low=0.0)
        return value
    raise _fail(path, "sampler", "{'kind': 'uniform'} or {'kind': 'prioritized', 'alpha': ..., 'epsilon': ...}", value)


def parse_sampler_state(path: Path, value: object) -> dict[str, object]:
    if not isinstance(value, dict) or not set(value) <= {"max_priority", "checksum", "sequence"}:
        raise _fail(path, "sampler_state", "an object with max_priority, checksum and sequence at most", value)
    if "max_priority" in value:
        parse_number(path, "sampler_state.max_priority", value["max_priority"], low=0.0)
    if "checksum" in value:
        parse_int(path, "sampler_state.checksum", value["checksum"], low=0, high=(1 << 32) - 1)
    if "sequence" in value:
        parse_int(path, "sampler_state.sequence", value["sequence"], low=0, high=MAX_COUNT)
    return value


def check_fields(path: Path, section: str, value: object, names: set[str], optional: set[str]) -> dict[str, object]:
    """``value`` is an object with exactly the fields ``names`` (those in ``optional`` may be missing)."""
    if not isinstance(value, dict):
        raise _fail(path, section, "an object", value)
    missing, unknown = names - optional - set(value), set(value) - names
    if missing or unknown:
        raise CorruptStoreError(
            f"{path}: header section {section} lacks fields {sorted(missing)} and has unknown fields {sorted(unknown)}"
        )
    return value


def parse_layout_fields(path: Path, value: object) -> dict[str, object]:
    """The layout section's fields, each checked, with shapes as tuples (``format.Layout``'s arguments)."""
    fields = check_fields(
        path, "layout", value, _LAYOUT_FIELDS,
        {"frame_encoding", "reference_scheme", "fields", "stack_padding", "frame_dtype"},
    )
    itemsize = parse_frame_dtype(path, fields.get("frame_dtype", "|u1")).itemsize
    frame_shape = parse_dimensions(
        path, "frame_shape", fields["frame_shape"], low=1, high_bytes=MAX_FRAME_BYTES // itemsize
    )
    if not frame_shape:
        raise _fail(path, "frame_shape", "at least one dimension", fields["frame_shape"])
    capacity = parse_int(path, "capacity", fields["capacity"], low=1, high=MAX_SLOTS)
    parse_int(path, "num_envs", fields["num_envs"], low=1, high=min(MAX_ENVS, capacity))
    parse_int(path, "stack_size", fields["stack_size"], low=1, high=MAX_SLOTS)
    dtype = parse_action_dtype(path, fields["action_dtype"])
    action_shape = parse_dimensions(
        path, "action_shape", fields["action_shape"], low=0, high_bytes=MAX_ACTION_BYTES // dtype.itemsize
    )
    parse_int(path, "row_slots", fields["row_slots"], low=capacity + 1, high=MAX_SLOTS)
    frame_nbytes = math.prod(frame_shape) * itemsize
    # As format.new_store sizes it: at most 256 MiB, or room for 4 incompressible frames.
    most = max(1 << 28, 4 * frame_nbytes + 64)
    parse_int(path, "segment_bytes", fields["segment_bytes"], low=max(1 << 12, frame_nbytes), high=most)
    parse_sampler(path, fields["sampler"])
    encoding = fields.get("frame_encoding", "lz4")
    if not isinstance(encoding, str):
        raise _fail(path, "frame_encoding", "a string", encoding)
    if not isinstance(fields.get("stack_padding", "first"), str):
        raise _fail(path, "stack_padding", "a string", fields["stack_padding"])
    if fields.get("reference_scheme") is not None:
        parse_reference_scheme(path, fields["reference_scheme"])
    specs = parse_field_specs(path, fields.get("fields", []))
    return {**fields, "frame_shape": frame_shape, "action_shape": action_shape, "fields": specs}


def parse_reference_scheme(path: Path, value: object) -> dict[str, int]:
    """A reference scheme: exactly ``group_size`` (1 to ``MAX_GROUP_SIZE``), ``branching`` (2 to the larger
    of 2 and ``group_size``) and ``max_distance`` (1 to ``MAX_REFERENCE_DISTANCE``), each bounded here
    before anything is computed from it (a scheme's depth is a loop over its branching's powers)."""
    expected = "an object of exactly " + ", ".join(_SCHEME_FIELDS)
    if not isinstance(value, dict) or set(value) != set(_SCHEME_FIELDS):
        raise _fail(path, "reference_scheme", expected, value)
    group_size = parse_int(path, "reference_scheme.group_size", value["group_size"], low=1, high=MAX_GROUP_SIZE)
    parse_int(path, "reference_scheme.branching", value["branching"], low=2, high=max(2, group_size))
    parse_int(path, "reference_scheme.max_distance", value["max_distance"], low=1, high=MAX_REFERENCE_DISTANCE)
    return value


def parse_field_specs(path: Path, value: object) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    """The user fields: a list of distinct [name, shape, numeric or bool dtype] (``format.FieldSpec``), each
    name one ``create`` takes (never the row layout's ``checksum``), each dtype normalised as ``create``
    keeps it (``field_dtype_string``: ``">i4"`` is ``"<i4"``, ``"?"`` and ``"bool"`` are ``"|b1"``), so
    that what is written and what is read agree however the header spells it."""
    expected = f"a list of at most {MAX_FIELDS} [name, shape, dtype] entries with distinct names"
    if not isinstance(value, list) or len(value) > MAX_FIELDS:
        raise _fail(path, "fields", expected, value)
    specs = []
    for entry in value:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str) and 0 < len(entry[0]) <= 64):
            raise _fail(path, "fields", expected, entry)
        name = entry[0]
        problem = field_name_problem(name)
        if problem is not None:
            raise CorruptStoreError(f"{path}: header field fields holds a field named {name!r}: {problem}")
        dtype = parse_plain_dtype(path, f"fields[{name!r}] dtype", entry[2])
        shape = parse_dimensions(path, f"fields[{name!r}] shape", entry[1], low=1,
                                 high_bytes=MAX_FIELD_BYTES // dtype.itemsize)
        specs.append((name, shape, field_dtype_string(dtype)))
    if len({name for name, _, _ in specs}) != len(specs):
        raise _fail(path, "fields", expected, value)
    return tuple(specs)


def parse_commit_fields(path: Path, value: object, layout: dict[str, object]) -> dict[str, object]:
    """The commit section's fields, each checked and checked against each other and the layout."""
    fields = check_fields(path, "commit", value, _COMMIT_FIELDS, {"first_step"})
    added = parse_int(path, "transitions_added", fields["transitions_added"], low=0, high=MAX_COUNT)
    if "first_step" in fields:  # the first step since the last clear(): no later than the newest
        parse_int(path, "first_step", fields["first_step"], low=0, high=added)
    # Every transition writes its next_obs frame: frames never fall behind transitions.
    written = parse_int(path, "frames_written", fields["frames_written"], low=added, high=MAX_COUNT)
    parse_int(path, "bytes_written", fields["bytes_written"], low=0, high=MAX_COUNT)
    # An integer only: the frame table's file name is built from it (frames-<G>.idx), never a path.
    parse_int(path, "frame_table_generation", fields["frame_table_generation"], low=0, high=MAX_COUNT)
    # A stack and the frames of the envs' open episodes must fit the frame ring.
    stack_size, num_envs = layout["stack_size"], layout["num_envs"]
    assert isinstance(stack_size, int) and isinstance(num_envs, int)
    slots = parse_int(path, "frame_slots", fields["frame_slots"], low=stack_size + 1, high=MAX_SLOTS)
    # The frames still needed lie in the frame ring: at most frame_slots behind the newest.
    parse_int(path, "frame_tail", fields["frame_tail"], low=max(0, written - slots), high=written)
    state = parse_sampler_state(path, fields["sampler_state"])
    sampler = layout["sampler"]
    assert isinstance(sampler, dict)
    if "max_priority" in state and sampler.get("kind") == "prioritized":
        # New transitions get (max_priority + epsilon) ** alpha: it must be a finite float.
        try:
            leaf = (float(state["max_priority"]) + float(sampler["epsilon"])) ** float(sampler["alpha"])  # type: ignore[arg-type]
        except OverflowError:
            leaf = math.inf
        if not math.isfinite(leaf):
            raise _fail(path, "sampler_state.max_priority", "a priority whose leaf (p + epsilon) ** alpha is finite",
                        state["max_priority"])
    return fields
