"""The field table: user fields (``create(fields=...)``) in a memory-mapped ring of checksummed rows.

A row holds one transition's user fields, slot = step % row_slots, the same slots as the transition
table, so the store reuses, syncs and commits them together: rows are written with the transition rows,
made durable by ``flush`` before the header that counts them, and only trusted up to that header.

Row layout (little-endian, packed): ``checksum`` u32 (``record_checksums``: a CRC-32 of the step and the
row's other bytes, so a row read at the wrong step, a reused slot, fails), then each field in declaration
order: numeric fields as their little-endian values, bool fields packed 8 to a byte (numpy's
``packbits``, most significant bit first, over the field's elements in C order).

Why no lz4: a float16 GRU state of 2x512 driven by real Pong frames compresses to 0.996x (2,057 bytes
for 2,048; 1.09x even against the previous step's state), and an 18-action bool mask to 17 bytes of
18, where packing bits gives 3. Fixed-size rows also keep a slot's place computable from its step.
"""

from __future__ import annotations

import math
import os

import numpy as np
import numpy.typing as npt

from mmreplay.disk.files import BlockReservation, create_sparse
from mmreplay.disk.header import FieldSpec
from mmreplay.disk.store_directory import FileLocation, map_array, open_sized
from mmreplay.errors import CorruptStoreError
from mmreplay.limits import check_mapping
from mmreplay.rows.checksums import row_checksum, row_checksums
from mmreplay.validation import FIELD_ROW_CHECKSUM

FieldArrays = dict[str, npt.NDArray[np.generic]]


def record_checksums(records: npt.NDArray[np.uint8], steps: npt.NDArray[np.int64]) -> npt.NDArray[np.uint32]:
    """The checksum of each record (an ``(n, width)`` byte array: the bytes a row's checksum covers) at its
    step: the transition rows' checksum of format version 4 (``row_checksum``, compiled where built)."""
    return row_checksums(records, steps)


class FieldChecksumError(CorruptStoreError):
    """A field row does not match its checksum."""

    def __init__(self, message: str, *, step: int) -> None:
        super().__init__(message)
        self.step = step


def _stored_dtype(spec: FieldSpec) -> np.dtype:
    """How one field sits in a row: bool fields packed into bytes, others little-endian."""
    _, shape, dtype = spec
    if np.dtype(dtype) == np.bool_:
        return np.dtype(("u1", (math.ceil(math.prod(shape) / 8),)))
    return np.dtype((np.dtype(dtype).newbyteorder("<"), shape))


def field_row_dtype(specs: tuple[FieldSpec, ...]) -> np.dtype:
    """The packed row layout of these fields."""
    return np.dtype([(FIELD_ROW_CHECKSUM, "<u4")] + [(name, _stored_dtype(spec)) for spec in specs for name in [spec[0]]])


class FieldTable:
    """User field rows addressed by transition step."""

    def __init__(self, path: FileLocation, *, specs: tuple[FieldSpec, ...], row_slots: int, writable: bool) -> None:
        self.specs = specs
        self.dtype = field_row_dtype(specs)
        expected = row_slots * self.dtype.itemsize
        # Opened once, not following a link, and refused unless a regular file (store_directory).
        descriptor = open_sized(path, expected, writable=writable, what="field table")
        try:
            check_mapping(expected, f"{path}: the field table of {row_slots:,} row slots (the header's row_slots)")
            self._mapping = map_array(path, self.dtype, (row_slots,), writable=writable, what="field table",
                                      descriptor=descriptor)
        except BaseException:
            os.close(descriptor)
            raise
        self.path = path
        self.row_slots = row_slots
        # The rows as bytes, (row_slots, row size): plain indexing, without memmap's per-call overhead.
        self._bytes: npt.NDArray[np.uint8] = self._mapping.view(np.ndarray).view(np.uint8).reshape(row_slots, -1)
        self._reservation = BlockReservation(path, descriptor=descriptor) if writable else None
        if not writable:
            os.close(descriptor)

    @classmethod
    def create(cls, path: FileLocation, *, specs: tuple[FieldSpec, ...], row_slots: int) -> FieldTable:
        create_sparse(path, row_slots * field_row_dtype(specs).itemsize)
        return cls(path, specs=specs, row_slots=row_slots, writable=True)

    def write(self, first_step: int, values: FieldArrays) -> None:
        """Write the rows of steps ``first_step, first_step + 1, ...``: ``values[name]`` holds one entry
        per step (already checked against the field's shape and dtype)."""
        assert self._reservation is not None
        count = len(next(iter(values.values())))
        if count == 1:  # one env's add: bytes and one CRC, a third of the numpy path's cost
            body = b"".join(
                np.packbits(values[name].astype(np.bool_, copy=False)).tobytes() if dtype == "|b1" else values[name].astype(dtype, copy=False).tobytes()
                for name, _, dtype in self.specs
            )
            checksum = row_checksum(body, first_step)
            slot = first_step % self.row_slots
            self._reservation.ensure(min(first_step + 1, self.row_slots) * self.dtype.itemsize)
            self._bytes[slot] = np.frombuffer(checksum.to_bytes(4, "little") + body, np.uint8)
            return
        parts = [np.empty((count, 4), np.uint8)]
        for name, _, dtype in self.specs:
            value = values[name].reshape(count, -1)
            if value.dtype == np.bool_:
                parts.append(np.packbits(value.astype(np.bool_, copy=False), axis=1))
            else:
                parts.append(value.astype(dtype, copy=False).view(np.uint8).reshape(count, -1))
        rows = np.concatenate(parts, axis=1) if len(parts) > 2 or count > 1 else None
        if rows is None:  # one row of one field: no concatenation
            rows = np.empty((1, self.dtype.itemsize), np.uint8)
            rows[:, 4:] = parts[1]
        steps = np.arange(first_step, first_step + count, dtype=np.int64)
        rows[:, :4] = record_checksums(rows[:, 4:], steps).astype("<u4").view(np.uint8).reshape(count, 4)
        self._reservation.ensure(min(first_step + count, self.row_slots) * self.dtype.itemsize)
        slot = first_step % self.row_slots
        if slot + count <= self.row_slots:
            self._bytes[slot : slot + count] = rows
        else:
            self._bytes[steps % self.row_slots] = rows

    def read(self, steps: npt.NDArray[np.int64]) -> FieldArrays:
        """Each field of the rows of these steps (any shape of steps: the fields get it as leading axes),
        in native byte order, every row checked against its checksum."""
        flat = np.ascontiguousarray(steps, np.int64).reshape(-1)
        rows = self._bytes[flat % self.row_slots]
        bad = rows[:, :4].copy().view("<u4").reshape(-1) != record_checksums(rows[:, 4:], flat)
        if bad.any():
            step = int(flat[int(np.argmax(bad))])
            raise FieldChecksumError(
                f"{self.path}: the field row of transition {step} fails its checksum (corrupt, or overwritten "
                "since it was located)",
                step=step,
            )
        return self.unpack(rows.view(self.dtype).reshape(-1), np.shape(steps))

    def damaged(self, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which of the field rows of these steps fail their checksum (``read`` would refuse them)."""
        flat = np.ascontiguousarray(steps, np.int64).reshape(-1)
        rows = self._bytes[flat % self.row_slots]
        bad: npt.NDArray[np.bool_] = rows[:, :4].copy().view("<u4").reshape(-1) != record_checksums(rows[:, 4:], flat)
        return bad

    def offset_of(self, step: int) -> int:
        """The byte offset of the field row of ``step`` in the table's file."""
        return (step % self.row_slots) * self.dtype.itemsize

    def unpack(self, rows: npt.NDArray[np.void], batch_shape: tuple[int, ...]) -> FieldArrays:
        """The fields of packed rows, shaped ``(*batch_shape, *field_shape)``."""
        arrays: FieldArrays = {}
        for name, shape, dtype in self.specs:
            if np.dtype(dtype) == np.bool_:
                bits = np.unpackbits(rows[name], axis=1, count=math.prod(shape))
                arrays[name] = bits.astype(np.bool_).reshape(*batch_shape, *shape)
            else:
                arrays[name] = rows[name].astype(np.dtype(dtype).newbyteorder("=")).reshape(*batch_shape, *shape)
        return arrays

    def sync(self) -> None:
        self._mapping.flush()

    def close(self) -> None:
        self._mapping.flush()
        if self._reservation is not None:
            self._reservation.close()
        del self._bytes, self._mapping
