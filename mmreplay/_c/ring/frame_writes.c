/* add's frames written in one call: see frame_writes.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "codec/crc32.h"
#include "codec/frame_blocks.h"
#include "codec/reference_groups.h"
#include "pool/work_pool.h"
#include "ring/frame_table.h"
#include "ring/frame_writes.h"

/* Writes all of data at offset of descriptor (pwrite may write less than asked); 0, or -1 with errno
 * (ENOSPC where a write stops short: the disk is full). */
static int
write_all(int descriptor, const char *data, size_t length, off_t offset)
{
    while (length > 0) {
        ssize_t written = pwrite(descriptor, data, length, offset);
        if (written < 0 && errno == EINTR) {
            continue;
        }
        if (written <= 0) {
            if (written == 0) {
                errno = ENOSPC;
            }
            return -1;
        }
        data += written;
        length -= (size_t)written;
        offset += written;
    }
    return 0;
}

/* The prev_deltas of n frames, as u32 (NULL with a Python error). */
static uint32_t *
prev_deltas_of(PyObject *deltas, Py_ssize_t n)
{
    uint32_t *prev = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(uint32_t));
    if (prev == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long delta = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(deltas, i));
        if ((delta == (unsigned long)-1 && PyErr_Occurred()) || delta > UINT32_MAX) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError, "prev_deltas must fit 32 bits");
            }
            PyMem_Free(prev);
            return NULL;
        }
        prev[i] = (uint32_t)delta;
    }
    return prev;
}

/* The n blocks packed back to back as a list of bytes, and their ref_deltas as a list of ints. */
static PyObject *
blocks_of(const char *blocks, const int *lengths, const int64_t *refs, Py_ssize_t n)
{
    PyObject *payloads = PyList_New(n), *deltas = PyList_New(n);
    for (Py_ssize_t i = 0; payloads != NULL && deltas != NULL && i < n; blocks += lengths[i], i++) {
        PyObject *payload = PyBytes_FromStringAndSize(blocks, lengths[i]), *delta = PyLong_FromLongLong(refs[i]);
        if (payload == NULL || delta == NULL) {
            Py_XDECREF(payload), Py_XDECREF(delta);
            Py_CLEAR(payloads);
            break;
        }
        PyList_SET_ITEM(payloads, i, payload);
        PyList_SET_ITEM(deltas, i, delta);
    }
    if (payloads == NULL || deltas == NULL) {
        Py_XDECREF(payloads), Py_XDECREF(deltas);
        return NULL;
    }
    return Py_BuildValue("(NN)", payloads, deltas);
}

PyObject *
py_append_frames(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    static char *keywords[] = {"target", "frames", "prev_deltas", "first_step", "groups", "frame_tail", "threads", NULL};
    PyObject *geometry_arg, *deltas_arg, *groups_arg = Py_None;
    Py_buffer table, frames;
    int descriptor, threads = 1;
    long long segment_start, offset, first_step, frame_tail = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "(Ow*iLL)y*OL|OLi:append_frames", keywords, &geometry_arg, &table,
                                     &descriptor, &segment_start, &offset, &frames, &deltas_arg, &first_step,
                                     &groups_arg, &frame_tail, &threads)) {
        return NULL;
    }
    PyObject *result = NULL, *deltas = NULL;
    uint32_t *prev = NULL;
    char *blocks = NULL;
    int *lengths = NULL;
    int64_t *refs = NULL;
    const RingGeometry *g = ring_geometry_from(geometry_arg);
    ReferenceGroups *groups = g == NULL || groups_arg == Py_None ? NULL : reference_groups_from(groups_arg);
    if (g == NULL || (groups_arg != Py_None && groups == NULL)) {
        goto done;
    }
    deltas = PySequence_Fast(deltas_arg, "prev_deltas must be a sequence of ints");
    if (deltas == NULL) {
        goto done;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(deltas);
    int frame_nbytes = g->frame_nbytes;
    if (n <= 0 || frames.len != n * (Py_ssize_t)frame_nbytes || table.len != g->frame_slots * g->layout.size
        || first_step < 0 || offset < 0 || offset > g->segment_bytes || segment_start < 0 || threads < 1
        || threads > POOL_MAX_THREADS || (groups != NULL) != (g->depth >= 0)
        || (groups != NULL && reference_groups_frame_nbytes(groups) != frame_nbytes)) {
        PyErr_SetString(PyExc_ValueError, "append_frames: frames, table, first_step, segment_start, offset, threads "
                        "or groups (exactly for a reference ring) out of range");
        goto done;
    }
    int bound = groups != NULL ? reference_block_bound(&g->shape) : LZ4_compressBound(frame_nbytes);
    prev = prev_deltas_of(deltas, n);
    lengths = PyMem_Malloc((size_t)n * sizeof(int));
    refs = PyMem_Calloc((size_t)n, sizeof(int64_t));
    blocks = PyMem_Malloc((size_t)n * (size_t)bound);
    if (prev == NULL || lengths == NULL || refs == NULL || blocks == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_NoMemory();
        }
        goto done;
    }
    long long total = 0;
    if (groups != NULL) {
        if (groups_encode_envs(groups, frames.buf, n, first_step, frame_tail, threads, blocks, bound, lengths, refs) < 0) {
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++) { /* pack the blocks back to back */
            memmove(blocks + total, blocks + (size_t)i * (size_t)bound, (size_t)lengths[i]);
            total += lengths[i];
        }
    }
    else {
        Py_BEGIN_ALLOW_THREADS
        total = compress_frames(frames.buf, n, frame_nbytes, blocks, lengths, INT_MAX, NULL, NULL, threads);
        Py_END_ALLOW_THREADS
        if (total < 0) {
            PyErr_NoMemory();
            goto done;
        }
    }
    int max_length = g->layout.length_bytes == 2 ? 0xFFFF : INT_MAX, fits = offset + total <= g->segment_bytes;
    for (Py_ssize_t i = 0; i < n; i++) {
        fits = fits && lengths[i] <= max_length;
    }
    if (!fits) { /* the caller writes them (the next segment): the blocks and their ref_deltas, as compressed */
        result = blocks_of(blocks, lengths, refs, n);
        goto done;
    }
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = write_all(descriptor, blocks, (size_t)total, (off_t)offset) < 0;
    Py_END_ALLOW_THREADS
    if (failed) { /* nothing counted: no frame may be compressed against these */
        for (Py_ssize_t e = 0; groups != NULL && e < n; e++) {
            groups_restart(groups, e);
        }
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    /* the bytes went out before the entries that point at them */
    FrameTable ring = {.geometry = g, .layout = &g->layout, .table = &table};
    long long position = segment_start + offset;
    const char *block = blocks;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t step = first_step + i;
        uint32_t seed = (uint32_t)((uint64_t)step * g->seed_multiplier + prev[i] + (uint64_t)refs[i] * REF_SEED_MULTIPLIER);
        entry_write(&g->layout, (unsigned char *)table_entry(&ring, step), (uint64_t)position, (uint64_t)lengths[i],
                    frame_crc32(seed, (const unsigned char *)block, (size_t)lengths[i]), prev[i], (uint64_t)refs[i]);
        position += lengths[i];
        block += lengths[i];
    }
    result = PyLong_FromLongLong(total);
done:
    PyMem_Free(blocks);
    PyMem_Free(lengths);
    PyMem_Free(refs);
    PyMem_Free(prev);
    Py_XDECREF(deltas);
    PyBuffer_Release(&frames);
    PyBuffer_Release(&table);
    return result;
}
