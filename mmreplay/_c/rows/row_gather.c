/* Reading a sampled batch's transition rows: see row_gather.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "argument_arrays.h"
#include "ring_slots.h"
#include "rows/row_checksum.h"
#include "rows/row_gather.h"

PyObject *
py_gather_rows(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer table, steps, out;
    long long row_slots;
    int version_3 = 0;
    Py_ssize_t unchecked = RECORD_UNCHECKED_BYTES;
    if (!PyArg_ParseTuple(args, "y*Ly*w*|pn:gather_rows", &table, &row_slots, &steps, &out, &version_3,
                          &unchecked)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = steps.len / 8;
    Py_ssize_t row_size = row_slots > 0 ? table.len / row_slots : 0;
    if (row_slots <= 0 || unchecked < 4 || row_size <= unchecked || (version_3 && unchecked != RECORD_UNCHECKED_BYTES)
        || table.len != row_slots * row_size || out.len != n * row_size) {
        PyErr_Format(PyExc_ValueError, "gather_rows: table of %zd bytes, %lld slots and out of %zd bytes for %zd rows",
                     table.len, row_slots, out.len, n);
        goto done;
    }
    if (check_array(&steps, "steps", n, 8) < 0) {
        goto done;
    }
    const unsigned char *rows = (const unsigned char *)table.buf;
    const int64_t *step = (const int64_t *)steps.buf;
    unsigned char *copy = (unsigned char *)out.buf;
    Py_ssize_t bad = -1;
    for (Py_ssize_t i = 0; i < n; i++) { /* sampled rows lie far apart: overlap their cache misses */
        __builtin_prefetch(rows + ring_slot(step[i], row_slots) * row_size, 0, 0);
    }
    for (Py_ssize_t i = 0; i < n; i++, copy += row_size) {
        memcpy(copy, rows + ring_slot(step[i], row_slots) * row_size, (size_t)row_size);
        if (bad < 0 && !row_matches(copy, row_size, step[i], version_3, unchecked)) {
            bad = i;
        }
    }
    result = PyLong_FromSsize_t(bad);
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&steps);
    PyBuffer_Release(&out);
    return result;
}

PyObject *
py_gather_fields(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *rows_arg;
    Py_buffer steps, next_frames, action, reward, terminated, truncated, env_index, detached;
    if (!PyArg_ParseTuple(args, "Oy*(w*w*w*w*w*w*w*):gather_fields", &rows_arg, &steps, &next_frames, &action,
                          &reward, &terminated, &truncated, &env_index, &detached)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = steps.len / 8;
    RowsArgument table;
    int parsed = rows_parse(rows_arg, &table, 0, "gather_fields") == 0;
    if (!parsed) {
        goto done;
    }
    const RowLayout *layout = table.layout;
    Py_ssize_t row_size = layout->size;
    long long row_slots = table.row_slots;
    if (row_size > ROW_COPY_BYTES || action.len != n * layout->action_bytes) {
        PyErr_Format(PyExc_ValueError, "gather_fields: rows of %zd bytes (at most %d) and action of %zd bytes for %zd "
                     "rows do not agree", row_size, ROW_COPY_BYTES, action.len, n);
        goto done;
    }
    if (check_array(&steps, "steps", n, 8) < 0 || check_array(&next_frames, "next_frames", n, 8) < 0
        || check_array(&reward, "reward", n, 4) < 0 || check_array(&terminated, "terminated", n, 1) < 0
        || check_array(&truncated, "truncated", n, 1) < 0 || check_array(&env_index, "env_index", n, 8) < 0
        || check_array(&detached, "detached", n, 1) < 0) {
        goto done;
    }
    const unsigned char *rows = (const unsigned char *)table.table.buf;
    const int64_t *step = (const int64_t *)steps.buf;
    RowArrays arrays = {(int64_t *)env_index.buf, (char *)reward.buf, (unsigned char *)terminated.buf,
                        (unsigned char *)truncated.buf, (char *)action.buf};
    for (Py_ssize_t i = 0; i < n; i++) { /* sampled rows lie far apart: overlap their cache misses */
        __builtin_prefetch(rows + ring_slot(step[i], row_slots) * row_size, 0, 0);
    }
    unsigned char copy[ROW_COPY_BYTES];
    Py_ssize_t bad = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* Unpack a checked copy: a writer may overwrite the row meanwhile. */
        copy_row(copy, rows + ring_slot(step[i], row_slots) * row_size, row_size);
        if (bad < 0 && (!row_matches(copy, row_size, step[i], table.version_3, layout->unchecked)
                        || !row_env_ok(layout, copy))) {
            bad = i;
        }
        ((int64_t *)next_frames.buf)[i] = row_next_frame(layout, copy, step[i]);
        unsigned char flags = unpack_row(layout, copy, i, &arrays);
        ((unsigned char *)detached.buf)[i] = (flags & layout->detached) != 0;
    }
    result = PyLong_FromSsize_t(bad);
done:
    if (parsed) {
        rows_release(&table);
    }
    PyBuffer_Release(&steps);
    PyBuffer_Release(&next_frames);
    PyBuffer_Release(&action);
    PyBuffer_Release(&reward);
    PyBuffer_Release(&terminated);
    PyBuffer_Release(&truncated);
    PyBuffer_Release(&env_index);
    PyBuffer_Release(&detached);
    return result;
}

PyObject *
py_prefetch_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "prefetch_rows(table, row_slots, steps) takes 3 arguments");
        return NULL;
    }
    long long row_slots = PyLong_AsLongLong(args[1]);
    if (row_slots == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer table, steps;
    if (PyObject_GetBuffer(args[0], &table, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &steps, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&table);
        return NULL;
    }
    Py_ssize_t n = steps.len / 8, row_size = row_slots > 0 ? table.len / row_slots : 0;
    PyObject *result = NULL;
    if (row_slots <= 0 || table.len != row_slots * row_size) {
        PyErr_SetString(PyExc_ValueError, "prefetch_rows: table size and row_slots do not agree");
        goto done;
    }
    if (steps.len != n * 8 || (uintptr_t)steps.buf % 8 != 0) {
        n = 0;
    }
    const unsigned char *rows = (const unsigned char *)table.buf;
    const int64_t *step = (const int64_t *)steps.buf;
    int64_t anchor = n > 0 ? step[0] - ring_slot(step[0], row_slots) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        __builtin_prefetch(rows + ring_slot_near(step[i], anchor, row_slots) * row_size, 0, 3);
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&steps);
    return result;
}
