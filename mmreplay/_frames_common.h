/* What mmreplay._lz4batch and mmreplay._lz4ref share: liblz4's API, and the checks and lookups of a
 * batch's arguments. Included once by each extension (its functions are static), after Python.h. */
#ifndef MMREPLAY_FRAMES_COMMON_H
#define MMREPLAY_FRAMES_COMMON_H

#include <limits.h>
#include <stdint.h>

#if defined(__has_include)
#if __has_include(<lz4.h>)
#include <lz4.h>
#define MMREPLAY_HAVE_LZ4_H 1
#endif
#endif
#ifndef MMREPLAY_HAVE_LZ4_H
/* liblz4's stable API (lz4.h since r129 / 1.7); declared here because Debian ships the header only in
 * liblz4-dev while the shared library liblz4.so.1 is always present. */
int LZ4_decompress_safe(const char *src, char *dst, int compressedSize, int dstCapacity);
int LZ4_decompress_safe_usingDict(const char *src, char *dst, int compressedSize, int dstCapacity,
                                  const char *dictStart, int dictSize);
typedef struct LZ4_stream_u LZ4_stream_t;
LZ4_stream_t *LZ4_createStream(void);
int LZ4_freeStream(LZ4_stream_t *stream);
void LZ4_resetStream(LZ4_stream_t *stream);
int LZ4_compress_fast_continue(LZ4_stream_t *stream, const char *src, char *dst, int srcSize, int dstCapacity,
                               int acceleration);
int LZ4_compressBound(int inputSize);
int LZ4_versionNumber(void);
#endif

/* An argument array must hold exactly n aligned items of itemsize bytes. */
static int
check_array(const Py_buffer *view, const char *name, Py_ssize_t n, Py_ssize_t itemsize)
{
    if (view->len != n * itemsize || ((uintptr_t)view->buf % (uintptr_t)itemsize) != 0) {
        PyErr_Format(PyExc_ValueError, "%s must be %zd aligned items of %zd bytes; got %zd bytes", name, n,
                     itemsize, view->len);
        return -1;
    }
    return 0;
}

/* The views (mapped segment files) of one batch, each view's buffer acquired once, at its first use,
 * into buffers[0..*acquired): the caller releases those. */
typedef struct {
    PyObject **items;
    Py_ssize_t count;
    Py_ssize_t *slot_of_view; /* -1 until the view's buffer is acquired, then its index in buffers */
    Py_buffer *buffers;
    Py_ssize_t *acquired;
} BatchViews;

/* 0, or -1 with a Python error. views is a PySequence_Fast; buffers has room for each view. */
static int
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

/* The buffer of view 0 <= view < count, acquired on first use; NULL with a Python error. */
static const Py_buffer *
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

static void
batch_views_close(BatchViews *v)
{
    PyMem_Free(v->slot_of_view);
}

/* Acquires the buffers of the views that n frames use (each view once, into buffers[0..*acquired))
 * and points sources[i] at frame i's compressed bytes, or NULL when its range lies outside its view. */
static int
locate_frames(PyObject *views, const int64_t *segments, const int64_t *offsets, const int64_t *lengths,
              Py_ssize_t n, const char **sources, Py_buffer *buffers, Py_ssize_t *acquired)
{
    BatchViews batch;
    if (batch_views_open(&batch, views, buffers, acquired) < 0) {
        return -1;
    }
    int status = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
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
        sources[i] = in_range ? (const char *)buffer->buf + offset : NULL;
    }
    batch_views_close(&batch);
    return status;
}

#endif
