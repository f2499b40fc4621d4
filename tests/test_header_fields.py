"""Every header field is parsed, not trusted: each refusal names the field, what it holds and what was
expected (the header's CRC is recomputed after each edit, as anyone can)."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

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


def fields_store(path: Path, dtype: str) -> Path:
    """A store with one user field ``h`` of 2 elements, its header then spelling the dtype ``dtype``."""
    ReplayStore.create(path, frame_shape=(2, 3), capacity=8, fields={"h": ((2,), np.dtype(dtype))}).close()
    edit(path, "layout", "fields", [["h", [2], dtype]])
    return path


@pytest.mark.parametrize(("dtype", "values"), [
    (">i4", [1, 258]), ("<i4", [1, 258]), ("int32", [-7, 2**31 - 1]), (">f8", [0.5, -3.25]), ("u1", [0, 255]),
    ("?", [True, False]), ("bool", [True, True]), ("b1", [False, True]), ("|b1", [True, False]),
])
def test_a_user_field_dtype_reads_back_what_was_added_however_the_header_spells_it(
    tmp_path: Path, dtype: str, values: list[object]
) -> None:
    path = fields_store(tmp_path / "s.mmr", dtype)
    with ReplayStore.open(path, "r+") as store:
        for t in range(3):
            store.add(np.zeros((2, 3), np.uint8), 0, 0.0, np.zeros((2, 3), np.uint8), False, False,
                      fields={"h": np.array(values, np.dtype(dtype))})
        assert store.fields["h"][1] == np.dtype(dtype).newbyteorder("=")
    with ReplayStore.open(path) as store:
        read = store.read(np.arange(3)).fields["h"]
    np.testing.assert_array_equal(read, np.array([values] * 3, np.dtype(dtype)))
    assert read.dtype == np.dtype(dtype).newbyteorder("=")


@pytest.mark.parametrize("name", ["checksum", "reward", "not an identifier"])
def test_a_header_field_named_as_the_row_layout_or_a_batch_field_is_refused(tmp_path: Path, name: str) -> None:
    path = fields_store(tmp_path / "s.mmr", "<f4")
    edit(path, "layout", "fields", [[name, [2], "<f4"]])
    with pytest.raises(CorruptStoreError, match=rf"header.json: header field fields holds a field named {name!r}: "
                                                r"field name"):
        ReplayStore.open(path)


SPELLINGS = [f"{order}{kind}{size}" for order in "<>=|" for kind, sizes in (("i", "1248"), ("u", "1248"), ("f", "248"))
             for size in sizes] + ["?", "bool", "b1", "|b1", "int16", "float32", "uint64"]


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from(SPELLINGS), data=st.data())
def test_any_spelling_of_a_field_dtype_stores_values_as_the_plain_dtype_does(
    tmp_path_factory: pytest.TempPathFactory, dtype: str, data: st.DataObject
) -> None:
    values = data.draw(arrays(np.dtype(dtype).newbyteorder("="), (3, 2), elements={"allow_nan": False}))
    path = fields_store(tmp_path_factory.mktemp("spelled") / "s.mmr", dtype)
    with ReplayStore.open(path, "r+") as store:
        for row in values:
            store.add(np.zeros((2, 3), np.uint8), 0, 0.0, np.zeros((2, 3), np.uint8), False, False,
                      fields={"h": row.astype(dtype)})
        np.testing.assert_array_equal(store.read(np.arange(3)).fields["h"], values)
