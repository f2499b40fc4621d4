"""Checks of public arguments: each ``parse_*`` returns a normalized value or raises a clear error.

Messages name the argument, what was expected and what was received. ``TypeError`` is for the wrong
kind of thing (dtype, type), ``ValueError`` for the wrong value or shape. Nothing here writes.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable
from typing import Any, SupportsIndex, cast

import numpy as np
import numpy.typing as npt


def parse_positive_int(value: object, name: str) -> int:
    return _parse_int(value, name, low=1)


def parse_non_negative_int(value: object, name: str) -> int:
    return _parse_int(value, name, low=0)


def _parse_int(value: object, name: str, *, low: int) -> int:
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int; got {type(value).__name__} {value!r}") from None
    if number < low:
        raise ValueError(f"{name} must be >= {low}; got {number}")
    return number


# The most threads a batch decodes on: frames/threads.py's MAX_THREADS (the compiled pool's maximum).
MAX_DECODE_THREADS = 64


def parse_decode_threads(value: object) -> int | None:
    """``decode_threads=``: None (the cores this process may use) or a cap from 1 to ``MAX_DECODE_THREADS``."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"decode_threads must be None or an int; got bool {value!r}")
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"decode_threads must be None or an int; got {type(value).__name__} {value!r}") from None
    if not 1 <= number <= MAX_DECODE_THREADS:
        raise ValueError(
            f"decode_threads must be None (the cores this process may use) or 1 to {MAX_DECODE_THREADS}; got {number}"
        )
    return number


def parse_number(value: object, name: str, *, low: float, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number; got {type(value).__name__} {value!r}")
    number = float(value)
    if not (low <= number <= high) or math.isnan(number):
        interval = f"[{low:g}, {high:g}]" if math.isfinite(high) else f">= {low:g}"
        raise ValueError(f"{name} must be {interval}; got {number!r}")
    return number


def parse_shape(value: object, name: str, *, allow_empty: bool) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)):
        value = (value,)
    try:
        shape = tuple(operator.index(n) for n in cast(Iterable[SupportsIndex], value))
    except TypeError:
        raise TypeError(f"{name} must be a tuple of ints; got {value!r}") from None
    if (not shape and not allow_empty) or any(n < 1 for n in shape):
        raise ValueError(f"{name} must be a tuple of positive ints; got {shape}")
    return shape


def parse_action_dtype(value: object) -> np.dtype:
    try:
        dtype: np.dtype[Any] = np.dtype(value)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"action_dtype must be a numpy dtype; got {value!r}") from None
    if dtype.kind not in "iufb":
        raise TypeError(f"action_dtype must be a numeric or bool dtype; got {dtype}")
    return dtype


def parse_frame_dtype(value: object) -> np.dtype:
    """``create``'s ``frame_dtype``: any numpy numeric or bool dtype, as its little-endian equal (frames
    are stored little-endian; a big-endian dtype names the same values)."""
    try:
        dtype: np.dtype[Any] = np.dtype(value)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"frame_dtype must be a numpy dtype; got {value!r}") from None
    if dtype.kind not in "biuf" or dtype.fields is not None or dtype.subdtype is not None:
        raise TypeError(f"frame_dtype must be a bool, integer or float dtype (uint8, float32, bool, ...); got {dtype}")
    return dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype


def parse_rng(rng: object) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, (int, np.integer)):
        return np.random.default_rng(rng)
    raise TypeError(f"rng must be a numpy Generator, an int seed or None; got {type(rng).__name__}")


def check_out(out: object, kind: type) -> None:
    """``out`` is None or a batch of ``kind`` (its arrays are checked where they are filled)."""
    if out is not None and not isinstance(out, kind):
        raise TypeError(f"out must be a {kind.__name__} returned by an earlier call, or None; got {type(out).__name__}")


def parse_mode(mode: object) -> str:
    if mode not in ("r", "r+"):
        raise ValueError(f"mode must be 'r' (read-only) or 'r+' (read and append); got {mode!r}")
    return str(mode)




def parse_steps(value: object, name: str) -> npt.NDArray[np.int64]:
    """A 1-D array of transition steps."""
    array = np.asarray(value)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise TypeError(f"{name} must be a 1-D array of ints; got {array.dtype}{list(array.shape)}")
    return array.astype(np.int64)


def parse_priorities(value: object, *, like: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Priorities, one per step of ``like``: finite and >= 0."""
    array = np.asarray(value)
    if array.dtype.kind not in "iuf":
        raise TypeError(f"priority must be real numbers; got dtype {array.dtype}")
    if array.shape != like.shape:
        raise ValueError(f"priority has shape {array.shape}; expected {like.shape} like index")
    priorities = array.astype(np.float64)
    bad = ~np.isfinite(priorities) | (priorities < 0)
    if bad.any():
        raise ValueError(f"priority must be finite and >= 0; got {priorities[bad][0]!r}")
    return priorities


# Names a user field may not take: the batch records' own fields, and what to_torch names them by.
# The field table's own column beside the user fields in each row (``rows.fields``).
FIELD_ROW_CHECKSUM = "checksum"
# Names no user field may take: the batch records' own fields, and the field table's row layout.
RESERVED_FIELD_NAMES = frozenset(
    {"obs", "action", "reward", "next_obs", "terminated", "truncated", "index", "env_index", "weight", "discount",
     "mask", "fields", FIELD_ROW_CHECKSUM}
)


def field_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a user field (``create``'s rule, which a header's fields must also meet),
    or None when it can."""
    if not isinstance(name, str) or not name.isidentifier():
        return f"field names must be Python identifiers; got {name!r}"
    if name in RESERVED_FIELD_NAMES:
        return f"field name {name!r} is taken by a built-in field or the row layout; reserved: {sorted(RESERVED_FIELD_NAMES)}"
    return None


def field_dtype_string(dtype: np.dtype) -> str:
    """How a user field's dtype is kept (``FieldSpec``): little-endian as ``dtype.str`` spells it, whatever
    the spelling given (``">i4"`` and ``"int32"`` are ``"<i4"``; ``"?"``, ``"bool"`` and ``"b1"`` are
    ``"|b1"``), since the field table stores values little-endian and packs bool fields by that name."""
    return dtype.newbyteorder("<").str


def parse_field_specs(value: object) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    """``create``'s ``fields``: a dict of name -> (shape, dtype), as (name, shape, little-endian dtype string)
    in the dict's order. Names are Python identifiers other than the batch records' own fields; dtypes
    numeric (signed, unsigned, float) or bool."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise TypeError(f"fields must be a dict of name -> (shape, dtype); got {type(value).__name__}")
    specs = []
    for name, entry in value.items():
        problem = field_name_problem(name)
        if problem is not None:
            raise ValueError(problem)
        assert isinstance(name, str)
        if not isinstance(entry, tuple) or len(entry) != 2:
            raise TypeError(f"fields[{name!r}] must be a (shape, dtype) tuple; got {entry!r}")
        shape = parse_shape(entry[0], f"fields[{name!r}] shape", allow_empty=True)
        try:
            dtype: np.dtype[Any] = np.dtype(entry[1])
        except TypeError:
            raise TypeError(f"fields[{name!r}] dtype must be a numpy dtype; got {entry[1]!r}") from None
        if dtype.kind not in "biuf":
            raise TypeError(f"fields[{name!r}] dtype must be a numeric or bool dtype; got {dtype}")
        specs.append((name, shape, field_dtype_string(dtype)))
    return tuple(specs)
