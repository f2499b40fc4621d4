/* Where a batch's compressed frames lie: the buffers of the segment views (mapped segment files) that
 * the batch uses, each acquired once, and a pointer to each frame's bytes.
 *
 * FrameSources is what decode() of mmreplay._lz4batch and of mmreplay._lz4ref share: their first
 * arguments (views, then segments, offsets, lengths, checksums and seeds of each frame) checked and
 * located. BatchViews is the part that locating frames through a frame table (frame_entries.h) shares. */
#ifndef MMREPLAY_FRAME_SOURCES_H
#define MMREPLAY_FRAME_SOURCES_H

#include <Python.h>

#include <stdint.h>

/* The views of one batch, each view's buffer acquired at its first use into buffers[0..*acquired): the
 * caller releases those (views_release). */
typedef struct {
    PyObject **items;
    Py_ssize_t count;
    Py_ssize_t *slot_of_view; /* -1 until the view's buffer is acquired, then its index in buffers */
    Py_buffer *buffers;
    Py_ssize_t *acquired;
} BatchViews;

/* 0, or -1 with a Python error. views is a PySequence_Fast; buffers has room for each view used. */
int batch_views_open(BatchViews *v, PyObject *views, Py_buffer *buffers, Py_ssize_t *acquired);
/* The buffer of view 0 <= view < count, acquired on first use; NULL with a Python error. */
const Py_buffer *batch_views_get(BatchViews *v, Py_ssize_t view);
/* The buffer of view 0 <= view < count where it was acquired, else NULL; any thread, without the GIL. */
const Py_buffer *batch_views_peek(const BatchViews *v, Py_ssize_t view);
void batch_views_close(BatchViews *v);

/* The views of a batch of n frames as the caller gave them: a PySequence_Fast of views_arg, and room to
 * acquire the buffers of up to min(len(views), n) of them. 0, or -1 with a Python error (then
 * views_release still must run). */
int views_prepare(PyObject *views_arg, Py_ssize_t n, PyObject **views, Py_buffer **buffers);
/* Releases the buffers acquired, frees the room and drops the sequence; any of them may be NULL or 0. */
void views_release(PyObject *views, Py_buffer *buffers, Py_ssize_t acquired);

/* A batch of frames given by segment, offset and length, with their checksums and CRC seeds. The caller
 * parses the five arrays into segments..seeds (as y*), calls frame_sources_check, checks its own
 * arguments, calls frame_sources_locate, and, once frame_sources_check has run, frame_sources_release
 * whatever happened. */
typedef struct {
    Py_buffer segments, offsets, lengths, checksums, seeds; /* int64[n] x 3, uint32[n] x 2 */
    Py_ssize_t n;
    const char **sources; /* sources[i]: frame i's compressed bytes, NULL when its range lies outside its view */
    PyObject *views;
    Py_buffer *buffers;
    Py_ssize_t acquired;
} FrameSources;

/* Checks frame_nbytes and that the five arrays hold n (len(segments)) items each: 0, or -1 with a
 * ValueError naming what is wrong. */
int frame_sources_check(FrameSources *s, Py_ssize_t frame_nbytes);
/* Acquires the views that the frames use and points sources[i] at frame i's bytes: 0, or -1 with a
 * ValueError for a segment outside views, or another Python error. */
int frame_sources_locate(FrameSources *s, PyObject *views_arg);
/* Releases the views' buffers and the five arrays. */
void frame_sources_release(FrameSources *s);

#endif
