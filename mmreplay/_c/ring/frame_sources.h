/* Where a batch's compressed frames lie: the buffers of the segment views (mapped segment files) that
 * the batch uses, each acquired once, and a pointer to each frame's bytes: given as blocks
 * (FrameSources), or located through a frame table (frame_table.h, through BatchViews). */
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

/* The views of a batch as the caller gave them: a PySequence_Fast of views_arg, and room to acquire the
 * buffers of every one. 0, or -1 with a Python error (then views_release still must run). */
int views_prepare(PyObject *views_arg, PyObject **views, Py_buffer **buffers);
/* Releases the buffers acquired, frees the room and drops the sequence; any of them may be NULL or 0. */
void views_release(PyObject *views, Py_buffer *buffers, Py_ssize_t acquired);

/* A batch of frames given as `blocks`, the tuple (segments, offsets, lengths, checksums, seeds): frame
 * i's bytes are views[segments[i]][offsets[i] : offsets[i] + lengths[i]] (int64 arrays), its CRC-32
 * checksums[i] seeded with seeds[i] (uint32). The caller calls frame_sources_parse, then, once it
 * returned 0, frame_sources_locate and, whatever happened, frame_sources_release. */
typedef struct {
    Py_buffer segments, offsets, lengths, checksums, seeds; /* int64[n] x 3, uint32[n] x 2 */
    Py_ssize_t n;
    const char **sources; /* sources[i]: frame i's compressed bytes, NULL when its range lies outside its view */
    PyObject *views;
    Py_buffer *buffers;
    Py_ssize_t acquired;
} FrameSources;

/* Parses blocks and checks that its five arrays hold n (len(segments)) items each: 0, or -1 with a
 * Python error naming what is wrong (nothing then to release). */
int frame_sources_parse(PyObject *blocks, FrameSources *s);
/* Acquires the views that the frames use and points sources[i] at frame i's bytes: 0, or -1 with a
 * ValueError for a segment outside views, or another Python error. */
int frame_sources_locate(FrameSources *s, PyObject *views_arg);
/* Releases the views' buffers and the five arrays. */
void frame_sources_release(FrameSources *s);

#endif
