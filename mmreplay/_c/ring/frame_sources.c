/* Where a batch's compressed frames lie: see frame_sources.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>

#include "argument_arrays.h"
#include "ring/frame_sources.h"

int
batch_views_open(BatchViews *v, PyObject *views, Py_buffer *buffers, Py_ssize_t *acquired)
{
    v->items = PySequence_Fast_ITEMS(views);
    v->count = PySequence_Fast_GET_SIZE(views);
    v->buffers = buffers;
    v->acquired = acquired;
    v->slot_of_view = PyMem_Malloc((size_t)(v->count > 0 ? v->count : 1) * sizeof(Py_ssize_t));
    if (v->slot_of_view == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < v->count; i++) {
        v->slot_of_view[i] = -1;
    }
    return 0;
}

const Py_buffer *
batch_views_get(BatchViews *v, Py_ssize_t view)
{
    Py_ssize_t slot = v->slot_of_view[view];
    if (slot < 0) {
        slot = *v->acquired;
        if (PyObject_GetBuffer(v->items[view], &v->buffers[slot], PyBUF_SIMPLE) < 0) {
            return NULL;
        }
        *v->acquired = slot + 1;
        v->slot_of_view[view] = slot;
    }
    return &v->buffers[slot];
}

const Py_buffer *
batch_views_peek(const BatchViews *v, Py_ssize_t view)
{
    Py_ssize_t slot = v->slot_of_view[view];
    return slot < 0 ? NULL : &v->buffers[slot];
}

void
batch_views_close(BatchViews *v)
{
    PyMem_Free(v->slot_of_view);
}

int
views_prepare(PyObject *views_arg, PyObject **views, Py_buffer **buffers)
{
    *buffers = NULL;
    *views = PySequence_Fast(views_arg, "views must be a sequence of buffers");
    if (*views == NULL) {
        return -1;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(*views);
    *buffers = PyMem_Malloc((size_t)(count > 0 ? count : 1) * sizeof(Py_buffer));
    if (*buffers == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

void
views_release(PyObject *views, Py_buffer *buffers, Py_ssize_t acquired)
{
    for (Py_ssize_t k = 0; k < acquired; k++) {
        PyBuffer_Release(&buffers[k]);
    }
    PyMem_Free(buffers);
    Py_XDECREF(views);
}

/* Acquires the buffers of the views that the frames use and points sources[i] at frame i's bytes, or
 * at NULL when its range lies outside its view. */
static int
locate_blocks(FrameSources *s)
{
    BatchViews batch;
    if (batch_views_open(&batch, s->views, s->buffers, &s->acquired) < 0) {
        return -1;
    }
    const int64_t *segments = s->segments.buf, *offsets = s->offsets.buf, *lengths = s->lengths.buf;
    int status = 0;
    for (Py_ssize_t i = 0; i < s->n; i++) {
        int64_t segment = segments[i];
        if (segment < 0 || segment >= batch.count) {
            PyErr_Format(PyExc_ValueError, "segments[%zd] is %lld; expected 0 <= segment < %zd (len(views))", i,
                         (long long)segment, batch.count);
            status = -1;
            break;
        }
        const Py_buffer *buffer = batch_views_get(&batch, (Py_ssize_t)segment);
        if (buffer == NULL) {
            status = -1;
            break;
        }
        int64_t offset = offsets[i], length = lengths[i];
        int in_range = offset >= 0 && length >= 0 && length <= INT_MAX && offset <= buffer->len
                       && length <= buffer->len - offset;
        s->sources[i] = in_range ? (const char *)buffer->buf + offset : NULL;
    }
    batch_views_close(&batch);
    return status;
}

int
frame_sources_parse(PyObject *blocks, FrameSources *s)
{
    *s = (FrameSources){0};
    if (!PyArg_ParseTuple(blocks, "y*y*y*y*y*;blocks must be (segments, offsets, lengths, checksums, seeds)",
                          &s->segments, &s->offsets, &s->lengths, &s->checksums, &s->seeds)) {
        return -1;
    }
    Py_ssize_t n = s->segments.len / 8;
    s->n = n;
    if (check_array(&s->segments, "segments", n, 8) < 0 || check_array(&s->offsets, "offsets", n, 8) < 0
        || check_array(&s->lengths, "lengths", n, 8) < 0 || check_array(&s->checksums, "checksums", n, 4) < 0
        || check_array(&s->seeds, "seeds", n, 4) < 0) {
        frame_sources_release(s);
        return -1;
    }
    return 0;
}

int
frame_sources_locate(FrameSources *s, PyObject *views_arg)
{
    if (views_prepare(views_arg, &s->views, &s->buffers) < 0) {
        return -1;
    }
    s->sources = PyMem_Malloc((size_t)(s->n > 0 ? s->n : 1) * sizeof(*s->sources));
    if (s->sources == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return locate_blocks(s);
}

void
frame_sources_release(FrameSources *s)
{
    views_release(s->views, s->buffers, s->acquired);
    PyMem_Free(s->sources);
    PyBuffer_Release(&s->segments);
    PyBuffer_Release(&s->offsets);
    PyBuffer_Release(&s->lengths);
    PyBuffer_Release(&s->checksums);
    PyBuffer_Release(&s->seeds);
}
