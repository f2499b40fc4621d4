/* mmreplay._lz4batch: decode a batch of lz4 blocks (one frame each) with the GIL released once.
 *
 * The pure-Python fallback in mmreplay/codec.py gives identical results; codec.decode_batch validates
 * the arguments and converts them to the types below before calling decode().
 *
 * decode(views, segments, offsets, lengths, checksums, seeds, out, frame_nbytes, threads) -> int
 *   views:     sequence of contiguous byte buffers (segment files mapped in memory)
 *   segments:  int64[n], index into views
 *   offsets:   int64[n], lengths: int64[n], byte range of frame i inside its view
 *   checksums: uint32[n], CRC-32 of the compressed bytes, seeded with seeds[i]
 *   seeds:     uint32[n]
 *   out:       writable C-contiguous buffer of n * frame_nbytes bytes; frame i decodes to
 *              out[i * frame_nbytes : (i + 1) * frame_nbytes]
 *   threads:   how many threads share the batch (1 decodes on the calling thread only)
 * Returns -1 when every frame's range lies inside its view, its CRC matches and it decodes to exactly
 * frame_nbytes bytes; else the smallest i that fails. Raises ValueError for a segment outside views.
 * Frames are independent, so threads share a batch by claiming small blocks of it; the first bad
 * index is the smallest any thread found.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#if defined(__has_include)
#if __has_include(<lz4.h>)
#include <lz4.h>
#define MMREPLAY_HAVE_LZ4_H 1
#endif
#endif
#ifndef MMREPLAY_HAVE_LZ4_H
/* liblz4's stable API (lz4.h, unchanged since r129); declared here because Debian ships the header
 * only in liblz4-dev while the shared library liblz4.so.1 is always present. */
int LZ4_decompress_safe(const char *src, char *dst, int compressedSize, int dstCapacity);
#endif

#define MAX_THREADS 16
#define BLOCK_FRAMES 4 /* frames claimed at a time: small, so a late or preempted helper delays little */

typedef struct {
    const char *const *sources; /* sources[i]: frame i's compressed bytes, NULL when out of range */
    const int64_t *lengths;
    const uint32_t *checksums;
    const uint32_t *seeds;
    char *out;
    int frame_nbytes;
    Py_ssize_t n;
} Batch;

/* Shared by the caller and its helpers. Threads claim blocks of frames from next_block until none is
 * left; the caller returns once every block is done, so a helper that starts late (its core busy with
 * another process) claims nothing and never touches the batch after the caller has returned. The job
 * itself lives until its last user drops it. */
typedef struct {
    Batch batch;
    Py_ssize_t blocks;
    _Atomic Py_ssize_t next_block, blocks_done, first_bad; /* first_bad: n when none */
    atomic_int users;
    pthread_mutex_t lock;
    pthread_cond_t all_done;
} Job;

static Py_ssize_t
decode_range(const Batch *b, Py_ssize_t start, Py_ssize_t stop)
{
    for (Py_ssize_t i = start; i < stop; i++) {
        const char *src = b->sources[i];
        int length = (int)b->lengths[i]; /* range-checked when sources[i] was set */
        if (src == NULL
            || (uint32_t)crc32(b->seeds[i], (const Bytef *)src, (uInt)length) != b->checksums[i]
            || LZ4_decompress_safe(src, b->out + (size_t)i * (size_t)b->frame_nbytes, length,
                                   b->frame_nbytes) != b->frame_nbytes) {
            return i;
        }
    }
    return -1;
}

static void
job_release(Job *job)
{
    if (atomic_fetch_sub(&job->users, 1) == 1) {
        pthread_mutex_destroy(&job->lock);
        pthread_cond_destroy(&job->all_done);
        free(job);
    }
}

static void
job_work(Job *job)
{
    for (;;) {
        Py_ssize_t block = atomic_fetch_add(&job->next_block, 1);
        if (block >= job->blocks) {
            return;
        }
        Py_ssize_t start = block * BLOCK_FRAMES;
        Py_ssize_t stop = start + BLOCK_FRAMES < job->batch.n ? start + BLOCK_FRAMES : job->batch.n;
        /* frames after a known bad one need no decoding: the caller discards the batch */
        Py_ssize_t bad = start < atomic_load(&job->first_bad) ? decode_range(&job->batch, start, stop) : -1;
        if (bad >= 0) {
            Py_ssize_t known = atomic_load(&job->first_bad);
            while (bad < known && !atomic_compare_exchange_weak(&job->first_bad, &known, bad)) {
            }
        }
        if (atomic_fetch_add(&job->blocks_done, 1) + 1 == job->blocks) {
            pthread_mutex_lock(&job->lock);
            pthread_cond_broadcast(&job->all_done);
            pthread_mutex_unlock(&job->lock);
        }
    }
}

static void *
helper_main(void *arg)
{
    job_work((Job *)arg);
    job_release((Job *)arg);
    return NULL;
}

/* Decodes the batch on the calling thread plus threads - 1 helpers; the GIL must be released.
 * Returns the first bad index or -1; -2 when out of memory. */
static Py_ssize_t
decode_all(const Batch *batch, int threads)
{
    if (threads <= 1) {
        return decode_range(batch, 0, batch->n);
    }
    Job *job = malloc(sizeof(Job));
    if (job == NULL) {
        return -2;
    }
    job->batch = *batch;
    job->blocks = (batch->n + BLOCK_FRAMES - 1) / BLOCK_FRAMES;
    atomic_init(&job->next_block, 0);
    atomic_init(&job->blocks_done, 0);
    atomic_init(&job->first_bad, batch->n);
    atomic_init(&job->users, 1);
    pthread_mutex_init(&job->lock, NULL);
    pthread_cond_init(&job->all_done, NULL);
    pthread_attr_t attr;
    int detached = pthread_attr_init(&attr) == 0;
    if (detached) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    }
    for (int t = 1; t < threads && detached; t++) {
        pthread_t id;
        atomic_fetch_add(&job->users, 1);
        if (pthread_create(&id, &attr, helper_main, job) != 0) {
            atomic_fetch_sub(&job->users, 1); /* no helper: the caller decodes its share */
            break;
        }
    }
    if (detached) {
        pthread_attr_destroy(&attr);
    }
    job_work(job);
    if (atomic_load(&job->blocks_done) < job->blocks) {
        pthread_mutex_lock(&job->lock);
        while (atomic_load(&job->blocks_done) < job->blocks) {
            pthread_cond_wait(&job->all_done, &job->lock);
        }
        pthread_mutex_unlock(&job->lock);
    }
    Py_ssize_t bad = atomic_load(&job->first_bad);
    job_release(job);
    return bad < batch->n ? bad : -1;
}

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

/* Acquires the buffers of the views the batch uses (each once) and fills sources[]. */
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

static PyObject *
lz4batch_decode(PyObject *module, PyObject *args)
{
    PyObject *views_arg;
    Py_buffer segments, offsets, lengths, checksums, seeds, out;
    Py_ssize_t frame_nbytes;
    int threads;
    if (!PyArg_ParseTuple(args, "Oy*y*y*y*y*w*ni:decode", &views_arg, &segments, &offsets, &lengths, &checksums,
                          &seeds, &out, &frame_nbytes, &threads)) {
        return NULL;
    }
    PyObject *result = NULL, *views = NULL;
    const char **sources = NULL;
    Py_buffer *buffers = NULL;
    Py_ssize_t acquired = 0;
    Py_ssize_t n = segments.len / 8;

    if (frame_nbytes <= 0 || frame_nbytes > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "frame_nbytes is %zd; expected 1 to %d", frame_nbytes, INT_MAX);
        goto done;
    }
    if (threads < 1 || threads > MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "threads is %d; expected 1 to %d", threads, MAX_THREADS);
        goto done;
    }
    if (check_array(&segments, "segments", n, 8) < 0 || check_array(&offsets, "offsets", n, 8) < 0
        || check_array(&lengths, "lengths", n, 8) < 0 || check_array(&checksums, "checksums", n, 4) < 0
        || check_array(&seeds, "seeds", n, 4) < 0) {
        goto done;
    }
    if (out.len != n * frame_nbytes) {
        PyErr_Format(PyExc_ValueError, "out has %zd bytes; expected %zd frames of %zd bytes", out.len, n,
                     frame_nbytes);
        goto done;
    }
    views = PySequence_Fast(views_arg, "views must be a sequence of buffers");
    if (views == NULL) {
        goto done;
    }
    Py_ssize_t buffer_count = PySequence_Fast_GET_SIZE(views) < n ? PySequence_Fast_GET_SIZE(views) : n;
    sources = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(*sources));
    buffers = PyMem_Malloc((size_t)(buffer_count > 0 ? buffer_count : 1) * sizeof(*buffers));
    if (sources == NULL || buffers == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (locate_frames(views, (const int64_t *)segments.buf, (const int64_t *)offsets.buf,
                      (const int64_t *)lengths.buf, n, sources, buffers, &acquired) < 0) {
        goto done;
    }
    Batch batch = {sources, (const int64_t *)lengths.buf, (const uint32_t *)checksums.buf,
                   (const uint32_t *)seeds.buf, (char *)out.buf, (int)frame_nbytes, n};
    if (threads > (n + BLOCK_FRAMES - 1) / BLOCK_FRAMES) {
        threads = (int)((n + BLOCK_FRAMES - 1) / BLOCK_FRAMES); /* a helper without a block only costs */
    }
    Py_ssize_t bad;
    Py_BEGIN_ALLOW_THREADS
    bad = decode_all(&batch, threads);
    Py_END_ALLOW_THREADS
    result = bad == -2 ? PyErr_NoMemory() : PyLong_FromSsize_t(bad);

done:
    for (Py_ssize_t k = 0; k < acquired; k++) {
        PyBuffer_Release(&buffers[k]);
    }
    PyMem_Free(buffers);
    PyMem_Free(sources);
    Py_XDECREF(views);
    PyBuffer_Release(&segments);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&checksums);
    PyBuffer_Release(&seeds);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef lz4batch_methods[] = {
    {"decode", lz4batch_decode, METH_VARARGS,
     "decode(views, segments, offsets, lengths, checksums, seeds, out, frame_nbytes, threads) -> int\n\n"
     "Decode n lz4 blocks into out with the GIL released; -1 when all are good, else the first bad index."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef lz4batch_module = {
    PyModuleDef_HEAD_INIT, "mmreplay._lz4batch", "Batch lz4 decoding for mmreplay.codec.", -1, lz4batch_methods,
};

PyMODINIT_FUNC
PyInit__lz4batch(void)
{
    return PyModule_Create(&lz4batch_module);
}
