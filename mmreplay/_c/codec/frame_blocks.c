/* Frames compressed alone, one lz4 block each: see frame_blocks.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdatomic.h>
#include <string.h>

#include "argument_arrays.h"
#include "codec/crc32.h"
#include "codec/frame_blocks.h"
#include "pool/work_pool.h"
#include "ring/frame_sources.h"

#define BLOCK_FRAMES 4 /* frames a thread claims at a time (one pool task) */

/* A block of literals only (what lz4 makes of a frame too small or too random to compress, such as a
 * CartPole state) is copied as it stands, as LZ4_decompress_safe would, at a tenth of its ~12 ns setup
 * for a 16-byte frame; anything else goes to LZ4_decompress_safe. */
int
frame_block_decode(const char *src, int length, char *dst, int frame_nbytes)
{
    const unsigned char *in = (const unsigned char *)src;
    if (length > 0) {
        long literals = in[0] >> 4;
        int header = 1;
        if (literals == 15) {
            unsigned char extra;
            do {
                if (header >= length) {
                    break;
                }
                extra = in[header++];
                literals += extra;
            } while (extra == 255 && literals <= frame_nbytes);
        }
        if (literals == frame_nbytes && header + literals == length) {
            memcpy(dst, src + header, (size_t)frame_nbytes);
            return 1;
        }
    }
    return LZ4_decompress_safe(src, dst, length, frame_nbytes) == frame_nbytes;
}

int
frame_block_compress(LZ4_stream_t *stream, const char *frame, int frame_nbytes, char *out, int capacity)
{
    /* A fresh stream per frame, as python-lz4's lz4.block.compress does: LZ4_compress_default would pick
     * a 16-bit table for inputs under 64 KiB and compress Atari frames ~5% worse. */
    LZ4_resetStream(stream);
    int length = LZ4_compress_fast_continue(stream, frame, out, frame_nbytes, capacity, 1);
    return length > 0 ? length : 0;
}

/* A batch shared by the pool's threads: each task is a block of BLOCK_FRAMES frames. */
typedef struct {
    FrameBatch batch;
    _Atomic Py_ssize_t first_bad; /* batch.n while none is known */
} DecodeJob;

static void
decode_task(void *context, Py_ssize_t number)
{
    DecodeJob *job = context;
    const FrameBatch *b = &job->batch;
    Py_ssize_t start = number * BLOCK_FRAMES, stop = start + BLOCK_FRAMES < b->n ? start + BLOCK_FRAMES : b->n;
    if (start >= atomic_load(&job->first_bad)) {
        return; /* frames after a known bad one need no decoding: the caller discards the batch */
    }
    /* Sampled frames lie far apart: fetch the first bytes of each frame of the block at once, so that
     * their cache misses overlap instead of stalling the decode one frame at a time. */
    for (Py_ssize_t i = start; i < stop; i++) {
        for (int64_t line = 0; b->sources[i] != NULL && line < b->lengths[i] && line < 512; line += 64) {
            __builtin_prefetch(b->sources[i] + line, 0, 0);
        }
    }
    for (Py_ssize_t i = start; i < stop; i++) {
        const char *src = b->sources[i];
        int length = (int)b->lengths[i]; /* range-checked when sources[i] was set */
        if (src == NULL || frame_crc32(b->seeds[i], (const unsigned char *)src, (size_t)length) != b->checksums[i]
            || !frame_block_decode(src, length, b->out + (size_t)i * (size_t)b->frame_nbytes, b->frame_nbytes)) {
            Py_ssize_t known = atomic_load(&job->first_bad);
            while (i < known && !atomic_compare_exchange_weak(&job->first_bad, &known, i)) {
            }
            return;
        }
    }
}

Py_ssize_t
decode_frames(const FrameBatch *batch, int threads)
{
    DecodeJob job = {.batch = *batch};
    atomic_init(&job.first_bad, batch->n);
    pool_run((batch->n + BLOCK_FRAMES - 1) / BLOCK_FRAMES, threads, decode_task, &job);
    Py_ssize_t bad = atomic_load(&job.first_bad);
    return bad < batch->n ? bad : -1;
}

/* Frames compressed by the pool's threads, each alone into its own slot of `bound` bytes (blocks + i *
 * bound); a task is a run of consecutive frames, compressed with one stream state. */
typedef struct {
    const char *frames;
    Py_ssize_t n, chunk; /* frames; frames a task compresses */
    int frame_nbytes, bound, max_length;
    char *blocks;
    int *lengths;
    const uint32_t *seeds; /* with checksums: each block's CRC-32 seeded with seeds[i] (or NULL) */
    uint32_t *checksums;
    _Atomic int failed; /* a block too long, or no memory for a stream state */
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
        char *block = job->blocks + (size_t)i * (size_t)job->bound;
        int length = frame_block_compress(stream, job->frames + (size_t)i * (size_t)job->frame_nbytes,
                                          job->frame_nbytes, block, job->bound);
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

long long
compress_frames(const char *frames, Py_ssize_t n, int frame_nbytes, char *blocks, int *lengths, int max_length,
                const uint32_t *seeds, uint32_t *checksums, int threads)
{
    CompressJob job = {.frames = frames, .n = n, .frame_nbytes = frame_nbytes,
                       .bound = LZ4_compressBound(frame_nbytes), .max_length = max_length, .blocks = blocks,
                       .lengths = lengths, .seeds = seeds, .checksums = checksums};
    atomic_init(&job.failed, 0);
    /* two runs a thread, so that a helper that joins late leaves little to the others */
    Py_ssize_t tasks = threads > 1 ? 2 * (Py_ssize_t)(threads < n ? threads : n) : 1;
    job.chunk = (n + tasks - 1) / tasks;
    pool_run((n + job.chunk - 1) / job.chunk, threads, compress_task, &job);
    if (atomic_load(&job.failed)) {
        return -1;
    }
    long long total = 0;
    for (Py_ssize_t i = 0; i < n; i++) { /* pack: each block moves down, never over one not yet moved */
        if (total != (long long)i * job.bound) {
            memmove(blocks + total, blocks + (size_t)i * (size_t)job.bound, (size_t)lengths[i]);
        }
        total += lengths[i];
    }
    return total;
}

static int
check_threads(int threads)
{
    if (threads < 1 || threads > POOL_MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "threads is %d; expected 1 to %d", threads, POOL_MAX_THREADS);
        return -1;
    }
    return 0;
}

PyObject *
py_decode(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *views_arg, *blocks;
    FrameSources frames;
    Py_buffer out;
    Py_ssize_t frame_nbytes;
    int threads;
    if (!PyArg_ParseTuple(args, "OOw*ni:decode", &views_arg, &blocks, &out, &frame_nbytes, &threads)) {
        return NULL;
    }
    if (frame_sources_parse(blocks, &frames) < 0) {
        PyBuffer_Release(&out);
        return NULL;
    }
    PyObject *result = NULL;
    if (check_threads(threads) < 0) {
        goto done;
    }
    if (frame_nbytes <= 0 || frame_nbytes > INT_MAX || out.len != frames.n * frame_nbytes) {
        PyErr_Format(PyExc_ValueError, "out has %zd bytes; expected %zd frames of %zd bytes", out.len, frames.n,
                     frame_nbytes);
        goto done;
    }
    if (frame_sources_locate(&frames, views_arg) < 0) {
        goto done;
    }
    FrameBatch batch = {frames.sources, (const int64_t *)frames.lengths.buf, (const uint32_t *)frames.checksums.buf,
                        (const uint32_t *)frames.seeds.buf, (char *)out.buf, (int)frame_nbytes, frames.n};
    Py_ssize_t bad;
    Py_BEGIN_ALLOW_THREADS
    bad = decode_frames(&batch, threads);
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(bad);
done:
    frame_sources_release(&frames);
    PyBuffer_Release(&out);
    return result;
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
    if (n <= 0 || frame_nbytes <= 0 || frame_nbytes > INT_MAX / 2 || frames.len != n * frame_nbytes
        || check_array(&seeds, "seeds", n, 4) < 0 || check_array(&lengths_out, "lengths", n, 8) < 0
        || check_array(&checksums_out, "checksums", n, 4) < 0 || check_threads(threads) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "compress_frames: expected n frames for n seeds");
        }
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
