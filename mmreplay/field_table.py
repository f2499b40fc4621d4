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
import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt

from mmreplay.errors import CorruptStoreError
from mmreplay.files import BlockReservation, create_sparse
from mmreplay.format import FieldSpec

FieldArrays = dict[str, npt.NDArray[np.generic]]


def record_checksums(records: npt.NDArray[np.uint8], steps: npt.NDArray[np.int64]) -> npt.NDArray[np.uint32]:
    """The CRC-32 of each record (an ``(n, width)`` byte array: the bytes a row's checksum covers)
    preceded by its step as 8 little-endian bytes. One small function, so that a compiled CRC can
    replace it; the values are those of the transition rows' checksum of format version 4."""
    prefixes = np.ascontiguousarray(steps, "<i8").tobytes()
    return np.fromiter(
        (zlib.crc32(records[i].tobytes(), zlib.crc32(prefixes[8 * i : 8 * i + 8])) for i in range(len(steps))),
        np.uint32,
        count=len(steps),
    )


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
    return np.dtype([("checksum", "<u4")] + [(name, _stored_dtype(spec)) for spec in specs for name in [spec[0]]])


class FieldTable:
    """User field rows addressed by transition step."""

    def __init__(self, path: Path, *, specs: tuple[FieldSpec, ...], row_slots: int, writable: bool) -> None:
        self.specs = specs
        self.dtype = field_row_dtype(specs)
        expected = row_slots * self.dtype.itemsize
        if not path.is_file() or path.stat().st_size < expected:
            raise CorruptStoreError(f"{path}: field table is missing or shorter than {expected} bytes")
        self.path = path
        self.row_slots = row_slots
        self._mapping = np.memmap(path, dtype=self.dtype, mode="r+" if writable else "r", shape=(row_slots,))
        self._rows: npt.NDArray[np.void] = self._mapping.view(np.ndarray)
        self._reservation = BlockReservation(path) if writable else None

    @classmethod
    def create(cls, path: Path, *, specs: tuple[FieldSpec, ...], row_slots: int) -> FieldTable:
        create_sparse(path, row_slots * field_row_dtype(specs).itemsize)
        return cls(path, specs=specs, row_slots=row_slots, writable=True)

    def write(self, first_step: int, values: FieldArrays) -> None:
        """Write the rows of steps ``first_step, first_step + 1, ...``: ``values[name]`` holds one entry
        per step (already checked against the field's shape and dtype)."""
        assert self._reservation is not None
        count = len(next(iter(values.values())))
        rows = np.zeros(count, self.dtype)
        for name, shape, dtype in self.specs:
            if np.dtype(dtype) == np.bool_:
                rows[name] = np.packbits(values[name].reshape(count, -1), axis=1)
            else:
                rows[name] = values[name]
        steps = np.arange(first_step, first_step + count, dtype=np.int64)
        rows["checksum"] = record_checksums(_checked_bytes(rows), steps)
        self._reservation.ensure(min(first_step + count, self.row_slots) * self.dtype.itemsize)
        self._rows[steps % self.row_slots] = rows

    def read(self, steps: npt.NDArray[np.int64]) -> FieldArrays:
        """Each field of the rows of these steps (any shape of steps: the fields get it as leading axes),
        in native byte order, every row checked against its checksum."""
        flat = np.ascontiguousarray(steps, np.int64).reshape(-1)
        rows = self._rows[flat % self.row_slots]
        bad = rows["checksum"] != record_checksums(_checked_bytes(rows), flat)
        if bad.any():
            step = int(flat[int(np.argmax(bad))])
            raise FieldChecksumError(
                f"{self.path}: the field row of transition {step} fails its checksum (corrupt, or overwritten "
                "since it was located)",
                step=step,
            )
        return self.unpack(rows, np.shape(steps))

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
        del self._rows, self._mapping


def _checked_bytes(rows: npt.NDArray[np.void]) -> npt.NDArray[np.uint8]:
    """The bytes of each row after its checksum, as an ``(n, width)`` array."""
    data = np.ascontiguousarray(rows).view(np.uint8).reshape(len(rows), rows.dtype.itemsize)
    return data[:, 4:]
