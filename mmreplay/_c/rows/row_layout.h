/* The transition row's layout, as mmreplay/rows/transitions.py defines it (row_dtype, and the flag
 * constants): passed in from Python once per table, never written here. row_layout(...) checks it and
 * wraps it in a capsule that the row functions take (gather_fields, read_transitions, write_rows). */
#ifndef MMREPLAY_ROW_LAYOUT_H
#define MMREPLAY_ROW_LAYOUT_H

#include <Python.h>

#include <stdint.h>

#include "little_endian.h"

/* Byte offsets of the fields (all little-endian), their widths where they vary, and the flag bits. The
 * checksum (u32) and next_delta (next_delta_bytes: 4 in format version 4, 2 to 4 in version 5) are the
 * row's first `unchecked` bytes, those its checksum leaves out (row_checksum.h); frame_lead (u32), env,
 * reward (f32), flags and action lie after them. env is a field of env_bytes whose value is shifted
 * left by env_shift: version 4 keeps it apart (u1 or u2, shift 0), version 5 packs it with the flags
 * (one little-endian word of 1 to 3 bytes at the flags' offset, the flags in its low 5 bits). */
typedef struct {
    Py_ssize_t size;
    Py_ssize_t checksum, next_delta, frame_lead, env, reward, flags, action;
    int env_bytes;
    Py_ssize_t action_bytes;
    unsigned char terminated, truncated, detached;
    int next_delta_bytes, env_shift;
    Py_ssize_t unchecked;
    int64_t num_envs; /* a row whose env is num_envs or more is damaged, as one that fails its checksum */
} RowLayout;

/* Whether a row's env lies below num_envs (a row that passes its checksum may still name an env the store
 * does not have: a header edited, a checksum recomputed). */
static inline int
row_env_ok(const RowLayout *layout, const unsigned char *row)
{
    return (int64_t)(read_le(row + layout->env, layout->env_bytes) >> layout->env_shift) < layout->num_envs;
}

/* The env of a row. */
static inline int64_t
row_env(const RowLayout *layout, const unsigned char *row)
{
    return (int64_t)(read_le(row + layout->env, layout->env_bytes) >> layout->env_shift);
}

/* The layout in a capsule that row_layout() made; NULL with a TypeError naming `name` for any other object. */
const RowLayout *row_layout_from(PyObject *capsule, const char *name);

/* A transition table as the row functions take it, one argument `rows`: (table, row_slots, layout,
 * version_3), layout row_layout()'s capsule, version_3 whether the rows carry format version 3's sum. */
typedef struct {
    Py_buffer table;
    long long row_slots;
    const RowLayout *layout;
    int version_3;
} RowsArgument;

/* Parses `rows` (the table writable when `writable`): 0, or -1 with a Python error naming function;
 * rows_release must run after a 0, and only then. */
int rows_parse(PyObject *rows, RowsArgument *parsed, int writable, const char *function);
void rows_release(RowsArgument *parsed);

/* row_layout(*, size, checksum, next_delta, frame_lead, env, env_bytes, reward, flags, action, action_bytes,
 *            terminated, truncated, detached, next_delta_bytes, env_shift, num_envs) -> capsule
 *   (mmreplay.rows.transitions.row_layout's fields, by keyword) ValueError, naming the field, when a
 *   field lies outside the row or where the checksum cannot cover it, a width is not one the row may
 *   hold, a flag is not a single bit of its own (below env_shift where env shares the flags' word), or
 *   num_envs is below 1. A row whose env is num_envs or more fails the row functions' checks. */
PyObject *py_row_layout(PyObject *module, PyObject *args, PyObject *kwargs);

#define ROW_LAYOUT_METHODS                                                                                         \
    {"row_layout", (PyCFunction)(void (*)(void))py_row_layout, METH_VARARGS | METH_KEYWORDS,                       \
     "row_layout(*, size, checksum, next_delta, frame_lead, env, env_bytes, reward, flags, action, action_bytes,\n" \
     "           terminated, truncated, detached, next_delta_bytes, env_shift, num_envs) -> capsule\n\n"                    \
     "The transition row's layout (mmreplay.rows.transitions.row_layout), checked, for the row functions."},

#endif
