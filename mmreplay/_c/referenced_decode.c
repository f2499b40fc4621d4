/* Encoded frames that reference each other, decoded in one call: see referenced_decode.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>

#include "argument_arrays.h"
#include "reference_decode.h"
#include "reference_plan.h"
#include "reference_table.h"
#include "referenced_decode.h"
#include "work_pool.h"

/* The references array as reference_plan_follow reads it: frame k's distance back to its reference. */
static int64_t
array_reference(const void *source, int64_t frame)
{
    const int64_t *references = source;
    return references[frame] < 0 ? 0 : frame - references[frame];
}

static void
array_prefetch(const void *source, int64_t frame)
{
    (void)source, (void)frame; /* the array is small and read in order: nothing to start early */
}

PyObject *
py_referenced_decode(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *views_arg;
    Py_buffer segments, offsets, lengths_in, checksums_in, seeds_in, references, requested, out;
    Py_ssize_t frame_nbytes, row_nbytes;
    int threads;
    if (!PyArg_ParseTuple(args, "Oy*y*y*y*y*y*y*w*nni:referenced_decode", &views_arg, &segments, &offsets,
                          &lengths_in, &checksums_in, &seeds_in, &references, &requested, &out, &frame_nbytes,
                          &row_nbytes, &threads)) {
        return NULL;
    }
    PyObject *result = NULL, *views = NULL;
    Py_buffer *buffers = NULL;
    Py_ssize_t acquired = 0, count = 0;
    char *room = NULL;
    Py_ssize_t t = references.len / 8, n = requested.len / 8;
    if (frame_nbytes <= 0 || frame_nbytes > INT_MAX || out.len != n * frame_nbytes) {
        PyErr_Format(PyExc_ValueError, "referenced_decode: out has %zd bytes; expected %zd frames of %zd bytes",
                     out.len, n, frame_nbytes);
        goto done;
    }
    if (threads < 1 || threads > POOL_MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "referenced_decode: threads is %d; expected 1 to %d", threads, POOL_MAX_THREADS);
        goto done;
    }
    if (reference_arguments_check(0, row_nbytes, frame_nbytes, "referenced_decode") < 0
        || check_array(&segments, "segments", t, 8) < 0 || check_array(&offsets, "offsets", t, 8) < 0
        || check_array(&lengths_in, "lengths", t, 8) < 0 || check_array(&checksums_in, "checksums", t, 4) < 0
        || check_array(&seeds_in, "seeds", t, 4) < 0 || check_array(&requested, "requested", n, 8) < 0) {
        goto done;
    }
    const int64_t *refs_of = references.buf, *wanted = requested.buf;
    for (Py_ssize_t k = 0; k < t; k++) {
        if (refs_of[k] < -1 || refs_of[k] >= k) {
            PyErr_Format(PyExc_ValueError, "referenced_decode: references[%zd] is %lld; expected -1 or 0 to %zd", k,
                         (long long)refs_of[k], k - 1);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (wanted[i] < 0 || wanted[i] >= t) {
            PyErr_Format(PyExc_ValueError, "referenced_decode: requested[%zd] is %lld; expected 0 to %zd", i,
                         (long long)wanted[i], t - 1);
            goto done;
        }
    }
    views = PySequence_Fast(views_arg, "referenced_decode: views must be a sequence of buffers");
    if (views == NULL) {
        goto done;
    }
    count = PySequence_Fast_GET_SIZE(views);
    buffers = PyMem_Calloc(count > 0 ? (size_t)count : 1, sizeof(Py_buffer));
    if (buffers == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; acquired < count; acquired++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(views, acquired), &buffers[acquired], PyBUF_SIMPLE) < 0) {
            goto done;
        }
    }
    /* At most every requested row and every frame once: the plan's steps, refs and rows, then each
     * entry's length, source, checksum and seed. */
    Py_ssize_t capacity = n + t > 0 ? n + t : 1;
    room = PyMem_Malloc((size_t)capacity * (4 * sizeof(int64_t) + sizeof(const char *) + 2 * sizeof(uint32_t)));
    if (room == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *plan_steps = (int64_t *)room, *plan_refs = plan_steps + capacity, *rows = plan_refs + capacity;
    int64_t *lengths = rows + capacity;
    const char **sources = (const char **)(lengths + capacity);
    uint32_t *checksums = (uint32_t *)(sources + capacity), *seeds = checksums + capacity;
    ReferenceLookup lookup = {array_reference, array_prefetch, refs_of};
    Py_ssize_t depth = t < REFERENCE_PLAN_MAX_DEPTH ? t : REFERENCE_PLAN_MAX_DEPTH;
    Py_ssize_t m = n == 0 ? 0 : reference_plan_follow(&lookup, wanted, n, depth, capacity, plan_steps, plan_refs, rows);
    if (m == -3) {
        result = Py_NewRef(Py_None); /* a chain deeper than the plan follows */
        goto done;
    }
    if (m < 0) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *segment_of = segments.buf, *offset_of = offsets.buf, *length_of = lengths_in.buf;
    const uint32_t *checksum_of = checksums_in.buf, *seed_of = seeds_in.buf;
    for (Py_ssize_t e = 0; e < m; e++) {
        int64_t k = plan_steps[e], segment = segment_of[k], offset = offset_of[k], length = length_of[k];
        if (segment < 0 || segment >= count || offset < 0 || length < 0 || length > INT_MAX
            || offset > (int64_t)buffers[segment].len || length > (int64_t)buffers[segment].len - offset) {
            PyErr_Format(PyExc_ValueError, "referenced_decode: frame %lld's block (view %lld, bytes %lld + %lld) lies "
                         "outside the views", (long long)k, (long long)segment, (long long)offset, (long long)length);
            goto done;
        }
        sources[e] = (const char *)buffers[segment].buf + offset;
        lengths[e] = length, checksums[e] = checksum_of[k], seeds[e] = seed_of[k];
    }
    ReferencePlan plan = {sources, lengths, plan_refs, rows, checksums, seeds, out.buf, NULL, n, (int)frame_nbytes,
                          (int)row_nbytes, row_nbytes > 0, m};
    Py_ssize_t bad = m == 0 ? -1 : reference_plan_decode(&plan, threads);
    if (bad == -3) {
        goto done;
    }
    result = bad == -1 ? PyLong_FromLong(-1) : Py_BuildValue("(LL)", (long long)rows[bad], (long long)plan_steps[bad]);
done:
    PyMem_Free(room);
    for (Py_ssize_t b = 0; b < acquired; b++) {
        PyBuffer_Release(&buffers[b]);
    }
    PyMem_Free(buffers);
    Py_XDECREF(views);
    PyBuffer_Release(&segments);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&lengths_in);
    PyBuffer_Release(&checksums_in);
    PyBuffer_Release(&seeds_in);
    PyBuffer_Release(&references);
    PyBuffer_Release(&requested);
    PyBuffer_Release(&out);
    return result;
}
