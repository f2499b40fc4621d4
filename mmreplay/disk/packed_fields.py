"""Little-endian unsigned fields of any width from 1 to 8 bytes, in the structured numpy records of the
store's binary files (transition rows, frame-table entries): numpy's own integer where it has one (1, 2, 4
or 8 bytes), else that many bytes, which ``read_uint`` combines. Format version 5 sizes such fields by what
they must hold (``byte_width``) instead of rounding them up to 4 or 8 bytes."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def uint_field(width: int) -> Any:
    """The numpy field of a little-endian unsigned integer of ``width`` bytes (1 to 8)."""
    if not 1 <= width <= 8:
        raise ValueError(f"width is {width}; expected 1 to 8 bytes")
    return {1: np.dtype("u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<u8")}.get(width, ("u1", (width,)))


def byte_width(largest: int) -> int:
    """The bytes an unsigned field needs to hold every value up to ``largest`` (at least 1)."""
    return max(1, (int(largest).bit_length() + 7) // 8)


def read_uint(records: npt.NDArray[np.void], name: str) -> npt.NDArray[np.int64]:
    """The values of the ``uint_field`` column ``name`` of structured ``records`` (any shape), as int64
    (fields of 8 bytes hold values below 2**63 here: steps and byte positions)."""
    values = records[name]
    if records.dtype[name].subdtype is None:
        return values.astype(np.int64)
    weights = np.left_shift(np.int64(1), 8 * np.arange(values.shape[-1], dtype=np.int64))
    combined: npt.NDArray[np.int64] = (values.astype(np.int64) * weights).sum(axis=-1)
    return combined


def write_uint(value: int, width: int) -> bytes:
    """``value`` as ``width`` little-endian bytes."""
    return int(value).to_bytes(width, "little")
