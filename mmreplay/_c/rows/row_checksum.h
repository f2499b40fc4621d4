/* The checksum of a record tied to its step (mmreplay/rows/checksums.py): a transition row, or any
 * record laid out the same way. A record starts with bytes its checksum leaves out: the checksum itself
 * (u32, little-endian, at byte 0) and bytes its owner may change later (a row's next_delta: 4 bytes in
 * format version 4, 2 to 4 in version 5). Inlined into the loops over a batch's rows. */
#ifndef MMREPLAY_ROW_CHECKSUM_H
#define MMREPLAY_ROW_CHECKSUM_H

#include <Python.h>

#include <stdint.h>

#include "codec/crc32.h"
#include "little_endian.h"

/* Where a record's checksum lies, and how many of its first bytes the checksum leaves out in format
 * version 4 (and version 3): the default of the functions that take no row layout. */
#define RECORD_CHECKSUM_OFFSET 0
#define RECORD_UNCHECKED_BYTES 8

/* Format versions 4 and 5: the CRC-32 (zlib's) of the step as 8 little-endian bytes followed by the
 * record's bytes after its first `unchecked`. */
static inline uint32_t
row_crc(const unsigned char *row, Py_ssize_t row_size, int64_t step, Py_ssize_t unchecked)
{
    unsigned char step_bytes[8];
    write_le(step_bytes, (uint64_t)step, 8);
    const unsigned char *checked = row + unchecked;
    size_t checked_bytes = (size_t)(row_size - unchecked);
#ifdef MMREPLAY_HAVE_SLICE8
    if (checked_bytes < 64) { /* most rows: both parts in the short CRC, inlined */
        return crc32_short(crc32_short(0, step_bytes, 8), checked, checked_bytes);
    }
#endif
    return frame_crc32(frame_crc32(0, step_bytes, 8), checked, checked_bytes);
}

/* Format version 3 (read only): the bytes after the first RECORD_UNCHECKED_BYTES, byte j of them
 * weighted by 2j + 1, plus the step times 2654435761, mod 2**32. */
static inline uint32_t
row_sum_v3(const unsigned char *row, Py_ssize_t row_size, int64_t step)
{
    uint64_t sum = (uint64_t)step * 2654435761u;
    for (Py_ssize_t j = RECORD_UNCHECKED_BYTES; j < row_size; j++) {
        sum += (uint64_t)row[j] * (uint64_t)(2 * (j - RECORD_UNCHECKED_BYTES) + 1);
    }
    return (uint32_t)sum;
}

/* Whether a record of row_size bytes matches the checksum it holds, at step (its first `unchecked`
 * bytes left out; version 3's sum always leaves out 8). */
static inline int
row_matches(const unsigned char *row, Py_ssize_t row_size, int64_t step, int version_3, Py_ssize_t unchecked)
{
    uint32_t expected = version_3 ? row_sum_v3(row, row_size, step) : row_crc(row, row_size, step, unchecked);
    return expected == (uint32_t)read_le(row + RECORD_CHECKSUM_OFFSET, 4);
}

/* row_checksums(rows, row_size, steps, out) -> None: the version 4 checksum of each packed record of
 * rows (n records of row_size bytes) at its step, into out (uint32[n]). */
PyObject *py_row_checksums(PyObject *module, PyObject *args);

#define ROW_CHECKSUM_METHODS                                                                                       \
    {"row_checksums", py_row_checksums, METH_VARARGS,                                                              \
     "row_checksums(rows, row_size, steps, out) -> None\n\n"                                                       \
     "The row checksum (mmreplay.row_checksum) of each packed row at its step, into out (uint32)."},

#endif
