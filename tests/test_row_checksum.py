"""Row checksums catch what they claim: a CRC-32 mixed with the step (format versions 4 and 5) on every
read path.

Rows are damaged byte by byte in a real store file at the offsets docs/formats.md's on-disk layout gives (a
store of one env, an int64 action: rows of 26 bytes in version 4, 23 in version 5, whose next_delta takes
2 bytes in a store this small); version 3 stores, whose rows carry the old position-weighted byte sum,
still open read-only.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import store_files
from mmreplay import CorruptStoreError, FormatVersionError, ReplayStore
from mmreplay.rows.checksums import row_checksum, row_checksums

ROW_BYTES = 26  # format version 4's rows of this file's stores (version 3's too)
FRAME_LEAD, ACTION = 8, 18  # byte offsets inside a version 4 row
# Version 5's (frame_lead after a 2-byte next_delta, then flags, reward and action): 23-byte rows.
V5_ROW_BYTES, V5_FRAME_LEAD, V5_ACTION = 23, 6, 15


def frame(value: int) -> np.ndarray:
    return np.full((2, 3), value % 256, np.uint8)


def build(path: Path, transitions: int = 40, capacity: int = 64, version: int = 5) -> Path:
    with store_files.writing_version(version):
        store = ReplayStore.create(path, frame_shape=(2, 3), capacity=capacity, stack_size=2)
    with store:
        for step in range(transitions):
            obs = np.stack([frame(step), frame(step + 1)])
            next_obs = np.stack([frame(step + 1), frame(step + 2)])
            store.add(obs, step, float(step), next_obs, False, False)
    assert store_files.rows_dtype(path).itemsize == (V5_ROW_BYTES if version == 5 else ROW_BYTES)
    return path


def damage(path: Path, step: int, changes: dict[int, int]) -> None:
    """Add ``delta`` (mod 256) to byte ``offset`` of the row of ``step``, for each offset: delta."""
    row_bytes = store_files.rows_dtype(path).itemsize
    with open(path / "transitions.tbl", "r+b") as file:
        for offset, delta in changes.items():
            file.seek(step * row_bytes + offset)
            byte = file.read(1)[0]
            file.seek(step * row_bytes + offset)
            file.write(bytes([(byte + delta) % 256]))


def test_row_checksum_is_the_crc32_of_the_step_as_8_little_endian_bytes_then_the_body() -> None:
    assert row_checksum(b"abc", 5) == zlib.crc32(b"\x05\x00\x00\x00\x00\x00\x00\x00abc")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.binary(min_size=18, max_size=18), st.integers(0, 2**62)), min_size=1, max_size=20))
def test_row_checksums_of_a_batch_equal_row_checksum_of_each_row(rows: list[tuple[bytes, int]]) -> None:
    records = np.frombuffer(b"".join(body for body, _ in rows), np.uint8).reshape(len(rows), 18)
    steps = np.array([step for _, step in rows], np.int64)
    want = [row_checksum(body[3:], step) for body, step in rows]
    assert row_checksums(records, steps, skip=3).tolist() == want


@pytest.mark.parametrize("version,frame_lead,action", [(4, FRAME_LEAD, ACTION), (5, V5_FRAME_LEAD, V5_ACTION)])
def test_a_compensating_two_byte_change_is_detected_by_read_and_sample(
    tmp_path: Path, version: int, frame_lead: int, action: int
) -> None:
    # The damage: frame_lead's low byte lowered by 21 and the action's raised by 1 (which a
    # position-weighted byte sum of weights 1 and 21 let through).
    # Opening reads the newest rows of each env (4,096 at a time): the damaged row lies before them.
    path = build(tmp_path / "s.mmr", transitions=5000, capacity=5000, version=version)
    damage(path, 17, {frame_lead: -21, action: +1})
    with ReplayStore.open(path) as store:
        with pytest.raises(CorruptStoreError, match="the row of transition 17 fails its checksum"):
            store.read([17])
        with pytest.raises(CorruptStoreError, match="the row of transition 17 fails its checksum"):
            for seed in range(2000):
                store.sample(32, rng=seed)


@pytest.mark.parametrize("version,first,second", [
    (4, 8, 9), (4, 8, 18), (4, 12, 25), (4, 13, 16), (4, 17, 18),
    (5, 6, 7), (5, 6, 15), (5, 10, 22), (5, 10, 11), (5, 14, 15),
])  # fmt: skip
def test_every_pair_of_changed_bytes_tried_is_detected(tmp_path: Path, version: int, first: int, second: int) -> None:
    path = build(tmp_path / "s.mmr", version=version)
    rng = np.random.default_rng(first * 100 + second)
    for step in (3, 9, 30):
        damage(path, step, {first: int(rng.integers(1, 256)), second: int(rng.integers(1, 256))})
    # Opening reads every row of this small store: the first damaged one is named.
    with pytest.raises(CorruptStoreError, match="the row of transition 3 fails its checksum"):
        ReplayStore.open(path).read([3, 9, 30])


def test_an_all_zero_row_at_step_0_fails_its_checksum(tmp_path: Path) -> None:
    path = build(tmp_path / "s.mmr")
    with open(path / "transitions.tbl", "r+b") as file:
        file.write(bytes(V5_ROW_BYTES))
    with pytest.raises(CorruptStoreError, match="the row of transition 0 fails its checksum"):
        ReplayStore.open(path).read([0])


def version_3_sum(row: bytes, step: int) -> int:
    """Format version 3's row checksum, written out: bytes after the first 8 weighted 1, 3, 5, ..."""
    return (sum(byte * (2 * j + 1) for j, byte in enumerate(row[8:])) + step * 2654435761) % 2**32


def make_version_3(path: Path) -> None:
    """Rewrite a closed store as format version 3 wrote it: old row sums, version 3 in the header."""
    header = json.loads((path / "header.json").read_text())
    table = bytearray((path / "transitions.tbl").read_bytes())
    for step in range(header["commit"]["transitions_added"]):
        row = table[step * ROW_BYTES : (step + 1) * ROW_BYTES]
        table[step * ROW_BYTES : step * ROW_BYTES + 4] = version_3_sum(bytes(row), step).to_bytes(4, "little")
    (path / "transitions.tbl").write_bytes(table)
    body = {key: value for key, value in header.items() if key != "checksum"}
    body["format_version"] = 3
    body["checksum"] = zlib.crc32(json.dumps(body, sort_keys=True).encode())
    (path / "header.json").write_text(json.dumps(body))


def test_a_version_3_store_reads_with_its_old_row_checksums(tmp_path: Path) -> None:
    path = build(tmp_path / "s.mmr", version=4)
    with ReplayStore.open(path) as store:
        want = store.read(range(40))
    make_version_3(path)
    with ReplayStore.open(path) as store:
        got = store.read(range(40))
        assert store.sample(8, rng=0).obs.shape == (8, 2, 2, 3)
    np.testing.assert_array_equal(got.obs, want.obs)
    np.testing.assert_array_equal(got.action, want.action)


def test_a_version_3_store_opened_for_appending_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = build(tmp_path / "s.mmr", version=4)
    make_version_3(path)
    before = (path / "header.json").read_bytes(), (path / "transitions.tbl").read_bytes()
    with pytest.raises(FormatVersionError, match=r"format version 3 opens read-only \(mode 'r'\)"):
        ReplayStore.open(path, "r+")
    assert ((path / "header.json").read_bytes(), (path / "transitions.tbl").read_bytes()) == before


def test_a_version_4_header_over_version_3_rows_fails_their_checksums(tmp_path: Path) -> None:
    path = build(tmp_path / "s.mmr", version=4)
    header = (path / "header.json").read_bytes()
    make_version_3(path)
    (path / "header.json").write_bytes(header)
    with pytest.raises(CorruptStoreError, match="fails its checksum"):
        ReplayStore.open(path).read([5])


def test_the_store_and_info_report_the_format_version_of_the_files_not_the_librarys(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = build(tmp_path / "s.mmr", version=4)
    with ReplayStore.open(path) as store:
        assert store.format_version == 4
    make_version_3(path)
    with ReplayStore.open(path) as store:
        assert store.format_version == 3
    shown = subprocess.run([sys.executable, "-m", "mmreplay", "info", "--json", str(path)], capture_output=True,
                           text=True, check=True)
    assert json.loads(shown.stdout)["format_version"] == 3


def test_a_version_4_store_appends_in_version_4_and_reads_back_what_it_was_given(tmp_path: Path) -> None:
    path = build(tmp_path / "s.mmr", transitions=30, version=4)
    with ReplayStore.open(path, "r+") as store:
        assert store.format_version == 4
        for step in range(30, 50):
            store.add(np.stack([frame(step), frame(step + 1)]), step, float(step),
                      np.stack([frame(step + 1), frame(step + 2)]), False, False)
    assert store_files.header_of(path)["format_version"] == 4
    assert (path / "transitions.tbl").stat().st_size == store_files.rows_dtype(path).itemsize * (64 + 1024)
    with ReplayStore.open(path) as store:
        batch = store.read(range(50))
        assert batch.action.tolist() == list(range(50))
        np.testing.assert_array_equal(batch.next_obs[:, -1], np.stack([frame(step + 2) for step in range(50)]))
