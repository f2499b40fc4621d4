"""The frame table's entries: where a stored frame's bytes are, their length, their CRC-32 and its seed,
and the frame's links (``prev_delta``, the previous frame of its episode; ``ref_delta``, a reference
frame's distance), with their dtype in each format version, their layout for the compiled code and their
fields packed and read back in Python. The ring (``frames.ring``) stores and reads them."""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt

from mmreplay.disk.packed_fields import byte_width, read_uint, uint_field, write_uint

SEED_MULTIPLIER = 2654435761  # Knuth's multiplicative hash constant: spreads steps over 32 bits
REF_SEED_MULTIPLIER = 2246822519  # xxHash's PRIME32_2 (odd: each 16-bit ref_delta moves the seed apart)
_U2_LIMIT = 1 << 16


def worst_block(frame_nbytes: int, *, extra: int = 0) -> int:
    """The most bytes a stored frame of ``frame_nbytes`` takes: lz4's worst case for one block (n + n/255 +
    16), plus ``extra`` (what a reference frame's block holds besides: ``reference_codec.block_extra``)."""
    return frame_nbytes + frame_nbytes // 255 + 16 + extra


def link_bits(frame_slots: int, max_distance: int | None) -> tuple[int, int]:
    """Format version 5: the bits of an entry's ``links`` that hold ``prev_delta`` and ``ref_delta``.
    A followed ``prev_delta`` joins two frames both still in the ring, less than ``frame_slots`` apart; a
    ``ref_delta`` is at most ``max_distance`` (None: a plain ring, none)."""
    return frame_slots.bit_length(), 0 if max_distance is None else max_distance.bit_length()


def frame_entry(
    frame_nbytes: int, *, frame_slots: int, version: int, max_distance: int | None = None, extra: int = 0
) -> np.dtype:
    """The frame table's entry dtype (packed, little-endian) of format ``version`` for frames of
    ``frame_nbytes`` bytes in a table of ``frame_slots`` entries; ``max_distance``: a reference ring's
    (its entries hold ``ref_delta`` too), None for a plain ring; ``extra``: see ``worst_block``.

    ``length`` is a u2 where every stored frame fits one (``worst_block``: 84x84 frames), else a u4.
    Versions 3 and 4: ``position`` u8, ``length``, ``checksum`` u4, ``prev_delta`` u4, and a reference ring's
    ``ref_delta`` u2. Version 5: ``position`` as its low 32 bits (u4) where every frame a reader may read
    lies less than 2**32 bytes below ``bytes_written`` (``2 * frame_slots * worst_block`` below it: the
    frames in the ring and the room each left at a segment's end), else u8; ``length``; ``checksum``; and
    ``links``, ``prev_delta`` in its low bits and ``ref_delta`` above (``link_bits``), in as few bytes as
    they need: 3 for a plain ring of up to 16M slots, 4 for a reference ring of up to 128K slots.
    """
    worst = worst_block(frame_nbytes, extra=extra)
    length = "<u2" if worst < _U2_LIMIT else "<u4"
    if version < 5:
        fields = [("position", "<u8"), ("length", length), ("checksum", "<u4"), ("prev_delta", "<u4")]
        return np.dtype(fields + [("ref_delta", "<u2")] if max_distance is not None else fields)
    prev_bits, ref_bits = link_bits(frame_slots, max_distance)
    position = "<u4" if 2 * frame_slots * worst < (1 << 32) else "<u8"
    return np.dtype([("position", position), ("length", length), ("checksum", "<u4"),
                     ("links", uint_field(byte_width((1 << (prev_bits + ref_bits)) - 1)))])


def _entry_layout(entry: np.dtype, prev_bits: int, ref_bits: int) -> tuple[int, ...]:
    """The entry as the compiled code reads it (_c/ring/frame_table.h, EntryLayout): its size; the byte
    offsets of position, length, checksum and the link (prev_delta); length's width; position's; the
    link field's width and its bits that hold prev_delta; ref_delta's field offset, width (0: none),
    shift and bits."""
    assert entry.fields is not None
    offset = {name: entry.fields[name][1] for name in entry.names or ()}
    packed = "links" in offset
    link = "links" if packed else "prev_delta"
    ref = "links" if packed and ref_bits else "ref_delta" if "ref_delta" in offset else None
    return (
        entry.itemsize, offset["position"], offset["length"], offset["checksum"], offset[link],
        entry["length"].itemsize, entry["position"].itemsize, entry[link].itemsize, prev_bits,
        offset[ref] if ref else 0, entry[ref].itemsize if ref else 0, prev_bits if packed else 0, ref_bits,
    )


class EntryFormat:
    """The entries of one frame table: their dtype (``frame_entry``), their layout for the compiled code
    (``layout``, part of the ring's geometry), and their fields packed and read back in Python, in any
    format version."""

    def __init__(
        self, frame_nbytes: int, *, frame_slots: int, version: int, max_distance: int | None, extra: int
    ) -> None:
        self.dtype = frame_entry(frame_nbytes, frame_slots=frame_slots, version=version, max_distance=max_distance,
                                 extra=extra)
        self.size = self.dtype.itemsize
        self.references = max_distance is not None
        self.packed = version >= 5
        self.prev_bits, self.ref_bits = link_bits(frame_slots, max_distance) if self.packed else (32, 16)
        self.layout = _entry_layout(self.dtype, self.prev_bits, self.ref_bits if self.references else 0)
        codes = {"<u8": "Q", "<u4": "I", "<u2": "H"}
        if self.packed:  # position, length and checksum; the links after them, of any width
            self._head = struct.Struct("<" + "".join(codes[self.dtype[name].str] for name in ("position", "length",
                                                                                             "checksum")))
            self._link_bytes = self.dtype["links"].itemsize
            self._position_mask = (1 << (8 * self.dtype["position"].itemsize)) - 1
        else:
            names = self.dtype.names or ()
            self._head = struct.Struct("<" + "".join(codes[self.dtype[name].str] for name in names))
        assert self.packed or self._head.size == self.size

    def pack_into(
        self, buffer: memoryview, offset: int, position: int, length: int, checksum: int, prev: int, ref: int
    ) -> None:
        """Write one entry's fields at ``offset`` of ``buffer``."""
        if not self.packed:
            if self.references:
                self._head.pack_into(buffer, offset, position, length, checksum, prev, ref)
            else:
                self._head.pack_into(buffer, offset, position, length, checksum, prev)
            return
        self._head.pack_into(buffer, offset, position & self._position_mask, length, checksum)
        start = offset + self._head.size
        buffer[start : start + self._link_bytes] = write_uint(prev | ref << self.prev_bits, self._link_bytes)

    def positions(self, entries: npt.NDArray[np.void], bytes_written: int) -> npt.NDArray[np.uint64]:
        """Each entry's ring position; a position stored as its low 32 bits lies below ``bytes_written`` by
        less than 2**32 (a damaged one may come out above it, or past 2**63: callers check both)."""
        stored = entries["position"].astype(np.uint64)
        if not self.packed or self.dtype["position"].itemsize == 8:
            return stored
        written = np.uint64(bytes_written)
        return written - ((written - stored) & np.uint64(self._position_mask))

    def prev_deltas(self, entries: npt.NDArray[np.void]) -> npt.NDArray[np.int64]:
        """Each entry's ``prev_delta``."""
        if not self.packed:
            return entries["prev_delta"].astype(np.int64)
        return read_uint(entries, "links") & ((1 << self.prev_bits) - 1)

    def ref_deltas(self, entries: npt.NDArray[np.void]) -> npt.NDArray[np.int64]:
        """Each entry's ``ref_delta`` (0 in a plain ring's)."""
        if not self.references:
            return np.zeros(entries.shape, np.int64)
        if not self.packed:
            return entries["ref_delta"].astype(np.int64)
        return (read_uint(entries, "links") >> self.prev_bits) & ((1 << self.ref_bits) - 1)

    def pack(
        self, positions: npt.NDArray[np.uint64], lengths: npt.NDArray[np.int64], checksums: npt.NDArray[np.uint32],
        prevs: npt.NDArray[np.int64], refs: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.void]:  # fmt: skip
        """Entries of these fields, as an array of ``dtype`` (a new generation's, copied from the old one)."""
        entries = np.zeros(len(positions), self.dtype)
        entries["length"], entries["checksum"] = lengths, checksums
        if not self.packed:
            entries["position"], entries["prev_delta"] = positions, prevs
            if self.references:
                entries["ref_delta"] = refs
            return entries
        entries["position"] = positions & np.uint64(self._position_mask)
        links = (prevs.astype(np.uint64) | (refs.astype(np.uint64) << np.uint64(self.prev_bits)))
        if self.dtype["links"].subdtype is None:
            entries["links"] = links
        else:
            shifts = np.uint64(8) * np.arange(self._link_bytes, dtype=np.uint64)
            entries["links"] = ((links[:, None] >> shifts) & np.uint64(0xFF)).astype(np.uint8)
        return entries


def frame_seed(
    frame_step: npt.ArrayLike, prev_delta: npt.ArrayLike, ref_delta: npt.ArrayLike = 0
) -> npt.NDArray[np.int64]:
    """The CRC seed of a frame: binds its checksum to its step, its episode link and its reference link."""
    seed = np.asarray(frame_step, np.int64) * SEED_MULTIPLIER + np.asarray(prev_delta, np.int64)
    return (seed + np.asarray(ref_delta, np.int64) * REF_SEED_MULTIPLIER) & 0xFFFFFFFF
