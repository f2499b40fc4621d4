/* A frame ring's frames read by frame step: see frame_reads.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "argument_arrays.h"
#include "codec/crc32.h"
#include "codec/frame_blocks.h"
#include "pool/work_pool.h"
#include "ring/frame_reads.h"
#include "ring/reference_reads.h"

int
ring_decode(RingArgument *ring, const int64_t *steps, Py_ssize_t n, Py_ssize_t columns, char *out, int threads)
{
    BatchViews *views = &ring->batch;
    const RingGeometry *g = ring->frames.geometry;
    if (n == 0) {
        return 0;
    }
    if (g->depth >= 0) {
        return reference_read_table(ring, steps, n, columns, out, threads);
    }
    size_t count = (size_t)n;
    const char **sources = PyMem_Malloc(count * sizeof(*sources));
    int64_t *lengths = PyMem_Malloc(count * sizeof(*lengths));
    uint32_t *words = PyMem_Malloc(2 * count * sizeof(*words)); /* checksums, then seeds */
    int status = -1;
    if (sources == NULL || lengths == NULL || words == NULL) {
        PyErr_NoMemory();
    }
    else if ((status = locate_frames(&ring->frames, views, steps, n, sources, lengths, words, words + count)) == 0) {
        FrameBatch batch = {sources, lengths, words, words + count, out, g->frame_nbytes, n};
        Py_ssize_t bad;
        Py_BEGIN_ALLOW_THREADS
        bad = decode_frames(&batch, threads);
        Py_END_ALLOW_THREADS
        status = bad == -1 ? 0 : 1;
    }
    PyMem_Free(words);
    PyMem_Free(lengths);
    PyMem_Free(sources);
    return status;
}

PyObject *
py_decode_entries(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *ring_arg;
    Py_buffer steps, out;
    int threads;
    if (!PyArg_ParseTuple(args, "Oy*w*i:decode_entries", &ring_arg, &steps, &out, &threads)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = steps.len / 8;
    RingArgument ring;
    int parsed = ring_parse(ring_arg, &ring, 0, "decode_entries") == 0;
    if (!parsed || check_array(&steps, "steps", n, 8) < 0) {
        goto done;
    }
    if (threads < 1 || threads > POOL_MAX_THREADS || out.len != n * ring.frames.geometry->frame_nbytes) {
        PyErr_Format(PyExc_ValueError, "decode_entries: out has %zd bytes; expected %zd frames (and threads 1 to %d)",
                     out.len, n, POOL_MAX_THREADS);
        goto done;
    }
    int status = ring_decode(&ring, (const int64_t *)steps.buf, n, 1, (char *)out.buf, threads);
    result = status < 0 ? NULL : Py_NewRef(status == 0 ? Py_True : Py_False);
done:
    if (parsed) {
        ring_release(&ring);
    }
    PyBuffer_Release(&steps);
    PyBuffer_Release(&out);
    return result;
}

PyObject *
py_gather_entries(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *ring_arg;
    Py_buffer steps, lengths, checksums, seeds;
    int verify;
    if (!PyArg_ParseTuple(args, "Oy*w*w*w*p:gather_entries", &ring_arg, &steps, &lengths, &checksums, &seeds, &verify)) {
        return NULL;
    }
    PyObject *result = NULL;
    const char **sources = NULL;
    Py_ssize_t n = steps.len / 8;
    RingArgument ring;
    int parsed = ring_parse(ring_arg, &ring, 0, "gather_entries") == 0;
    if (!parsed || check_array(&steps, "steps", n, 8) < 0 || check_array(&lengths, "lengths", n, 8) < 0
        || check_array(&checksums, "checksums", n, 4) < 0 || check_array(&seeds, "seeds", n, 4) < 0) {
        goto done;
    }
    sources = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(*sources));
    if (sources == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *length = (int64_t *)lengths.buf;
    uint32_t *checksum = (uint32_t *)checksums.buf, *seed = (uint32_t *)seeds.buf;
    int located = locate_frames(&ring.frames, &ring.batch, (const int64_t *)steps.buf, n, sources, length, checksum, seed);
    if (located != 0) {
        result = located < 0 ? NULL : Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        total += (Py_ssize_t)length[i]; /* each within bytes_written: no overflow */
    }
    for (Py_ssize_t i = 0; verify && i < n; i++) {
        if (frame_crc32(seed[i], (const unsigned char *)sources[i], (size_t)length[i]) != checksum[i]) {
            result = PyLong_FromSsize_t(i);
            goto done;
        }
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) {
        goto done;
    }
    char *data = PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; data += length[i], i++) {
        memcpy(data, sources[i], (size_t)length[i]);
    }
done:
    PyMem_Free(sources);
    if (parsed) {
        ring_release(&ring);
    }
    PyBuffer_Release(&steps);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&checksums);
    PyBuffer_Release(&seeds);
    return result;
}

PyObject *
py_follow_links(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *ring_arg;
    Py_buffer next_frames, out;
    if (!PyArg_ParseTuple(args, "Oy*w*:follow_links", &ring_arg, &next_frames, &out)) {
        return NULL;
    }
    PyObject *result = NULL;
    RingArgument ring;
    Py_ssize_t n = next_frames.len / 8;
    int parsed = ring_parse(ring_arg, &ring, 0, "follow_links") == 0;
    if (!parsed || check_array(&next_frames, "next_frames", n, 8) < 0) {
        goto done;
    }
    Py_ssize_t columns = n > 0 ? out.len / 8 / n : 0;
    if (n > 0 && (columns < 1 || check_array(&out, "out", n * columns, 8) < 0)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "out must hold at least one column per frame");
        }
        goto done;
    }
    const FrameTable *frames = &ring.frames;
    const int64_t *next = (const int64_t *)next_frames.buf;
    int64_t *stacks = (int64_t *)out.buf;
    for (Py_ssize_t i = 0; i < n; i++) { /* the newest entry of each stack; the older ones lie beside it */
        __builtin_prefetch(table_entry(frames, next[i]), 0, 0);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t *stack = stacks + i * columns;
        int64_t frame = next[i];
        stack[columns - 1] = frame;
        for (Py_ssize_t c = columns - 2; c >= 0; c--) {
            frame -= entry_prev(frames->layout, table_entry(frames, frame));
            stack[c] = frame;
        }
    }
    result = Py_NewRef(Py_None);
done:
    if (parsed) {
        ring_release(&ring);
    }
    PyBuffer_Release(&next_frames);
    PyBuffer_Release(&out);
    return result;
}

static int
compare_steps(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The index of step in the m sorted steps of every, or -1. */
static Py_ssize_t
index_of(const int64_t *every, Py_ssize_t m, int64_t step)
{
    const int64_t *found = bsearch(&step, every, (size_t)m, sizeof(int64_t), compare_steps);
    return found == NULL ? -1 : found - every;
}

/* The closure into every (sorted, distinct) and each one's reference's index: m, or -1 for damage. */
static Py_ssize_t
closure_of(const FrameTable *frames, int depth, const int64_t *steps, Py_ssize_t n, int64_t *every,
           int64_t *references)
{
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t frame = steps[i];
        for (int level = 0;; level++) {
            if (frame < 0 || level > depth) {
                return -1;
            }
            every[m++] = frame;
            int64_t delta = (int64_t)entry_ref(frames->layout, table_entry(frames, frame));
            if (delta == 0) {
                break;
            }
            frame -= delta;
        }
    }
    qsort(every, (size_t)m, sizeof(int64_t), compare_steps);
    Py_ssize_t distinct = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (distinct == 0 || every[i] != every[distinct - 1]) {
            every[distinct++] = every[i];
        }
    }
    for (Py_ssize_t i = 0; i < distinct; i++) {
        int64_t delta = (int64_t)entry_ref(frames->layout, table_entry(frames, every[i]));
        references[i] = delta == 0 ? -1 : index_of(every, distinct, every[i] - delta);
        if (delta != 0 && references[i] < 0) {
            return -1; /* a link that changed between the two reads: the table is being written */
        }
    }
    return distinct;
}

PyObject *
py_reference_closure(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *ring_arg;
    Py_buffer steps, every, references;
    if (!PyArg_ParseTuple(args, "Oy*w*w*:reference_closure", &ring_arg, &steps, &every, &references)) {
        return NULL;
    }
    PyObject *result = NULL;
    RingArgument ring;
    Py_ssize_t n = steps.len / 8;
    int parsed = ring_parse(ring_arg, &ring, 0, "reference_closure") == 0;
    if (!parsed || check_array(&steps, "steps", n, 8) < 0) {
        goto done;
    }
    int depth = ring.frames.geometry->depth;
    if (depth < 0) {
        PyErr_SetString(PyExc_ValueError, "reference_closure needs a reference ring's geometry (depth >= 0)");
        goto done;
    }
    if (check_array(&every, "every", n * (depth + 1), 8) < 0
        || check_array(&references, "references", n * (depth + 1), 8) < 0) {
        goto done;
    }
    result = PyLong_FromSsize_t(closure_of(&ring.frames, depth, steps.buf, n, every.buf, references.buf));
done:
    if (parsed) {
        ring_release(&ring);
    }
    PyBuffer_Release(&steps);
    PyBuffer_Release(&every);
    PyBuffer_Release(&references);
    return result;
}
