/* Batch lz4 decoding: see lz4_decode.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdatomic.h>
#include <string.h>

#include "argument_arrays.h"
#include "crc32.h"
#include "frame_entries.h"
#include "frame_sources.h"
#include "lz4_api.h"
#include "lz4_decode.h"
#include "work_pool.h"

#define BLOCK_FRAMES 4 /* frames a thread claims at a time (one pool task) */

/* Decodes one lz4 block of `length` bytes into exactly frame_nbytes bytes at dst; whether it did.
 * A block of literals only (a single sequence: its token, the length's extra bytes, then the literals,
 * to the block's end; what lz4 makes of a frame too small or too random to compress, such as a
 * CartPole state) is copied as it stands: that is what LZ4_decompress_safe does with it, at a
 * tenth of its ~12 ns setup for a 16-byte frame. Anything else goes to LZ4_decompress_safe. */
static int
decode_block(const char *src, int length, char *dst, int frame_nbytes)
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

/* A batch shared by the pool's threads: each task is a block of BLOCK_FRAMES frames. The helpers read
 * the batch and first_bad on cache lines of their own, never on one the caller writes meanwhile (the
 * job lives on the caller's stack). */
typedef struct {
    _Alignas(64) FrameBatch batch;
    _Alignas(64) _Atomic Py_ssize_t first_bad; /* batch.n while none is known */
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
    /* Sampled frames lie far apart: start fetching the first bytes of each frame of the block, so that
     * their cache misses overlap instead of stalling the decode one frame at a time. Done by each thread
     * for its blocks, not by the caller while it locates the frames alone (~5% faster). */
    for (Py_ssize_t i = start; i < stop; i++) {
        for (int64_t line = 0; b->sources[i] != NULL && line < b->lengths[i] && line < 512; line += 64) {
            __builtin_prefetch(b->sources[i] + line, 0, 0);
        }
    }
    for (Py_ssize_t i = start; i < stop; i++) {
        const char *src = b->sources[i];
        int length = (int)b->lengths[i]; /* range-checked when sources[i] was set */
        if (src == NULL || frame_crc32(b->seeds[i], (const unsigned char *)src, (size_t)length) != b->checksums[i]
            || !decode_block(src, length, b->out + (size_t)i * (size_t)b->frame_nbytes, b->frame_nbytes)) {
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
    Py_ssize_t blocks = (batch->n + BLOCK_FRAMES - 1) / BLOCK_FRAMES;
    if (threads <= 1) { /* the calling thread alone: decode_task inlined, not called through the pool */
        for (Py_ssize_t block = 0; block < blocks; block++) {
            decode_task(&job, block);
        }
    }
    else {
        pool_run(blocks, threads, decode_task, &job);
    }
    Py_ssize_t bad = atomic_load(&job.first_bad);
    return bad < batch->n ? bad : -1;
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
py_wake_helpers(PyObject *module, PyObject *arg)
{
    (void)module;
    long helpers = PyLong_AsLong(arg);
    if (helpers == -1 && PyErr_Occurred()) {
        return NULL;
    }
    pool_wake(helpers > POOL_MAX_THREADS ? POOL_MAX_THREADS : (int)helpers);
    Py_RETURN_NONE;
}

PyObject *
py_decode(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *views_arg;
    FrameSources frames;
    Py_buffer out;
    Py_ssize_t frame_nbytes;
    int threads;
    if (!PyArg_ParseTuple(args, "Oy*y*y*y*y*w*ni:decode", &views_arg, &frames.segments, &frames.offsets,
                          &frames.lengths, &frames.checksums, &frames.seeds, &out, &frame_nbytes, &threads)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (frame_sources_check(&frames, frame_nbytes) < 0 || check_threads(threads) < 0) {
        goto done;
    }
    if (out.len != frames.n * frame_nbytes) {
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
py_decode_entries(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *views_arg;
    Py_buffer table, steps, out;
    FrameTable frames = {.table = &table};
    unsigned long seed_multiplier;
    Py_ssize_t frame_nbytes;
    int threads;
    if (!PyArg_ParseTuple(args, "OLy*L" ENTRY_LAYOUT_FORMAT "y*kLLw*ni:decode_entries", &views_arg, &frames.base, &table,
                          &frames.frame_slots, ENTRY_LAYOUT_FIELDS(frames.layout), &steps, &seed_multiplier,
                          &frames.segment_bytes, &frames.bytes_written, &out, &frame_nbytes, &threads)) {
        return NULL;
    }
    frames.seed_multiplier = (uint32_t)seed_multiplier;
    PyObject *result = NULL, *views = NULL;
    const char **sources = NULL;
    int64_t *lengths = NULL;
    uint32_t *words = NULL;
    Py_buffer *buffers = NULL;
    Py_ssize_t acquired = 0;
    Py_ssize_t n = steps.len / 8;

    if (frame_nbytes <= 0 || frame_nbytes > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "frame_nbytes is %zd; expected 1 to %d", frame_nbytes, INT_MAX);
        goto done;
    }
    if (check_threads(threads) < 0 || frame_table_check(&frames, "decode_entries") < 0
        || check_array(&steps, "steps", n, 8) < 0) {
        goto done;
    }
    if (out.len != n * frame_nbytes) {
        PyErr_Format(PyExc_ValueError, "out has %zd bytes; expected %zd frames of %zd bytes", out.len, n,
                     frame_nbytes);
        goto done;
    }
    if (views_prepare(views_arg, n, &views, &buffers) < 0) {
        goto done;
    }
    size_t count = (size_t)(n > 0 ? n : 1);
    sources = PyMem_Malloc(count * sizeof(*sources));
    lengths = PyMem_Malloc(count * sizeof(*lengths));
    words = PyMem_Malloc(2 * count * sizeof(*words)); /* checksums, then seeds */
    if (sources == NULL || lengths == NULL || words == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int located = locate_entries(&frames, views, (const int64_t *)steps.buf, NULL, n, sources, lengths, words,
                                 words + count, buffers, &acquired);
    if (located != 0) {
        result = located < 0 ? NULL : Py_NewRef(Py_False);
        goto done;
    }
    FrameBatch batch = {sources, lengths, words, words + count, (char *)out.buf, (int)frame_nbytes, n};
    Py_ssize_t bad = -1;
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        bad = decode_frames(&batch, threads);
        Py_END_ALLOW_THREADS
    }
    result = Py_NewRef(bad == -1 ? Py_True : Py_False);
done:
    views_release(views, buffers, acquired);
    PyMem_Free(words);
    PyMem_Free(lengths);
    PyMem_Free(sources);
    PyBuffer_Release(&table);
    PyBuffer_Release(&steps);
    PyBuffer_Release(&out);
    return result;
}
