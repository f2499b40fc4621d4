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

/* Acquires the buffers of the views that n frames use (each view once, into buffers[0..*acquired))
 * and points sources[i] at frame i's compressed bytes, or NULL when its range lies outside its view. */
static int
locate_frames(PyObject *views, const int64_t *segments, const int64_t *offsets, const int64_t *lengths,
              Py_ssize_t n, const char **sources, Py_buffer *buffers, Py_ssize_t *acquired)
{
    Py_ssize_t view_count = PySequence_Fast_GET_SIZE(views);
    PyObject **items = PySequence_Fast_ITEMS(views);
    Py_ssize_t *slot_of_view = PyMem_Malloc((size_t)(view_count > 0 ? view_count : 1) * sizeof(Py_ssize_t));
    if (slot_of_view == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t v = 0; v < view_count; v++) {
        slot_of_view[v] = -1;
    }
    int status = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t segment = segments[i];
        if (segment < 0 || segment >= view_count) {
            PyErr_Format(PyExc_ValueError, "segments[%zd] is %lld; expected 0 <= segment < %zd (len(views))", i,
                         (long long)segment, view_count);
            status = -1;
            break;
        }
        Py_ssize_t slot = slot_of_view[segment];
        if (slot < 0) {
            slot = *acquired;
            if (PyObject_GetBuffer(items[segment], &buffers[slot], PyBUF_SIMPLE) < 0) {
                status = -1;
                break;
            }
            *acquired = slot + 1;
            slot_of_view[segment] = slot;
        }
        const Py_buffer *buffer = &buffers[slot];
        int64_t offset = offsets[i], length = lengths[i];
        int in_range = offset >= 0 && length >= 0 && length <= INT_MAX && offset <= buffer->len
                       && length <= buffer->len - offset;
        sources[i] = in_range ? (const char *)buffer->buf + offset : NULL;
    }
    PyMem_Free(slot_of_view);
    return status;
}

#endif
