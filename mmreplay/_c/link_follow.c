/* Following the frame table's episode links: see link_follow.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "argument_arrays.h"
#include "frame_entries.h"
#include "link_follow.h"
#include "ring_slots.h"

PyObject *
py_follow_links(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer table, next_frames, out;
    FrameTable ring = {.table = &table, .segment_bytes = 1};
    if (!PyArg_ParseTuple(args, "y*L" ENTRY_LAYOUT_FORMAT "y*w*:follow_links", &table, &ring.frame_slots,
                          ENTRY_LAYOUT_FIELDS(ring.layout), &next_frames, &out)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = next_frames.len / 8;
    long long frame_slots = ring.frame_slots;
    Py_ssize_t entry_size = ring.layout.size;
    if (frame_table_check(&ring, "follow_links") < 0) {
        goto done;
    }
    if (check_array(&next_frames, "next_frames", n, 8) < 0) {
        goto done;
    }
    Py_ssize_t columns = n > 0 ? out.len / 8 / n : 0;
    if (n > 0 && (columns < 1 || check_array(&out, "out", n * columns, 8) < 0)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "out must hold at least one column per frame");
        }
        goto done;
    }
    const unsigned char *entries = (const unsigned char *)table.buf;
    const int64_t *next = (const int64_t *)next_frames.buf;
    int64_t *frames = (int64_t *)out.buf;
    for (Py_ssize_t i = 0; i < n; i++) { /* the newest entry of each stack; the older ones lie beside it */
        __builtin_prefetch(entries + ring_slot(next[i], frame_slots) * entry_size, 0, 0);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t *stack = frames + i * columns;
        int64_t frame = next[i];
        stack[columns - 1] = frame;
        for (Py_ssize_t c = columns - 2; c >= 0; c--) {
            frame -= entry_prev(&ring.layout, entries + ring_slot(frame, frame_slots) * entry_size);
            stack[c] = frame;
        }
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&next_frames);
    PyBuffer_Release(&out);
    return result;
}
