/* Frames compressed alone with lz4 on the pool's threads: see frame_compress.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "crc32.h"
#include "frame_compress.h"
#include "lz4_api.h"
#include "work_pool.h"

/* A batch of frames compressed by the pool's threads (work_pool.h), each frame alone into its own slot
 * of `bound` bytes (blocks + i * bound); a task is a run of consecutive frames, compressed with one
 * stream state, reset before each frame. */
typedef struct {
    const char *frames;
    Py_ssize_t n, chunk; /* frames; frames a task compresses */
    int frame_nbytes, bound, max_length;
    char *blocks;
    int *lengths;
    const uint32_t *seeds; /* with checksums: each block's CRC-32 seeded with seeds[i] (or NULL) */
    uint32_t *checksums;
    _Atomic int failed; /* a frame did not compress, or no memory for a stream state */
} CompressJob;

static void
compress_task(void *context, Py_ssize_t number)
{
    CompressJob *job = context;
    Py_ssize_t start = number * job->chunk, stop = start + job->chunk < job->n ? start + job->chunk : job->n;
    LZ4_stream_t *stream = LZ4_createStream();
    if (stream == NULL) {
        atomic_store(&job->failed, 1);
        return;
    }
    for (Py_ssize_t i = start; i < stop; i++) {
        /* A fresh stream per frame, as python-lz4's lz4.block.compress does (lz4_codec.compress): the
         * same bytes as the general path. LZ4_compress_default would pick a 16-bit table for inputs
         * under 64 KiB and compress Atari frames ~5% worse. */
        if (i > start) {
            LZ4_resetStream(stream);
        }
        char *block = job->blocks + (size_t)i * (size_t)job->bound;
        int length = LZ4_compress_fast_continue(stream, job->frames + (size_t)i * (size_t)job->frame_nbytes, block,
                                                job->frame_nbytes, job->bound, 1);
        job->lengths[i] = length;
        if (length <= 0 || length > job->max_length) {
            atomic_store(&job->failed, 1);
            break;
        }
        if (job->checksums != NULL) {
            job->checksums[i] = frame_crc32(job->seeds[i], (const unsigned char *)block, (size_t)length);
        }
    }
    LZ4_freeStream(stream);
}

/* Compresses n frames of frame_nbytes bytes each on up to `threads` threads, then packs the blocks back
 * to back at the start of blocks (room for n blocks of LZ4_compressBound(frame_nbytes) bytes), each
 * block's size into lengths[i] (and, with seeds, its CRC-32 into checksums[i]): the bytes of all, or -1
 * when a frame does not compress, its block is over max_length bytes, or memory ran out. The
 * compression step of add's fast path, apart from its writes; call with the GIL released. */
/* A job over n frames for up to `threads` threads; returns its number of tasks. */
static Py_ssize_t
compress_job_init(CompressJob *job, const char *frames, Py_ssize_t n, int frame_nbytes, char *blocks, int *lengths,
                  int max_length, const uint32_t *seeds, uint32_t *checksums, int threads)
{
    *job = (CompressJob){.frames = frames, .n = n, .frame_nbytes = frame_nbytes,
                         .bound = LZ4_compressBound(frame_nbytes), .max_length = max_length, .blocks = blocks,
                         .lengths = lengths, .seeds = seeds, .checksums = checksums};
    atomic_init(&job->failed, 0);
    /* two runs a thread, so that a helper that joins late leaves little to the others */
    Py_ssize_t tasks = threads > 1 ? 2 * (Py_ssize_t)(threads < n ? threads : n) : 1;
    job->chunk = (n + tasks - 1) / tasks;
    return (n + job->chunk - 1) / job->chunk;
}

/* After every task ran: the blocks packed back to back, their bytes; -1 when a frame failed. */
static long long
compress_job_pack(CompressJob *job)
{
    if (atomic_load(&job->failed)) {
        return -1;
    }
    long long total = 0;
    for (Py_ssize_t i = 0; i < job->n; i++) { /* pack: each block moves down, never over one not yet moved */
        if (total != (long long)i * job->bound) {
            memmove(job->blocks + total, job->blocks + (size_t)i * (size_t)job->bound, (size_t)job->lengths[i]);
        }
        total += job->lengths[i];
    }
    return total;
}

long long
compress_frames(const char *frames, Py_ssize_t n, int frame_nbytes, char *blocks, int *lengths, int max_length,
                const uint32_t *seeds, uint32_t *checksums, int threads)
{
    CompressJob job;
    Py_ssize_t tasks = compress_job_init(&job, frames, n, frame_nbytes, blocks, lengths, max_length, seeds, checksums,
                                         threads);
    pool_run(tasks, threads, compress_task, &job);
    return compress_job_pack(&job);
}

/* -- compressed ahead ---------------------------------------------------------------------------- */

#define PENDING_NAME "mmreplay._lz4batch.PendingFrames"

struct PendingFrames {
    Py_buffer frames; /* held until the blocks are taken */
    CompressJob job;
    Py_ssize_t tasks;
    PoolJob *posted; /* NULL: no helper took the job; the taker compresses */
    int joined;
    long long total;
};

static void
pending_join(PendingFrames *pending)
{
    if (!pending->joined) {
        pool_join(pending->posted, pending->tasks, compress_task, &pending->job);
        pending->total = compress_job_pack(&pending->job);
        pending->joined = 1;
    }
}

static void
pending_destroy(PyObject *capsule)
{
    PendingFrames *pending = PyCapsule_GetPointer(capsule, PENDING_NAME);
    if (pending == NULL) {
        return;
    }
    if (pending->posted != NULL) {
        pending_join(pending); /* a helper may still be compressing into it (no task touches Python) */
    }
    PyBuffer_Release(&pending->frames);
    PyMem_Free(pending->job.blocks);
    PyMem_Free(pending->job.lengths);
    PyMem_Free(pending);
}

PendingFrames *
pending_frames_of(PyObject *capsule, Py_ssize_t n, Py_ssize_t frame_nbytes)
{
    PendingFrames *pending = PyCapsule_GetPointer(capsule, PENDING_NAME);
    if (pending != NULL && (pending->job.n != n || pending->job.frame_nbytes != frame_nbytes)) {
        PyErr_Format(PyExc_ValueError, "the frames compressed ahead are %zd of %d bytes; expected %zd of %zd",
                     pending->job.n, pending->job.frame_nbytes, n, frame_nbytes);
        return NULL;
    }
    return pending;
}

long long
pending_frames_take(PendingFrames *pending, char **blocks, int **lengths)
{
    pending_join(pending);
    *blocks = pending->job.blocks;
    *lengths = pending->job.lengths;
    return pending->total;
}

PyObject *
py_compress_ahead(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer frames;
    Py_ssize_t n;
    int threads;
    if (!PyArg_ParseTuple(args, "y*ni:compress_ahead", &frames, &n, &threads)) {
        return NULL;
    }
    Py_ssize_t frame_nbytes = n > 0 ? frames.len / n : 0;
    if (n <= 0 || frame_nbytes <= 0 || frame_nbytes > INT_MAX / 2 || frames.len != n * frame_nbytes || threads < 1
        || threads > POOL_MAX_THREADS) {
        PyErr_SetString(PyExc_ValueError, "compress_ahead: expected count frames and 1 to POOL_MAX_THREADS threads");
        PyBuffer_Release(&frames);
        return NULL;
    }
    PendingFrames *pending = PyMem_Calloc(1, sizeof(PendingFrames));
    size_t bound = (size_t)LZ4_compressBound((int)frame_nbytes);
    char *blocks = pending == NULL ? NULL : PyMem_Malloc((size_t)n * bound);
    int *lengths = blocks == NULL ? NULL : PyMem_Malloc((size_t)n * sizeof(int));
    if (lengths == NULL) {
        PyMem_Free(blocks);
        PyMem_Free(pending);
        PyBuffer_Release(&frames);
        return PyErr_NoMemory();
    }
    pending->frames = frames;
    pending->tasks = compress_job_init(&pending->job, (const char *)frames.buf, n, (int)frame_nbytes, blocks, lengths,
                                       INT_MAX, NULL, NULL, threads);
    PyObject *capsule = PyCapsule_New(pending, PENDING_NAME, pending_destroy);
    if (capsule == NULL) {
        PyMem_Free(lengths);
        PyMem_Free(blocks);
        PyMem_Free(pending);
        PyBuffer_Release(&frames);
        return NULL;
    }
    /* posted last: nothing can fail after a helper may have started on it */
    pending->posted = pool_post(pending->tasks, threads, compress_task, &pending->job, POOL_AHEAD);
    return capsule;
}


PyObject *
py_compress_frames(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer frames, seeds, lengths_out, checksums_out;
    int threads;
    if (!PyArg_ParseTuple(args, "y*y*w*w*i:compress_frames", &frames, &seeds, &lengths_out, &checksums_out,
                          &threads)) {
        return NULL;
    }
    PyObject *result = NULL;
    char *blocks = NULL;
    int *lengths = NULL;
    Py_ssize_t n = seeds.len / 4, frame_nbytes = n > 0 ? frames.len / n : 0;
    if (n <= 0 || seeds.len % 4 != 0 || (uintptr_t)seeds.buf % 4 != 0 || frame_nbytes <= 0
        || frame_nbytes > INT_MAX / 2 || frames.len != n * frame_nbytes || lengths_out.len != n * 8
        || (uintptr_t)lengths_out.buf % 8 != 0 || checksums_out.len != n * 4 || (uintptr_t)checksums_out.buf % 4 != 0
        || threads < 1 || threads > POOL_MAX_THREADS) {
        PyErr_SetString(PyExc_ValueError,
                        "compress_frames: expected n frames, n uint32 seeds, n int64 lengths, n uint32 checksums and "
                        "1 to POOL_MAX_THREADS threads");
        goto done;
    }
    size_t bound = (size_t)LZ4_compressBound((int)frame_nbytes);
    blocks = PyMem_Malloc((size_t)n * bound);
    lengths = PyMem_Malloc((size_t)n * sizeof(int));
    if (blocks == NULL || lengths == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    long long total;
    Py_BEGIN_ALLOW_THREADS
    total = compress_frames((const char *)frames.buf, n, (int)frame_nbytes, blocks, lengths, INT_MAX,
                            (const uint32_t *)seeds.buf, (uint32_t *)checksums_out.buf, threads);
    Py_END_ALLOW_THREADS
    if (total < 0) { /* every frame compresses to at most its bound: only a stream state can fail */
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        ((int64_t *)lengths_out.buf)[i] = lengths[i];
    }
    result = PyBytes_FromStringAndSize(blocks, (Py_ssize_t)total);
done:
    PyMem_Free(lengths);
    PyMem_Free(blocks);
    PyBuffer_Release(&frames);
    PyBuffer_Release(&seeds);
    PyBuffer_Release(&lengths_out);
    PyBuffer_Release(&checksums_out);
    return result;
}
