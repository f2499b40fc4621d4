/* Reading a sampled batch's transition rows: each row copied out of the table (slot step mod
 * row_slots, as Python's % gives it), the copy checked against its checksum (a writer may overwrite the
 * row meanwhile), then returned or unpacked into the batch's arrays. Index work of a sampled batch,
 * compiled because in numpy it costs several microseconds a call once decoding has pushed numpy out of
 * the CPU caches. The row layout comes from Python (row_layout.h). */
#ifndef MMREPLAY_ROW_GATHER_H
#define MMREPLAY_ROW_GATHER_H

#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "little_endian.h"
#include "rows/row_layout.h"

/* The longest row that is unpacked (through a copy on the stack); longer rows take the numpy path. */
#define ROW_COPY_BYTES 256

/* Copies a row of size bytes (at most ROW_COPY_BYTES) word by word: memcpy of a size known only at run
 * time compiles to `rep movs`, whose start-up costs more than copying a 26-byte row. */
static inline void
copy_row(unsigned char *copy, const unsigned char *row, Py_ssize_t size)
{
    Py_ssize_t k = 0;
    for (; k + 8 <= size; k += 8) {
        memcpy(copy + k, row + k, 8);
    }
    for (; k < size; k++) {
        copy[k] = row[k];
    }
}

/* A batch's arrays that unpack_row fills at index i: env_index int64, reward float32, terminated and
 * truncated bool, action the row's action bytes (action_bytes per row). */
typedef struct {
    int64_t *env_index;
    char *reward;
    unsigned char *terminated, *truncated;
    char *action;
} RowArrays;

/* Unpacks row (a checked copy) into the arrays at index i; returns the row's flags byte. */
static inline unsigned char
unpack_row(const RowLayout *layout, const unsigned char *row, Py_ssize_t i, const RowArrays *arrays)
{
    unsigned char flags = row[layout->flags];
    uint32_t reward_bits = (uint32_t)read_le(row + layout->reward, 4);
    arrays->env_index[i] = row_env(layout, row);
    memcpy(arrays->reward + 4 * i, &reward_bits, 4);
    arrays->terminated[i] = (flags & layout->terminated) != 0;
    arrays->truncated[i] = (flags & layout->truncated) != 0;
    memcpy(arrays->action + i * layout->action_bytes, row + layout->action, (size_t)layout->action_bytes);
    return flags;
}

/* The row's next_obs frame step: its transition step plus frame_lead. */
static inline int64_t
row_next_frame(const RowLayout *layout, const unsigned char *row, int64_t step)
{
    return step + (int64_t)read_le(row + layout->frame_lead, 4);
}

/* gather_rows(table, row_slots, steps, out, version_3=False, unchecked=8) -> int: copies the row of
 *   each step from table into out (n packed rows), checking each copy against its checksum (the CRC
 *   of versions 4 and 5 over the bytes after the first `unchecked`, or version 3's sum): -1 when every
 *   row matches, else the first index that does not. Any record with a checksum (row_checksum.h) of
 *   any size. */
PyObject *py_gather_rows(PyObject *module, PyObject *args);

/* gather_fields(rows, steps, out) -> int
 *   gather_rows, unpacked straight into a batch's arrays, out = (next_frames int64, action the rows'
 *   action bytes, which the caller reads in native order, reward float32, terminated and truncated bool,
 *   env_index int64, detached bool), each copy checked (its checksum, its env below the layout's num_envs):
 *   -1, or the first index that fails. rows: as
 *   row_layout.h's rows_parse takes it. */
PyObject *py_gather_fields(PyObject *module, PyObject *args);

/* prefetch_rows(table, row_slots, steps) -> None: starts fetching the rows of steps (int64) into the
 *   CPU's caches and returns at once, so that their misses (a page walk and a memory read each, in a
 *   table of millions of rows) overlap the caller's work before it reads them (read_transitions). A
 *   hint: steps that are not a buffer of aligned int64 are ignored. */
PyObject *py_prefetch_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#define ROW_GATHER_METHODS                                                                                         \
    {"gather_rows", py_gather_rows, METH_VARARGS,                                                                  \
     "gather_rows(table, row_slots, steps, out, version_3=False, unchecked=8) -> int\n\n"                                       \
     "Copy the rows of these steps into out and check the copies: -1, or the first index that fails."},            \
    {"gather_fields", py_gather_fields, METH_VARARGS,                                                              \
     "gather_fields(rows, steps, out) -> int\n\n"                                                                 \
     "Unpack the rows of these steps into a batch's arrays and check them: -1, or the first index that fails."},   \
    {"prefetch_rows", (PyCFunction)(void (*)(void))py_prefetch_rows, METH_FASTCALL,                                \
     "prefetch_rows(table, row_slots, steps) -> None\n\nStart fetching the rows of these steps into the CPU's caches."},

#endif
