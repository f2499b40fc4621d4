"""The binary files of a store as its header lays them out, for tests that read or damage them directly:
the frame table's entries of the store's format version (``frames.frame_entries.EntryFormat``) and the rows of its
transition table (``rows.transitions.row_dtype``)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from mmreplay.disk import header
from mmreplay.frames.frame_entries import EntryFormat
from mmreplay.frames import legacy_frames, reference_codec
from mmreplay.rows.transitions import row_dtype


def header_of(path: Path) -> dict:
    return json.loads((Path(path) / "header.json").read_text())


def entry_format(path: Path) -> EntryFormat:
    """The entries of the store's current frame table."""
    document = header_of(path)
    layout, commit, version = document["layout"], document["commit"], document["format_version"]
    dtype = np.dtype(layout.get("frame_dtype", "|u1"))
    frame_nbytes = math.prod(layout["frame_shape"]) * dtype.itemsize
    scheme = layout.get("reference_scheme")
    shape = tuple(layout["frame_shape"])
    extra = 0 if scheme is None or version < 5 else (
        reference_codec.block_extra(shape) if version >= 6 else legacy_frames.changed_rows_bound(shape))
    return EntryFormat(
        frame_nbytes, frame_slots=commit["frame_slots"], version=version,
        max_distance=None if scheme is None else scheme["max_distance"], extra=extra,
    )


def frame_table_path(path: Path) -> Path:
    return Path(path) / f"frames-{header_of(path)['commit']['frame_table_generation']}.idx"


def frame_table(path: Path) -> np.ndarray:
    """The store's frame table, as its entries lay it out."""
    return np.fromfile(frame_table_path(path), dtype=entry_format(path).dtype)


def set_links(path: Path, frame: int, *, prev_delta: int | None = None, ref_delta: int | None = None) -> None:
    """Rewrite a frame's prev_delta or ref_delta in place, leaving its checksum as it was (damage)."""
    entries = entry_format(path)
    table_path = frame_table_path(path)
    table = np.fromfile(table_path, dtype=entries.dtype)
    slot = frame % len(table)
    entry = table[slot : slot + 1]
    prev = int(entries.prev_deltas(entry)[0]) if prev_delta is None else prev_delta
    ref = int(entries.ref_deltas(entry)[0]) if ref_delta is None else ref_delta
    written = int(header_of(path)["commit"]["bytes_written"])
    table[slot] = entries.pack(entries.positions(entry, written), entry["length"].astype(np.int64),
                               entry["checksum"], np.array([prev]), np.array([ref]))[0]
    table.tofile(table_path)


def rows_dtype(path: Path) -> np.dtype:
    """The dtype of the store's transition rows."""
    document = header_of(path)
    layout = document["layout"]
    return row_dtype(tuple(layout["action_shape"]), np.dtype(layout["action_dtype"]), layout["num_envs"],
                     row_slots=layout["row_slots"], version=document["format_version"])


@contextmanager
def writing_version(version: int) -> Iterator[None]:
    """Stores created meanwhile are of format ``version`` (an older store for the tests that read one)."""
    original = header.new_store

    def new_store(**arguments: object) -> tuple[header.Layout, header.Commit]:
        return original(**arguments, format_version=version)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(header, "new_store", new_store)
        yield


def field_offsets(dtype: np.dtype) -> dict[str, int]:
    """Each field's byte offset in a record of ``dtype``."""
    assert dtype.fields is not None
    return {name: int(dtype.fields[name][1]) for name in dtype.names or ()}
