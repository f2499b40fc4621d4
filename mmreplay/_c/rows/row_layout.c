/* The transition row's layout, passed in from Python: see row_layout.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>

#include "rows/row_checksum.h"
#include "rows/row_layout.h"

#define CAPSULE_NAME "mmreplay._lz4batch.RowLayout"

static void
free_layout(PyObject *capsule)
{
    PyMem_Free(PyCapsule_GetPointer(capsule, CAPSULE_NAME));
}

const RowLayout *
row_layout_from(PyObject *capsule, const char *name)
{
    if (!PyCapsule_IsValid(capsule, CAPSULE_NAME)) {
        PyErr_Format(PyExc_TypeError, "%s must be a row layout that row_layout() made; got %s", name,
                     Py_TYPE(capsule)->tp_name);
        return NULL;
    }
    return (const RowLayout *)PyCapsule_GetPointer(capsule, CAPSULE_NAME);
}

/* 0 when the field [offset, offset + width) lies after the row's first `unchecked` bytes and inside its size. */
static int
check_field(const char *name, Py_ssize_t offset, Py_ssize_t width, Py_ssize_t size, Py_ssize_t unchecked)
{
    if (offset < unchecked || width < 1 || offset > size - width) {
        PyErr_Format(PyExc_ValueError,
                     "row layout: %s at byte %zd (%zd bytes) does not lie in bytes %zd to %zd of the row (after "
                     "the checksum and next_delta)", name, offset, width, unchecked, size);
        return -1;
    }
    return 0;
}

static int
check_flag(const char *name, Py_ssize_t bit, Py_ssize_t taken, Py_ssize_t below)
{
    if (bit < 1 || bit >= below || (bit & (bit - 1)) != 0 || (bit & taken) != 0) {
        PyErr_Format(PyExc_ValueError, "row layout: flag %s is %zd; expected a single bit (1 to 128) of its own",
                     name, bit);
        return -1;
    }
    return 0;
}

int
rows_parse(PyObject *rows, RowsArgument *parsed, int writable, const char *function)
{
    PyObject *layout;
    *parsed = (RowsArgument){0};
    if (!PyTuple_Check(rows) || !PyArg_ParseTuple(rows, writable ? "w*LOp" : "y*LOp", &parsed->table,
                                                  &parsed->row_slots, &layout, &parsed->version_3)) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: rows must be (table, row_slots, layout, version_3)", function);
        }
        return -1;
    }
    parsed->layout = row_layout_from(layout, "layout");
    if (parsed->layout != NULL
        && (parsed->row_slots <= 0 || parsed->table.len != parsed->row_slots * parsed->layout->size)) {
        PyErr_Format(PyExc_ValueError, "%s: the table has %zd bytes; expected %lld rows of %zd bytes", function,
                     parsed->table.len, parsed->row_slots, parsed->layout->size);
        parsed->layout = NULL;
    }
    if (parsed->layout == NULL) {
        PyBuffer_Release(&parsed->table);
        return -1;
    }
    return 0;
}

void
rows_release(RowsArgument *parsed)
{
    PyBuffer_Release(&parsed->table);
}

PyObject *
py_row_layout(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    static char *keywords[] = {"size", "checksum", "next_delta", "frame_lead", "env", "env_bytes", "reward", "flags",
                               "action", "action_bytes", "terminated", "truncated", "detached", "next_delta_bytes",
                               "env_shift", "num_envs", NULL};
    Py_ssize_t f[16];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$nnnnnnnnnnnnnnnn:row_layout", keywords, &f[0], &f[1], &f[2],
                                     &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], &f[9], &f[10], &f[11], &f[12], &f[13],
                                     &f[14], &f[15])) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(args) != 0 || kwargs == NULL || PyDict_GET_SIZE(kwargs) != 16) {
        PyErr_SetString(PyExc_TypeError, "row_layout takes its 16 fields by keyword");
        return NULL;
    }
    if (f[15] < 1) {
        PyErr_Format(PyExc_ValueError, "row layout: num_envs is %zd; expected at least 1", f[15]);
        return NULL;
    }
    Py_ssize_t size = f[0], env_bytes = f[5], next_delta_bytes = f[13], env_shift = f[14];
    Py_ssize_t unchecked = RECORD_CHECKSUM_OFFSET + 4 + next_delta_bytes;
    if (next_delta_bytes < 2 || next_delta_bytes > 4) {
        PyErr_Format(PyExc_ValueError, "row layout: next_delta is %zd bytes wide; expected 2 to 4", next_delta_bytes);
        return NULL;
    }
    if (f[1] != RECORD_CHECKSUM_OFFSET || f[2] != RECORD_CHECKSUM_OFFSET + 4) {
        PyErr_Format(PyExc_ValueError, "row layout: checksum at byte %zd and next_delta at byte %zd; expected %d "
                     "and %d, the first %zd bytes, which the row checksum leaves out", f[1], f[2],
                     RECORD_CHECKSUM_OFFSET, RECORD_CHECKSUM_OFFSET + 4, unchecked);
        return NULL;
    }
    if (env_shift != 0 && (env_shift != 5 || f[4] != f[7])) {
        PyErr_Format(PyExc_ValueError, "row layout: env shifted by %zd bits at byte %zd; expected 0, or 5 in the "
                     "flags' word (byte %zd)", env_shift, f[4], f[7]);
        return NULL;
    }
    if (env_bytes < 1 || env_bytes > (env_shift ? 3 : 2)) {
        PyErr_Format(PyExc_ValueError, "row layout: env is %zd bytes wide; expected 1 or 2, or up to 3 with the flags",
                     env_bytes);
        return NULL;
    }
    Py_ssize_t below = env_shift ? (Py_ssize_t)1 << env_shift : 256; /* flag bits lie below env's */
    if (check_field("frame_lead", f[3], 4, size, unchecked) < 0 || check_field("env", f[4], env_bytes, size, unchecked) < 0
        || check_field("reward", f[6], 4, size, unchecked) < 0 || check_field("flags", f[7], 1, size, unchecked) < 0
        || check_field("action", f[8], f[9], size, unchecked) < 0 || check_flag("terminated", f[10], 0, below) < 0
        || check_flag("truncated", f[11], f[10], below) < 0
        || check_flag("detached", f[12], f[10] | f[11], below) < 0) {
        return NULL;
    }
    RowLayout *layout = PyMem_Malloc(sizeof(RowLayout));
    if (layout == NULL) {
        return PyErr_NoMemory();
    }
    *layout = (RowLayout){.size = size, .checksum = f[1], .next_delta = f[2], .frame_lead = f[3], .env = f[4],
                          .env_bytes = (int)env_bytes, .reward = f[6], .flags = f[7], .action = f[8],
                          .action_bytes = f[9], .terminated = (unsigned char)f[10],
                          .truncated = (unsigned char)f[11], .detached = (unsigned char)f[12],
                          .next_delta_bytes = (int)next_delta_bytes, .env_shift = (int)env_shift,
                          .unchecked = unchecked, .num_envs = (int64_t)f[15]};
    PyObject *capsule = PyCapsule_New(layout, CAPSULE_NAME, free_layout);
    if (capsule == NULL) {
        PyMem_Free(layout);
    }
    return capsule;
}
