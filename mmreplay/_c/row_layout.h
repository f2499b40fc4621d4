/* The transition row's layout, as mmreplay/rows/transitions.py defines it (row_dtype, and the flag
 * constants): passed in from Python once per table, never written here. row_layout(...) checks it and
 * wraps it in a capsule that the row functions take (gather_fields, read_transitions, write_rows). */
#ifndef MMREPLAY_ROW_LAYOUT_H
#define MMREPLAY_ROW_LAYOUT_H

#include <Python.h>

/* Byte offsets of the fields (all little-endian), their widths where they vary, and the flag bits. The
 * checksum (u32) and next_delta (u32) are the row's first 8 bytes, those its checksum leaves out
 * (row_checksum.h); frame_lead (u32), env (u1 or u2), reward (f32), flags (u1) and action lie after them. */
typedef struct {
    Py_ssize_t size;
    Py_ssize_t checksum, next_delta, frame_lead, env, reward, flags, action;
    int env_bytes;
    Py_ssize_t action_bytes;
    unsigned char terminated, truncated, detached;
} RowLayout;

/* The layout in a capsule that row_layout() made; NULL with a TypeError naming `name` for any other object. */
const RowLayout *row_layout_from(PyObject *capsule, const char *name);

/* row_layout(size, checksum, next_delta, frame_lead, env, env_bytes, reward, flags, action, action_bytes,
 *            terminated, truncated, detached) -> capsule (mmreplay.rows.transitions.row_layout's tuple)
 *   ValueError, naming the field, when a field lies outside the row or where the checksum cannot cover
 *   it, a width is not the one the row holds, or a flag is not a single bit of its own. */
PyObject *py_row_layout(PyObject *module, PyObject *args);

#define ROW_LAYOUT_METHODS                                                                                         \
    {"row_layout", py_row_layout, METH_VARARGS,                                                                    \
     "row_layout(size, checksum, next_delta, frame_lead, env, env_bytes, reward, flags, action, action_bytes,\n"   \
     "           terminated, truncated, detached) -> capsule\n\n"                                                  \
     "The transition row's layout (mmreplay.rows.transitions.row_layout), checked, for the row functions."},

#endif
