/* One env's continuing add in one call: see one_env_add.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>

#include "fast_add.h"
#include "frame_entries.h"
#include "one_env_add.h"
#include "reference_ahead.h"
#include "reference_anchors.h"
#include "reference_groups.h"
#include "row_layout.h"
#include "work_pool.h"

#define CONTINUE_ARGS 25

/* args[i] as a long long; 0, or -1 with a Python error. */
static int
long_arg(PyObject *const *args, int i, long long *out)
{
    *out = PyLong_AsLongLong(args[i]);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

PyObject *
py_continue_one_env(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != CONTINUE_ARGS) {
        PyErr_Format(PyExc_TypeError, "continue_one_env takes %d arguments; got %zd", CONTINUE_ARGS, nargs);
        return NULL;
    }
    long long prev_delta, frames_written, frame_tail, frame_slots, seed_multiplier, descriptor, segment_start;
    long long offset, segment_bytes, threads, post_threads, row_slots, step, flags, previous_step;
    if (long_arg(args, 2, &prev_delta) < 0 || long_arg(args, 4, &frame_tail) < 0 || long_arg(args, 5, &threads) < 0
        || long_arg(args, 6, &frames_written) < 0 || long_arg(args, 8, &frame_slots) < 0
        || long_arg(args, 10, &seed_multiplier) < 0 || long_arg(args, 11, &descriptor) < 0
        || long_arg(args, 12, &segment_start) < 0 || long_arg(args, 13, &offset) < 0
        || long_arg(args, 14, &segment_bytes) < 0 || long_arg(args, 16, &post_threads) < 0
        || long_arg(args, 18, &row_slots) < 0 || long_arg(args, 20, &step) < 0 || long_arg(args, 22, &flags) < 0
        || long_arg(args, 24, &previous_step) < 0) {
        return NULL;
    }
    double reward = PyFloat_AsDouble(args[21]);
    if (reward == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    ReferenceGroups *groups = reference_groups_from(args[0]);
    const RowLayout *row_layout = groups == NULL ? NULL : row_layout_from(args[19], "row_layout");
    EntryLayout layout;
    if (row_layout == NULL || !entry_layout_converter(args[9], &layout)) {
        return NULL;
    }
    PyObject *behind = args[1];
    AheadFrame *behind_ahead = behind == Py_None ? NULL : ahead_frame_of(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (behind != Py_None && !PyBytes_Check(behind)) {
        PyErr_Format(PyExc_TypeError, "continue_one_env: behind must be bytes or None; got %s", Py_TYPE(behind)->tp_name);
        return NULL;
    }
    Py_buffer table = {0}, rows = {0}, action = {0}, frame = {0};
    PyObject *result = NULL;
    if (PyObject_GetBuffer(args[7], &table, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0
        || PyObject_GetBuffer(args[17], &rows, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0
        || PyObject_GetBuffer(args[23], &action, PyBUF_C_CONTIGUOUS) < 0
        || PyObject_GetBuffer(args[15], &frame, PyBUF_C_CONTIGUOUS) < 0) {
        goto done;
    }
    FrameTable ring = {.table = &table, .frame_slots = frame_slots, .layout = layout, .segment_bytes = segment_bytes,
                       .bytes_written = 0};
    if (frame_table_check(&ring, "continue_one_env") < 0) {
        goto done;
    }
    int has_behind = behind != Py_None;
    long long frame_step = frames_written + has_behind, lead = frame_step - step;
    if ((has_behind && PyBytes_GET_SIZE(behind) != frame.len) || (size_t)frame.len != groups->n || frames_written < 0
        || prev_delta < 0 || prev_delta > UINT32_MAX || descriptor < 0 || descriptor > INT_MAX || offset < 0
        || offset > segment_bytes || segment_start < 0
        || threads < 1 || threads > POOL_MAX_THREADS || post_threads < 1 || post_threads > POOL_MAX_THREADS
        || layout.ref_bytes == 0 || seed_multiplier < 0 || seed_multiplier > UINT32_MAX || row_slots <= 0
        || step < 0 || rows.len != row_slots * row_layout->size || action.len != row_layout->action_bytes
        || lead < 0 || lead > UINT32_MAX || previous_step < 0 || previous_step >= step || flags < 0 || flags > 0xFF) {
        PyErr_SetString(PyExc_ValueError, "continue_one_env: frames, steps, segment, threads, layouts or row "
                        "arguments out of range");
        goto done;
    }
    long long written = 0;
    if (has_behind) {
        uint32_t prev = (uint32_t)prev_delta;
        written = append_reference_core(groups, PyBytes_AS_STRING(behind), 1, frame.len, &prev, frames_written,
                                        frame_tail, (unsigned char *)table.buf, frame_slots, &layout,
                                        (uint32_t)seed_multiplier, (int)descriptor, segment_start, offset,
                                        segment_bytes, (int)threads, behind_ahead);
        if (written < 0) {
            result = written == -1 ? Py_NewRef(Py_None) : NULL;
            goto done;
        }
    }
    /* From here on nothing fails: the frame left behind is written, and the caller must count it. */
    PyObject *ahead = encode_ahead_start(args[0], 0, frame_step, &frame, frame_tail, (int)post_threads, 1, 0, 0);
    frame = (Py_buffer){0}; /* the capsule holds it, or encode_ahead_start released it */
    if (ahead == NULL) {    /* a memory error (the arguments were checked above): the caller writes the frame */
        PyErr_Clear();
        ahead = Py_NewRef(Py_None);
    }
    if (ahead != Py_None) {
        write_row((unsigned char *)rows.buf, row_slots, row_layout, step, (uint32_t)lead, 0, reward, (long)flags,
                  (const char *)action.buf, previous_step);
    }
    result = Py_BuildValue("(LN)", written, ahead);
    if (result == NULL) { /* cannot count what was written: the store is no longer consistent in this process */
        PyErr_SetString(PyExc_MemoryError, "continue_one_env: out of memory after writing a frame");
    }
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&action);
    if (frame.obj != NULL) {
        PyBuffer_Release(&frame);
    }
    return result;
}
