"""Every header field is parsed, not trusted: each refusal names the field, what it holds and what was
expected (the header's CRC is recomputed after each edit, as anyone can)."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mmreplay import CorruptStoreError, ReplayStore


def build(path: Path) -> Path:
    with ReplayStore.create(path, frame_shape=(2, 3), capacity=8, stack_size=2) as store:
        store.add(np.zeros((2, 2, 3), np.uint8), 1, 0.0, np.zeros((2, 2, 3), np.uint8), False, False)
    return path


def edit(path: Path, section: str, field: str, value: Any) -> None:
    header = json.loads((path / "header.json").read_text())
    body = {key: item for key, item in header.items() if key != "checksum"}
    body[section][field] = value
    body["checksum"] = zlib.crc32(json.dumps(body, sort_keys=True).encode())
    (path / "header.json").write_text(json.dumps(body))


@pytest.mark.parametrize("dtype", ["|O", "V8", "M8[s]", "(2,)i4", "S4"])
def test_an_action_dtype_that_is_not_numeric_or_bool_is_refused(tmp_path: Path, dtype: str) -> None:
    path = build(tmp_path / "s.mmr")
    edit(path, "layout", "action_dtype", dtype)
    with pytest.raises(CorruptStoreError, match=r"header field action_dtype is .*; expected a numeric or bool dtype "
                                                r"string \(kinds biuf\)"):
        ReplayStore.open(path)


def test_a_frame_table_generation_that_is_not_an_integer_is_refused_and_nothing_outside_is_touched(
    tmp_path: Path,
) -> None:
    path = build(tmp_path / "store" / "s.mmr")
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (path / "frames-..").mkdir()
    edit(path, "commit", "frame_table_generation", "../../../victim")
    for mode in ("r", "r+"):
        with pytest.raises(CorruptStoreError, match=r"header field frame_table_generation is '\.\./\.\./\.\./victim'; "
                                                    r"expected an integer in \[0, 4611686018427387904\]"):
            ReplayStore.open(path, mode)
    assert victim.read_bytes() == b"keep" and (path / "frames-0.idx").exists()


@pytest.mark.parametrize("section,field,value,expected", [
    ("layout", "capacity", -1, r"header field capacity is -1; expected an integer in \[1, 1099511627776\]"),
    ("layout", "stack_size", 1.5, r"header field stack_size is 1.5; expected an integer in"),
    ("layout", "num_envs", True, r"header field num_envs is True; expected an integer in \[1, 8\]"),
    ("layout", "frame_shape", [0, 3], r"header field frame_shape is 0; expected an integer in \[1, 1073741824\]"),
    ("commit", "frames_written", 0, r"header field frames_written is 0; expected an integer in \[1, "),
    ("commit", "frame_slots", 2, r"header field frame_slots is 2; expected an integer in \[3, "),
    ("layout", "sampler", {"kind": "prioritized"}, r"header field sampler is \{'kind': 'prioritized'\}; expected"),
])
def test_a_field_out_of_its_range_or_type_is_named_with_what_was_expected(
    tmp_path: Path, section: str, field: str, value: Any, expected: str
) -> None:
    path = build(tmp_path / "s.mmr")
    edit(path, section, field, value)
    with pytest.raises(CorruptStoreError, match=expected):
        ReplayStore.open(path)
