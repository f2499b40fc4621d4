"""A corrupt frame is reported precisely, through the batch decoder, and never keeps the store from closing.

Frames encode their own step (every pixel of the frame of transition t's next_obs is t % 251), so each
test knows which frame, transition and file a flipped byte belongs to. The frame table's entries are
located through the layout docs/formats.md documents (format version 5: 12-byte entries for frames this
small in a table this small: position's low 32 bits, length u2, checksum u32, links u2, and 14 bytes with
links u4 where they hold ref_delta, frames compressed against a reference; slot = frame step %
frame_slots). Each test runs on both frame encodings.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import store_files

from mmreplay import CorruptStoreError, ReplayStore

FRAME_SHAPE = (6, 5)
ENTRY_BYTES = {"lz4": 12, "lz4-reference": 14}
POSITION, CHECKSUM = 0, 6  # byte offsets in an entry

encodings = pytest.mark.parametrize("encoding", list(ENTRY_BYTES))


def build(path: Path, encoding: str, transitions: int = 40) -> None:
    with ReplayStore.create(path, frame_shape=FRAME_SHAPE, capacity=100, stack_size=3, frame_encoding=encoding) as store:
        for t in range(transitions):
            obs = np.full(FRAME_SHAPE, t % 251, np.uint8)
            store.add(obs, 0, 0.0, np.full(FRAME_SHAPE, (t + 1) % 251, np.uint8), False, False)
    entries = store_files.entry_format(path).dtype
    assert entries.itemsize == ENTRY_BYTES[encoding] and store_files.field_offsets(entries)["checksum"] == CHECKSUM


def commit(path: Path) -> dict[str, int]:
    return json.loads((path / "header.json").read_text())["commit"]


def flip_entry_byte(path: Path, frame_step: int, offset: int, mask: int) -> None:
    header = commit(path)
    table = path / f"frames-{header['frame_table_generation']}.idx"
    entry_bytes = store_files.entry_format(path).dtype.itemsize
    with open(table, "r+b") as file:
        file.seek((frame_step % header["frame_slots"]) * entry_bytes + offset)
        byte = file.read(1)[0]
        file.seek(-1, 1)
        file.write(bytes([byte ^ mask]))


@encodings
@pytest.mark.parametrize("byte", [2, 3])  # the position's low 32 bits: moved past every byte written
def test_a_position_past_the_written_bytes_names_the_frame_table_the_frame_and_the_transition(
    tmp_path: Path, byte: int, encoding: str
) -> None:
    path = tmp_path / "store.mmr"
    build(path, encoding)
    newest_frame = commit(path)["frames_written"] - 1  # the next_obs frame of transition 39
    flip_entry_byte(path, newest_frame, POSITION + byte, 0x80)
    with ReplayStore.open(path, "r") as store:
        with pytest.raises(CorruptStoreError) as raised:
            store.read(np.array([39]))
    message = str(raised.value)
    assert f"frame {newest_frame}:" in message and "frames-0.idx" in message, message
    assert "(read for transition 39)" in message and "beyond the" in message, message


@encodings
def test_a_flipped_segment_byte_names_the_frame_the_segment_and_the_transition(tmp_path: Path, encoding: str) -> None:
    path = tmp_path / "store.mmr"
    build(path, encoding)
    newest_frame = commit(path)["frames_written"] - 1
    with ReplayStore.open(path, "r") as store:
        store.read(np.array([39]))  # maps the segment: the next read takes the decoder's fast path
    entry = store_files.frame_table(path)[newest_frame : newest_frame + 1]
    position = int(store_files.entry_format(path).positions(entry, commit(path)["bytes_written"])[0])
    segment = path / "frames" / f"{0:010d}.seg"
    data = bytearray(segment.read_bytes())
    data[position + 1] ^= 0x01
    segment.write_bytes(bytes(data))
    with ReplayStore.open(path, "r") as store:
        good = store.read(np.array([10]))
        assert (good.next_obs[0, -1] == 11).all()
        with pytest.raises(CorruptStoreError, match=rf"^frame {newest_frame} fails its checksum( or does not decode)?: .*0000000000\.seg or "
                           r".*frames-0\.idx is corrupt, .* \(read for transition 39\)$"):
            store.read(np.array([10, 39]))


@encodings
def test_a_store_closes_all_its_files_while_an_error_from_a_corrupt_frame_is_kept(tmp_path: Path, encoding: str) -> None:
    path = tmp_path / "store.mmr"
    build(path, encoding)
    flip_entry_byte(path, commit(path)["frames_written"] - 1, CHECKSUM, 0x01)
    store = ReplayStore.open(path, "r")  # opening decodes no frame
    kept = []
    for _ in range(2):
        try:
            store.sample(64, rng=0)
        except CorruptStoreError as error:
            kept.append(error)
    assert kept
    store.close()
    assert store.closed


@encodings
def test_a_writer_with_a_corrupt_newest_frame_opens_and_reports_it_at_the_first_add(tmp_path: Path, encoding: str) -> None:
    path = tmp_path / "store.mmr"
    build(path, encoding)
    flip_entry_byte(path, commit(path)["frames_written"] - 1, CHECKSUM, 0x01)
    with ReplayStore.open(path, "r+") as store:
        with pytest.raises(CorruptStoreError, match=r"\(read for transition 39\)"):
            store.add(np.zeros(FRAME_SHAPE, np.uint8), 0, 0.0, np.ones(FRAME_SHAPE, np.uint8), False, False)
        assert store.transitions_added == 40
