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
 *
 * crc32(data, seed) -> int: zlib.crc32(data, seed & 0xFFFFFFFF), through frame_crc32 below.
 *
 * decode_entries(views, base, table, frame_slots, layout, steps, seed_multiplier, segment_bytes,
 *                bytes_written, out, frame_nbytes, threads) -> bool
 *   The frame ring's fast path (codec.decode_from_table): frame i's entry is table entry
 *   steps[i] % frame_slots, whose fields layout = (entry size, offsets of position u64, length,
 *   checksum u32, link u32, then the width of length: 2 or 4 bytes; little-endian) gives; its bytes
 *   lie at position, in view position / segment_bytes - base, and its seed is
 *   steps[i] * seed_multiplier + link (mod 2**32).
 *   True when every frame lies below bytes_written and inside its view and decodes as decode() checks;
 *   False otherwise, with nothing said about which frame: the caller's general path finds it.
 *
 * gather_entries(...) -> bytes | int | None: the same frames' stored blocks, still compressed (see below).
 *
 * row_checksums(rows, row_size, steps, out) -> None: mmreplay.row_checksum's compiled half.
 * gather_rows(table, row_slots, steps, out) -> int: the transition table's read (see below).
 * gather_fields(...) -> int: the same, unpacked into a batch's arrays (TransitionTable.read_fields).
 * follow_links(table, frame_slots, entry_size, link_offset, next_frames, out) -> None: the frame ring's
 *   stacks (stacking.transition_frames over its table). These are index work of a sampled batch, compiled
 *   because in numpy they cost ~33 us a batch, a quarter of its decode (12 us compiled).
 * read_transitions(...) -> bool: gather_fields, follow_links and decode_entries of a plain batch in one
 *   call (TransitionReader.transitions' fast path; see below). prefetch_rows(table, row_slots, steps):
 *   a hint that starts fetching a batch's rows before read_transitions reads them.
 *
 * append_frames(...) -> int and write_rows(...) -> None: add's fast path (ReplayStore._add_single_frames):
 *   compress frames and write them with their frame-table entries (FrameRing.append_frames), and write
 *   transition rows with their links (TransitionTable.write_continuations), each in one call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "_frames_common.h"

/* CRC-32 (zlib's polynomial, so crc32 below equals zlib.crc32) of a frame's compressed bytes. zlib
 * takes ~250 ns for a 265-byte Pong frame, a fifth of its decode; folding 16 bytes at a time with
 * carry-less multiplication (PCLMULQDQ, x86-64 CPUs since 2010) takes ~55 ns. The folding and its
 * constants are those of Chromium's zlib (crc32_simd.c, after Intel's "Fast CRC Computation for
 * Generic Polynomials Using PCLMULQDQ Instruction"); other CPUs and the tail under 16 bytes use zlib. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MMREPLAY_HAVE_FOLD 1

/* CRC of len bytes (len >= 64, a multiple of 16) with crc the pre-inverted running value. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_fold(const unsigned char *buf, size_t len, uint32_t crc)
{
    static const uint64_t __attribute__((aligned(16))) k1k2[] = {0x0154442bd4, 0x01c6e41596};
    static const uint64_t __attribute__((aligned(16))) k3k4[] = {0x01751997d0, 0x00ccaa009e};
    static const uint64_t __attribute__((aligned(16))) k5k0[] = {0x0163cd6124, 0x0000000000};
    static const uint64_t __attribute__((aligned(16))) poly[] = {0x01db710641, 0x01f7011641};
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;
    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = _mm_load_si128((const __m128i *)k1k2);
    buf += 64; len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64; len -= 64;
    }
    x0 = _mm_load_si128((const __m128i *)k3k4);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16; len -= 16;
    }
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_loadl_epi64((const __m128i *)k5k0);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_load_si128((const __m128i *)poly);
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static int use_fold; /* set at import when the CPU has PCLMULQDQ and SSE4.1 */

/* Inputs under 64 bytes (a transition row, a small frame such as CartPole's 18-byte block, the tail
 * after folding): slicing-by-8 over tables of zlib's polynomial, 8 independent lookups per 8 bytes.
 * zlib 1.2.13 steps byte by byte below 64 bytes, each step waiting on the last: 20.7 against 5.9 ns
 * for 18 bytes, 32.5 against 8.7 ns for 26 (-O2, the AMD development VM). Little-endian hosts only. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define MMREPLAY_HAVE_SLICE8 1
static uint32_t crc_tables[8][256];

static void
crc_tables_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        }
        crc_tables[0][i] = c;
    }
    for (int t = 1; t < 8; t++) {
        for (int i = 0; i < 256; i++) {
            crc_tables[t][i] = (crc_tables[t - 1][i] >> 8) ^ crc_tables[0][crc_tables[t - 1][i] & 0xFF];
        }
    }
}

static inline uint32_t
crc32_short(uint32_t crc, const unsigned char *buf, size_t len)
{
    const uint32_t(*t)[256] = (const uint32_t(*)[256])crc_tables;
    crc = ~crc;
    for (; len >= 8; buf += 8, len -= 8) {
        uint32_t low, high;
        memcpy(&low, buf, 4);
        memcpy(&high, buf + 4, 4);
        low ^= crc;
        crc = t[7][low & 0xFF] ^ t[6][(low >> 8) & 0xFF] ^ t[5][(low >> 16) & 0xFF] ^ t[4][low >> 24]
              ^ t[3][high & 0xFF] ^ t[2][(high >> 8) & 0xFF] ^ t[1][(high >> 16) & 0xFF] ^ t[0][high >> 24];
    }
    for (; len > 0; buf++, len--) {
        crc = t[0][(crc ^ *buf) & 0xFF] ^ (crc >> 8);
    }
    return ~crc;
}
#endif

static uint32_t
frame_crc32(uint32_t crc, const unsigned char *buf, size_t len)
{
#ifdef MMREPLAY_HAVE_FOLD
    if (use_fold && len >= 64) {
        size_t chunk = len & ~(size_t)15;
        crc = ~crc32_fold(buf, chunk, ~crc);
        buf += chunk;
        len -= chunk;
    }
#endif
#ifdef MMREPLAY_HAVE_SLICE8
    if (len < 64) {
        return crc32_short(crc, buf, len);
    }
#endif
    return len ? (uint32_t)crc32(crc, (const Bytef *)buf, (uInt)len) : crc;
}

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
 * itself lives until its last user drops it. At most helper_slots helpers join it. */
typedef struct {
    Batch batch;
    Py_ssize_t blocks;
    _Atomic Py_ssize_t next_block, blocks_done, first_bad; /* first_bad: n when none */
    atomic_int users, helper_slots;
    pthread_mutex_t lock;
    pthread_cond_t all_done;
} Job;

static Py_ssize_t
decode_range(const Batch *b, Py_ssize_t start, Py_ssize_t stop)
{
    for (Py_ssize_t block = start; block < stop; block += BLOCK_FRAMES) {
        Py_ssize_t end = block + BLOCK_FRAMES < stop ? block + BLOCK_FRAMES : stop;
        /* Sampled frames lie far apart: start fetching the first bytes of each frame of the block, so
         * that their cache misses overlap instead of stalling the decode one frame at a time. Done by
         * each thread for its blocks, not by the caller while it locates the frames alone (~5% faster). */
        for (Py_ssize_t i = block; i < end; i++) {
            for (int64_t line = 0; b->sources[i] != NULL && line < b->lengths[i] && line < 512; line += 64) {
                __builtin_prefetch(b->sources[i] + line, 0, 0);
            }
        }
        for (Py_ssize_t i = block; i < end; i++) {
            const char *src = b->sources[i];
            int length = (int)b->lengths[i]; /* range-checked when sources[i] was set */
            if (src == NULL
                || frame_crc32(b->seeds[i], (const unsigned char *)src, (size_t)length) != b->checksums[i]
                || !decode_block(src, length, b->out + (size_t)i * (size_t)b->frame_nbytes, b->frame_nbytes)) {
                return i;
            }
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

/* The helper threads, started once and kept: creating a thread per batch costs more than decoding a
 * sampled batch's share (~20 us here against ~60 us for 80 Pong frames). A caller posts its job and
 * bumps generation; each helper that wakes takes a reference to the posted job and works on it.
 *
 * SPIN_NANOSECONDS: how long a helper polls for the next job before it sleeps. A loop of
 * store.sample(32) calls spends ~70-100 us in Python between two decodes; a helper that slept in that
 * gap took as long to wake as it saved (1% faster with a 56 us poll; 25% with this one, on the 2-core
 * development machine: see codec._SPLIT_MIN_BYTES). So a helper keeps its core for up to 200 us after
 * each batch. */
#define SPIN_NANOSECONDS 200000
#define DONE_SPIN_NANOSECONDS 100000 /* how long a caller polls for its helpers' last blocks */

/* Polls done(arg) for up to `nanoseconds`; returns whether it became true. */
static int
spin_until(int (*done)(const void *), const void *arg, long nanoseconds)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (unsigned spin = 1; !done(arg); spin++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (spin % 64 == 0) { /* the clock costs more than a poll: read it now and then */
            clock_gettime(CLOCK_MONOTONIC, &now);
            if ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) > nanoseconds) {
                return done(arg);
            }
        }
    }
    return 1;
}

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    Job *job; /* the newest job (a reference), or NULL */
    _Atomic unsigned long generation;
    int helpers;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0};

static int
new_job_posted(const void *seen_generation)
{
    return atomic_load(&pool.generation) != *(const unsigned long *)seen_generation;
}

static int
job_done(const void *job)
{
    return atomic_load(&((Job *)job)->blocks_done) == ((const Job *)job)->blocks;
}

static void *
pool_helper(void *unused)
{
    (void)unused;
    unsigned long seen = atomic_load(&pool.generation);
    for (;;) {
        spin_until(new_job_posted, &seen, SPIN_NANOSECONDS);
        pthread_mutex_lock(&pool.lock);
        while (atomic_load(&pool.generation) == seen) {
            pthread_cond_wait(&pool.wake, &pool.lock);
        }
        seen = atomic_load(&pool.generation);
        Job *job = pool.job;
        if (job != NULL) {
            atomic_fetch_add(&job->users, 1);
        }
        pthread_mutex_unlock(&pool.lock);
        if (job != NULL) {
            if (atomic_fetch_sub(&job->helper_slots, 1) > 0) {
                job_work(job);
            }
            job_release(job);
        }
    }
    return NULL;
}

/* A forked child has none of its parent's threads: it starts its own helpers when it needs them. */
static void
pool_after_fork_in_child(void)
{
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pool.job = NULL; /* the parent's reference: leaked in the child, never freed twice */
    pool.helpers = 0;
}

/* Starts helpers until there are `wanted` (under pool.lock); returns how many there are. */
static int
pool_grow(int wanted)
{
    static int fork_handler_set = 0;
    if (!fork_handler_set) {
        fork_handler_set = pthread_atfork(NULL, NULL, pool_after_fork_in_child) == 0;
        if (!fork_handler_set) {
            return pool.helpers; /* without the handler a forked child would wait on helpers it lacks */
        }
    }
    pthread_attr_t attr;
    if (pool.helpers >= wanted || pthread_attr_init(&attr) != 0) {
        return pool.helpers;
    }
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    while (pool.helpers < wanted) {
        pthread_t id;
        if (pthread_create(&id, &attr, pool_helper, NULL) != 0) {
            break; /* fewer helpers: the caller decodes their share */
        }
        pool.helpers++;
    }
    pthread_attr_destroy(&attr);
    return pool.helpers;
}

/* Decodes the batch on the calling thread plus up to threads - 1 pool helpers; the GIL must be
 * released. Returns the first bad index or -1; -2 when out of memory. */
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
    atomic_init(&job->users, 2); /* the caller's reference and the pool's */
    atomic_init(&job->helper_slots, threads - 1);
    pthread_mutex_init(&job->lock, NULL);
    pthread_cond_init(&job->all_done, NULL);

    pthread_mutex_lock(&pool.lock);
    pool_grow(threads - 1);
    Job *previous = pool.job;
    pool.job = job;
    atomic_fetch_add(&pool.generation, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    if (previous != NULL) {
        job_release(previous);
    }

    job_work(job);
    /* The helper is finishing its last block (a few us) unless it was preempted: wait for it awake.
     * Sleeping on the condition variable here and being woken cost ~15% of a sampled batch's time. */
    if (!spin_until(job_done, job, DONE_SPIN_NANOSECONDS)) {
        pthread_mutex_lock(&job->lock);
        while (atomic_load(&job->blocks_done) < job->blocks) {
            pthread_cond_wait(&job->all_done, &job->lock);
        }
        pthread_mutex_unlock(&job->lock);
    }
    Py_ssize_t bad = atomic_load(&job->first_bad);

    /* Take the job back from the pool, unless a newer one replaced it (which released it then). */
    pthread_mutex_lock(&pool.lock);
    int posted = pool.job == job;
    if (posted) {
        pool.job = NULL;
    }
    pthread_mutex_unlock(&pool.lock);
    if (posted) {
        job_release(job);
    }
    job_release(job);
    return bad < batch->n ? bad : -1;
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

/* The frame table entry fields decode_entries reads, little-endian (the frame ring's layout, passed in). */
typedef struct {
    Py_ssize_t size, position, length, checksum, link, length_bytes;
} EntryLayout;

/* Whether every field lies inside the entry, and length is 2 or 4 bytes wide. */
static int
layout_fits(const EntryLayout *layout)
{
    return layout->size > 0 && layout->position >= 0 && layout->position + 8 <= layout->size
           && (layout->length_bytes == 2 || layout->length_bytes == 4) && layout->length >= 0
           && layout->length + layout->length_bytes <= layout->size && layout->checksum >= 0
           && layout->checksum + 4 <= layout->size && layout->link >= 0 && layout->link + 4 <= layout->size;
}

static inline uint64_t
read_le(const unsigned char *p, int bytes)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* one load, where the byte loop below costs one per byte */
    if (bytes == 8) {
        uint64_t value;
        memcpy(&value, p, 8);
        return value;
    }
    if (bytes == 4) {
        uint32_t value;
        memcpy(&value, p, 4);
        return value;
    }
    if (bytes == 2) {
        uint16_t value;
        memcpy(&value, p, 2);
        return value;
    }
#endif
    uint64_t value = 0;
    for (int k = bytes - 1; k >= 0; k--) {
        value = (value << 8) | p[k];
    }
    return value;
}

/* The slot of a step in a ring of `slots` entries as Python's % gives it: never negative, also for a
 * negative step (which only a corrupt link can produce; the numpy fallbacks read that same slot). */
static int64_t
ring_slot(int64_t step, int64_t slots)
{
    int64_t slot = step % slots;
    return slot < 0 ? slot + slots : slot;
}

/* ring_slot(step, slots) for a step near anchor, a multiple of slots: without a division (15 to 40
 * cycles, and a sampled batch needs several per transition) when the step lies within one lap of it,
 * as the steps of a batch do; any other step takes ring_slot. */
static inline int64_t
ring_slot_near(int64_t step, int64_t anchor, int64_t slots)
{
    int64_t offset;
    if (!__builtin_sub_overflow(step, anchor, &offset) && offset >= -slots && offset < 2 * slots) {
        return offset < 0 ? offset + slots : offset >= slots ? offset - slots : offset;
    }
    return ring_slot(step, slots);
}

/* Copies a row of size bytes (at most 256) word by word: memcpy of a size known only at run time
 * compiles to `rep movs`, whose start-up costs more than copying a 26-byte row. */
static inline void
copy_row(unsigned char *copy, const unsigned char *row, Py_ssize_t size)
{
    Py_ssize_t k = 0;
    for (; k + 8 <= size; k += 8) {
        memcpy(copy + k, row + k, 8);
    }
    for (; k < size; k++) {
        copy[k] = row[k];
    }
}

/* Fills sources/lengths/checksums/seeds from the table entries of steps (in table slots[i], or steps[i]
 * mod frame_slots where slots is NULL); 0 when every frame lies in the bytes written and in a view, 1
 * when one does not (the caller takes its general path), -1 with a Python error set. Acquires each
 * view's buffer once, into buffers[]. */
static int
locate_entries(PyObject *views, long long base, const Py_buffer *table, long long frame_slots,
               const EntryLayout *layout, const int64_t *steps, const int64_t *slots, Py_ssize_t n,
               uint32_t seed_multiplier, long long segment_bytes, long long bytes_written, const char **sources,
               int64_t *lengths, uint32_t *checksums, uint32_t *seeds, Py_buffer *buffers, Py_ssize_t *acquired)
{
    BatchViews batch;
    if (batch_views_open(&batch, views, buffers, acquired) < 0) {
        return -1;
    }
    const unsigned char *entries = (const unsigned char *)table->buf;
    /* The segment of the last frame, [segment_start, segment_start + segment_bytes): most frames of a
     * batch lie in the same one as the frame before, and need no division to find it. */
    uint64_t segment_start = 1, segment_end = 0;
    const Py_buffer *buffer = NULL;
    int status = 0;
    for (Py_ssize_t i = 0; i < n && status == 0; i++) {
        if (steps[i] < 0) {
            status = 1;
            break;
        }
        int64_t slot = slots != NULL ? slots[i] : steps[i] % frame_slots;
        const unsigned char *entry = entries + (size_t)slot * (size_t)layout->size;
        uint64_t position = read_le(entry + layout->position, 8);
        uint64_t length = read_le(entry + layout->length, (int)layout->length_bytes);
        if (position > (uint64_t)bytes_written || length > (uint64_t)bytes_written - position) {
            status = 1;
            break;
        }
        if (position < segment_start || position >= segment_end) {
            long long view = (long long)(position / (uint64_t)segment_bytes) - base;
            if (view < 0 || view >= batch.count) {
                status = 1;
                break;
            }
            buffer = batch_views_get(&batch, (Py_ssize_t)view);
            if (buffer == NULL) {
                status = -1;
                break;
            }
            segment_start = position - position % (uint64_t)segment_bytes;
            segment_end = segment_start + (uint64_t)segment_bytes;
        }
        uint64_t offset = position - segment_start;
        if (offset > (uint64_t)buffer->len || length > (uint64_t)buffer->len - offset) {
            status = 1;
            break;
        }
        sources[i] = (const char *)buffer->buf + offset;
        __builtin_prefetch(sources[i], 0, 0); /* the frame's first bytes: their misses overlap the next lookups */
        lengths[i] = (int64_t)length;
        checksums[i] = (uint32_t)read_le(entry + layout->checksum, 4);
        seeds[i] = (uint32_t)((uint64_t)steps[i] * seed_multiplier + read_le(entry + layout->link, 4));
    }
    batch_views_close(&batch);
    return status;
}

static PyObject *
lz4batch_decode_entries(PyObject *module, PyObject *args)
{
    PyObject *views_arg;
    long long base, frame_slots, segment_bytes, bytes_written;
    Py_buffer table, steps, out;
    EntryLayout layout;
    unsigned long seed_multiplier;
    Py_ssize_t frame_nbytes;
    int threads;
    if (!PyArg_ParseTuple(args, "OLy*L(nnnnnn)y*kLLw*ni:decode_entries", &views_arg, &base, &table, &frame_slots,
                          &layout.size, &layout.position, &layout.length, &layout.checksum, &layout.link,
                          &layout.length_bytes, &steps,
                          &seed_multiplier, &segment_bytes, &bytes_written, &out, &frame_nbytes, &threads)) {
        return NULL;
    }
    PyObject *result = NULL, *views = NULL;
    const char **sources = NULL;
    int64_t *lengths = NULL;
    uint32_t *words = NULL;
    Py_buffer *buffers = NULL;
    Py_ssize_t acquired = 0;
    Py_ssize_t n = steps.len / 8;

    if (frame_nbytes <= 0 || frame_nbytes > INT_MAX || threads < 1 || threads > MAX_THREADS || frame_slots <= 0
        || segment_bytes <= 0 || bytes_written < 0 || !layout_fits(&layout)) {
        PyErr_SetString(PyExc_ValueError, "decode_entries: frame_nbytes, threads, sizes or entry layout out of range");
        goto done;
    }
    if (check_array(&steps, "steps", n, 8) < 0) {
        goto done;
    }
    if (table.len != frame_slots * layout.size) {
        PyErr_Format(PyExc_ValueError, "table has %zd bytes; expected %lld entries of %zd bytes", table.len,
                     frame_slots, layout.size);
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
    size_t count = (size_t)(n > 0 ? n : 1);
    sources = PyMem_Malloc(count * sizeof(*sources));
    lengths = PyMem_Malloc(count * sizeof(*lengths));
    words = PyMem_Malloc(2 * count * sizeof(*words));
    buffers = PyMem_Malloc((size_t)(buffer_count > 0 ? buffer_count : 1) * sizeof(*buffers));
    if (sources == NULL || lengths == NULL || words == NULL || buffers == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int located = locate_entries(views, base, &table, frame_slots, &layout, (const int64_t *)steps.buf, NULL, n,
                                 (uint32_t)seed_multiplier, segment_bytes, bytes_written, sources, lengths, words,
                                 words + count, buffers, &acquired);
    if (located < 0) {
        goto done;
    }
    if (located > 0) {
        result = Py_NewRef(Py_False);
        goto done;
    }
    Batch batch = {sources, lengths, words, words + count, (char *)out.buf, (int)frame_nbytes, n};
    if (threads > (n + BLOCK_FRAMES - 1) / BLOCK_FRAMES) {
        threads = (int)((n + BLOCK_FRAMES - 1) / BLOCK_FRAMES);
    }
    Py_ssize_t bad = -1;
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        bad = decode_all(&batch, threads);
        Py_END_ALLOW_THREADS
    }
    result = bad == -2 ? PyErr_NoMemory() : Py_NewRef(bad == -1 ? Py_True : Py_False);

done:
    for (Py_ssize_t k = 0; k < acquired; k++) {
        PyBuffer_Release(&buffers[k]);
    }
    PyMem_Free(buffers);
    PyMem_Free(words);
    PyMem_Free(lengths);
    PyMem_Free(sources);
    Py_XDECREF(views);
    PyBuffer_Release(&table);
    PyBuffer_Release(&steps);
    PyBuffer_Release(&out);
    return result;
}

/* gather_entries(views, base, table, frame_slots, layout, steps, seed_multiplier, segment_bytes,
 *                bytes_written, lengths, checksums, seeds, verify) -> bytes | int | None
 *   The stored blocks of frames, still compressed, located as decode_entries locates them: their bytes
 *   back to back, and each one's length (int64), checksum and CRC seed (uint32) into the arrays given.
 *   With verify, each block is checked against its checksum: the index of the first that fails. None
 *   when a frame lies outside the bytes written or the views (the caller's general path finds it). */
static PyObject *
lz4batch_gather_entries(PyObject *module, PyObject *args)
{
    PyObject *views_arg;
    long long base, frame_slots, segment_bytes, bytes_written;
    Py_buffer table, steps, lengths, checksums, seeds;
    EntryLayout layout;
    unsigned long seed_multiplier;
    int verify;
    if (!PyArg_ParseTuple(args, "OLy*L(nnnnnn)y*kLLw*w*w*p:gather_entries", &views_arg, &base, &table, &frame_slots,
                          &layout.size, &layout.position, &layout.length, &layout.checksum, &layout.link,
                          &layout.length_bytes, &steps, &seed_multiplier, &segment_bytes, &bytes_written, &lengths,
                          &checksums, &seeds, &verify)) {
        return NULL;
    }
    PyObject *result = NULL, *views = NULL;
    const char **sources = NULL;
    Py_buffer *buffers = NULL;
    Py_ssize_t acquired = 0;
    Py_ssize_t n = steps.len / 8;
    if (frame_slots <= 0 || segment_bytes <= 0 || bytes_written < 0 || !layout_fits(&layout)) {
        PyErr_SetString(PyExc_ValueError, "gather_entries: sizes or entry layout out of range");
        goto done;
    }
    if (check_array(&steps, "steps", n, 8) < 0 || check_array(&lengths, "lengths", n, 8) < 0
        || check_array(&checksums, "checksums", n, 4) < 0 || check_array(&seeds, "seeds", n, 4) < 0) {
        goto done;
    }
    if (table.len != frame_slots * layout.size) {
        PyErr_Format(PyExc_ValueError, "table has %zd bytes; expected %lld entries of %zd bytes", table.len,
                     frame_slots, layout.size);
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
    int64_t *length = (int64_t *)lengths.buf;
    uint32_t *checksum = (uint32_t *)checksums.buf, *seed = (uint32_t *)seeds.buf;
    int located = locate_entries(views, base, &table, frame_slots, &layout, (const int64_t *)steps.buf, NULL, n,
                                 (uint32_t)seed_multiplier, segment_bytes, bytes_written, sources, length, checksum,
                                 seed, buffers, &acquired);
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
    for (Py_ssize_t k = 0; k < acquired; k++) {
        PyBuffer_Release(&buffers[k]);
    }
    PyMem_Free(buffers);
    PyMem_Free(sources);
    Py_XDECREF(views);
    PyBuffer_Release(&table);
    PyBuffer_Release(&steps);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&checksums);
    PyBuffer_Release(&seeds);
    return result;
}

static PyObject *
lz4batch_crc32(PyObject *module, PyObject *args)
{
    Py_buffer data;
    unsigned long seed;
    if (!PyArg_ParseTuple(args, "y*k:crc32", &data, &seed)) {
        return NULL;
    }
    uint32_t crc = frame_crc32((uint32_t)seed, (const unsigned char *)data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

static void
write_le(unsigned char *p, uint64_t value, int bytes)
{
    for (int k = 0; k < bytes; k++, value >>= 8) {
        p[k] = (unsigned char)value;
    }
}

/* A row's checksum in format version 4 (mmreplay.row_checksum): the CRC-32 (zlib's) of the step as
 * 8 little-endian bytes followed by the row's bytes after checksum and next_delta. */
static uint32_t
row_crc(const unsigned char *row, Py_ssize_t row_size, int64_t step)
{
    unsigned char step_bytes[8];
    write_le(step_bytes, (uint64_t)step, 8);
#ifdef MMREPLAY_HAVE_SLICE8
    if (row_size < 64 + 8) { /* most rows: both parts in the short CRC, inlined */
        return crc32_short(crc32_short(0, step_bytes, 8), row + 8, (size_t)(row_size - 8));
    }
#endif
    uint32_t crc = frame_crc32(0, step_bytes, 8);
    return frame_crc32(crc, row + 8, (size_t)(row_size - 8));
}

/* A row's checksum in format version 3 (read only): the bytes after checksum and next_delta, byte j
 * weighted by 2j + 1, plus the step times 2654435761, mod 2**32. */
static uint32_t
row_sum_v3(const unsigned char *row, Py_ssize_t row_size, int64_t step)
{
    uint64_t sum = (uint64_t)step * 2654435761u;
    for (Py_ssize_t j = 8; j < row_size; j++) {
        sum += (uint64_t)row[j] * (uint64_t)(2 * (j - 8) + 1);
    }
    return (uint32_t)sum;
}

static uint32_t
row_checksum(const unsigned char *row, Py_ssize_t row_size, int64_t step, int version_3)
{
    return version_3 ? row_sum_v3(row, row_size, step) : row_crc(row, row_size, step);
}

/* row_checksums(rows, row_size, steps, out) -> None: the version 4 checksum of each packed row of rows
 * (n rows of row_size bytes) at its step, into out (uint32[n]). */
static PyObject *
lz4batch_row_checksums(PyObject *module, PyObject *args)
{
    Py_buffer rows, steps, out;
    Py_ssize_t row_size;
    if (!PyArg_ParseTuple(args, "y*ny*w*:row_checksums", &rows, &row_size, &steps, &out)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = steps.len / 8;
    if (row_size < 8 || rows.len != n * row_size || check_array(&steps, "steps", n, 8) < 0
        || check_array(&out, "out", n, 4) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "row_checksums: rows, row_size, steps and out do not agree");
        }
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        ((uint32_t *)out.buf)[i] = row_crc((const unsigned char *)rows.buf + i * row_size, row_size,
                                           ((const int64_t *)steps.buf)[i]);
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&rows);
    PyBuffer_Release(&steps);
    PyBuffer_Release(&out);
    return result;
}

/* gather_rows(table, row_slots, steps, out) -> int: copies the row of each step (slot step mod
 * row_slots, as Python's % gives it) from table into out, n packed rows of out's row size, and checks
 * each copy against its row checksum (version 4's CRC, or version 3's sum when version_3): -1 when every row matches its checksum, else the
 * first index that does not. Checking the copy, not the table, keeps a writer's later overwrite out of
 * what is returned. */
static PyObject *
lz4batch_gather_rows(PyObject *module, PyObject *args)
{
    Py_buffer table, steps, out;
    long long row_slots;
    int version_3 = 0;
    if (!PyArg_ParseTuple(args, "y*Ly*w*|p:gather_rows", &table, &row_slots, &steps, &out, &version_3)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = steps.len / 8;
    Py_ssize_t row_size = row_slots > 0 ? table.len / row_slots : 0;
    if (row_slots <= 0 || row_size <= 8 || table.len != row_slots * row_size || out.len != n * row_size) {
        PyErr_Format(PyExc_ValueError, "gather_rows: table of %zd bytes, %lld slots and out of %zd bytes for %zd rows",
                     table.len, row_slots, out.len, n);
        goto done;
    }
    if (check_array(&steps, "steps", n, 8) < 0) {
        goto done;
    }
    const unsigned char *rows = (const unsigned char *)table.buf;
    const int64_t *step = (const int64_t *)steps.buf;
    unsigned char *copy = (unsigned char *)out.buf;
    Py_ssize_t bad = -1;
    for (Py_ssize_t i = 0; i < n; i++) { /* sampled rows lie far apart: overlap their cache misses */
        __builtin_prefetch(rows + ring_slot(step[i], row_slots) * row_size, 0, 0);
    }
    for (Py_ssize_t i = 0; i < n; i++, copy += row_size) {
        memcpy(copy, rows + ring_slot(step[i], row_slots) * row_size, (size_t)row_size);
        if (bad < 0 && row_checksum(copy, row_size, step[i], version_3) != (uint32_t)read_le(copy, 4)) {
            bad = i;
        }
    }
    result = PyLong_FromSsize_t(bad);
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&steps);
    PyBuffer_Release(&out);
    return result;
}

/* gather_fields(table, row_slots, steps, env_bytes, next_frames, action, reward, terminated, truncated,
 *               env_index, detached) -> int
 *   gather_rows, unpacked: the fields of each step's row go straight into the arrays of a batch
 *   (next_frames int64: the step plus frame_lead; action: the row's action bytes; reward float32;
 *   terminated, truncated and detached bool, from flag bits 1, 2 and 8; env_index int64), each copy checked
 *   against its checksum: -1, or the first index that fails. One call instead of a dozen numpy calls,
 *   each several microseconds once decoding a batch has pushed numpy out of the CPU caches. Row
 *   layout: transition_table.row_dtype (little-endian; the caller passes a native-order action),
 *   rows of at most 256 bytes. */
static PyObject *
lz4batch_gather_fields(PyObject *module, PyObject *args)
{
    Py_buffer table, steps, next_frames, action, reward, terminated, truncated, env_index, detached;
    long long row_slots;
    int env_bytes, version_3 = 0;
    if (!PyArg_ParseTuple(args, "y*Ly*iw*w*w*w*w*w*w*|p:gather_fields", &table, &row_slots, &steps, &env_bytes,
                          &next_frames, &action, &reward, &terminated, &truncated, &env_index, &detached,
                          &version_3)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = steps.len / 8;
    Py_ssize_t row_size = row_slots > 0 ? table.len / row_slots : 0;
    Py_ssize_t action_offset = 17 + env_bytes; /* checksum, next_delta, frame_lead, env, reward, flags */
    Py_ssize_t action_bytes = row_size - action_offset;
    unsigned char copy[256];
    if (row_slots <= 0 || (env_bytes != 1 && env_bytes != 2) || action_bytes < 0 || table.len != row_slots * row_size
        || row_size > (Py_ssize_t)sizeof(copy) || action.len != n * action_bytes) {
        PyErr_SetString(PyExc_ValueError, "gather_fields: table, row layout or action size out of range");
        goto done;
    }
    if (check_array(&steps, "steps", n, 8) < 0 || check_array(&next_frames, "next_frames", n, 8) < 0
        || check_array(&reward, "reward", n, 4) < 0 || check_array(&terminated, "terminated", n, 1) < 0
        || check_array(&truncated, "truncated", n, 1) < 0 || check_array(&env_index, "env_index", n, 8) < 0
        || check_array(&detached, "detached", n, 1) < 0) {
        goto done;
    }
    const unsigned char *rows = (const unsigned char *)table.buf;
    const int64_t *step = (const int64_t *)steps.buf;
    for (Py_ssize_t i = 0; i < n; i++) { /* sampled rows lie far apart: overlap their cache misses */
        __builtin_prefetch(rows + ring_slot(step[i], row_slots) * row_size, 0, 0);
    }
    Py_ssize_t bad = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* Unpack a checked copy: a writer may overwrite the row meanwhile. */
        copy_row(copy, rows + ring_slot(step[i], row_slots) * row_size, row_size);
        const unsigned char *row = copy;
        if (bad < 0 && row_checksum(row, row_size, step[i], version_3) != (uint32_t)read_le(row, 4)) {
            bad = i;
        }
        uint32_t reward_bits = (uint32_t)read_le(row + 12 + env_bytes, 4);
        unsigned char flags = row[16 + env_bytes];
        ((int64_t *)next_frames.buf)[i] = step[i] + (int64_t)read_le(row + 8, 4);
        ((int64_t *)env_index.buf)[i] = (int64_t)read_le(row + 12, env_bytes);
        memcpy((char *)reward.buf + 4 * i, &reward_bits, 4);
        ((unsigned char *)terminated.buf)[i] = (flags & 1) != 0;
        ((unsigned char *)truncated.buf)[i] = (flags & 2) != 0;
        ((unsigned char *)detached.buf)[i] = (flags & 8) != 0;
        memcpy((char *)action.buf + i * action_bytes, row + action_offset, (size_t)action_bytes);
    }
    result = PyLong_FromSsize_t(bad);
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&steps);
    PyBuffer_Release(&next_frames);
    PyBuffer_Release(&action);
    PyBuffer_Release(&reward);
    PyBuffer_Release(&terminated);
    PyBuffer_Release(&truncated);
    PyBuffer_Release(&env_index);
    PyBuffer_Release(&detached);
    return result;
}

/* follow_links(table, frame_slots, entry_size, link_offset, next_frames, out): out is (n, columns)
 * int64; out[i, columns - 1] = next_frames[i] and each column before it is the one after it minus
 * that frame's u32 link (its entry, at slot frame step mod frame_slots as Python's % gives it). */
static PyObject *
lz4batch_follow_links(PyObject *module, PyObject *args)
{
    Py_buffer table, next_frames, out;
    long long frame_slots;
    Py_ssize_t entry_size, link_offset;
    if (!PyArg_ParseTuple(args, "y*Lnny*w*:follow_links", &table, &frame_slots, &entry_size, &link_offset,
                          &next_frames, &out)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = next_frames.len / 8;
    if (frame_slots <= 0 || entry_size <= 0 || link_offset < 0 || link_offset + 4 > entry_size
        || table.len != frame_slots * entry_size) {
        PyErr_SetString(PyExc_ValueError, "follow_links: table size or entry layout out of range");
        goto done;
    }
    if (check_array(&next_frames, "next_frames", n, 8) < 0) {
        goto done;
    }
    Py_ssize_t columns = n > 0 ? out.len / 8 / n : 0;
    if (n > 0 && (columns < 1 || check_array(&out, "out", n * columns, 8) < 0)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "out must hold at least one column per frame");
        }
        goto done;
    }
    const unsigned char *entries = (const unsigned char *)table.buf;
    const int64_t *next = (const int64_t *)next_frames.buf;
    int64_t *frames = (int64_t *)out.buf;
    for (Py_ssize_t i = 0; i < n; i++) { /* the newest entry of each stack; the older ones lie beside it */
        __builtin_prefetch(entries + ring_slot(next[i], frame_slots) * entry_size, 0, 0);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t *stack = frames + i * columns;
        int64_t frame = next[i];
        stack[columns - 1] = frame;
        for (Py_ssize_t c = columns - 2; c >= 0; c--) {
            frame -= (int64_t)read_le(entries + ring_slot(frame, frame_slots) * entry_size + link_offset, 4);
            stack[c] = frame;
        }
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&next_frames);
    PyBuffer_Release(&out);
    return result;
}

/* read_transitions(rows, row_slots, env_bytes, version_3, table, frame_slots, layout, seed_multiplier,
 *                  segment_bytes, bytes_written, views, base, steps, stack_size, zero_padding,
 *                  pixels, action, reward, terminated, truncated, env_index, discount, threads) -> bool
 *   A batch of transitions in one call (TransitionReader.transitions' fast path): gather_fields over the
 *   rows of steps (rows, row_slots, env_bytes, version_3 as gather_fields takes them), follow_links from
 *   each next_obs frame back stack_size frames, decode_entries of those stack_size + 1 frames into
 *   pixels (n rows of stack_size + 1 frames; table, frame_slots, layout, seed_multiplier, segment_bytes,
 *   bytes_written, views and base as decode_entries takes them), and, with zero_padding, zeroes each
 *   padding frame (column c < stack_size holding the same frame step as column c + 1:
 *   stacking.padding_columns). discount[i] (float32) is set to 0 where transition i terminated.
 *   True when every row matches its checksum and none is DETACHED, and every frame lies in the bytes
 *   written and in a view, matches its CRC and decodes; False otherwise, the arrays then unspecified:
 *   the caller's general path reads the batch again, and names what failed. Compiled as one call
 *   because for small frames (CartPole's 16 bytes) the numpy and Python steps between the three
 *   compiled ones cost as much as the compiled work itself. */
static PyObject *
lz4batch_read_transitions(PyObject *module, PyObject *args)
{
    Py_buffer rows_buf, table, steps_buf, pixels, action, reward, terminated, truncated, env_index, discount;
    long long row_slots, frame_slots, segment_bytes, bytes_written, base;
    int env_bytes, version_3, zero_padding, threads;
    EntryLayout layout;
    unsigned long seed_multiplier;
    Py_ssize_t stack_size;
    PyObject *views_arg;
    if (!PyArg_ParseTuple(args, "y*Lipy*L(nnnnnn)kLLOLy*npw*w*w*w*w*w*w*i:read_transitions", &rows_buf, &row_slots,
                          &env_bytes, &version_3, &table, &frame_slots, &layout.size, &layout.position,
                          &layout.length, &layout.checksum, &layout.link, &layout.length_bytes, &seed_multiplier,
                          &segment_bytes, &bytes_written, &views_arg, &base, &steps_buf, &stack_size, &zero_padding,
                          &pixels, &action, &reward, &terminated, &truncated, &env_index, &discount, &threads)) {
        return NULL;
    }
    PyObject *result = NULL, *views = NULL;
    char *scratch = NULL;
    Py_buffer *buffers = NULL;
    Py_ssize_t acquired = 0;
    Py_ssize_t n = steps_buf.len / 8, columns = stack_size + 1, m = n * columns;
    Py_ssize_t row_size = row_slots > 0 ? rows_buf.len / row_slots : 0;
    Py_ssize_t action_offset = 17 + env_bytes; /* checksum, next_delta, frame_lead, env, reward, flags */
    Py_ssize_t action_bytes = row_size - action_offset;
    Py_ssize_t frame_nbytes = m > 0 ? pixels.len / m : 0;
    if (row_slots <= 0 || (env_bytes != 1 && env_bytes != 2) || action_bytes < 0 || rows_buf.len != row_slots * row_size
        || row_size > 256 || action.len != n * action_bytes || stack_size < 1 || stack_size > 1024
        || frame_slots <= 0 || segment_bytes <= 0 || bytes_written < 0 || !layout_fits(&layout)
        || table.len != frame_slots * layout.size || (m > 0 && (frame_nbytes <= 0 || frame_nbytes > INT_MAX))
        || pixels.len != m * frame_nbytes || threads < 1 || threads > MAX_THREADS) {
        PyErr_SetString(PyExc_ValueError, "read_transitions: tables, layouts, pixels or action size out of range");
        goto done;
    }
    if (check_array(&steps_buf, "steps", n, 8) < 0 || check_array(&reward, "reward", n, 4) < 0
        || check_array(&terminated, "terminated", n, 1) < 0 || check_array(&truncated, "truncated", n, 1) < 0
        || check_array(&env_index, "env_index", n, 8) < 0 || check_array(&discount, "discount", n, 4) < 0) {
        goto done;
    }
    views = PySequence_Fast(views_arg, "views must be a sequence of buffers");
    if (views == NULL) {
        goto done;
    }
    if (n == 0) {
        result = Py_NewRef(Py_True);
        goto done;
    }
    /* frames, their table slots and lengths int64[m], sources[m], checksums and seeds uint32[m], row slots
     * int64[n] */
    size_t count = (size_t)m;
    scratch = PyMem_Malloc(count * (3 * sizeof(int64_t) + sizeof(const char *) + 2 * sizeof(uint32_t))
                           + (size_t)n * sizeof(int64_t));
    Py_ssize_t buffer_count = PySequence_Fast_GET_SIZE(views) < m ? PySequence_Fast_GET_SIZE(views) : m;
    buffers = PyMem_Malloc((size_t)(buffer_count > 0 ? buffer_count : 1) * sizeof(*buffers));
    if (scratch == NULL || buffers == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *frames = (int64_t *)scratch;
    int64_t *frame_slot = frames + count, *lengths = frame_slot + count, *row_slot = lengths + count;
    const char **sources = (const char **)(row_slot + n);
    uint32_t *checksums = (uint32_t *)(sources + count), *seeds = checksums + count;

    /* The rows: checked copies, unpacked into the batch's arrays (as gather_fields). */
    const unsigned char *rows = (const unsigned char *)rows_buf.buf;
    const unsigned char *entries = (const unsigned char *)table.buf;
    const int64_t *step = (const int64_t *)steps_buf.buf;
    int64_t row_anchor = step[0] - ring_slot(step[0], row_slots);
    for (Py_ssize_t i = 0; i < n; i++) { /* sampled rows lie far apart: overlap their cache misses */
        row_slot[i] = ring_slot_near(step[i], row_anchor, row_slots);
        __builtin_prefetch(rows + row_slot[i] * row_size, 0, 0);
    }
    unsigned char copy[256];
    int64_t frame_anchor = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        copy_row(copy, rows + row_slot[i] * row_size, row_size);
        unsigned char flags = copy[16 + env_bytes];
        if (row_checksum(copy, row_size, step[i], version_3) != (uint32_t)read_le(copy, 4) || (flags & 8) != 0) {
            result = Py_NewRef(Py_False);
            goto done;
        }
        int64_t next_frame = step[i] + (int64_t)read_le(copy + 8, 4);
        if (i == 0) {
            frame_anchor = next_frame - ring_slot(next_frame, frame_slots);
        }
        Py_ssize_t newest = i * columns + stack_size;
        frames[newest] = next_frame;
        frame_slot[newest] = ring_slot_near(next_frame, frame_anchor, frame_slots);
        __builtin_prefetch(entries + frame_slot[newest] * layout.size, 0, 0);
        uint32_t reward_bits = (uint32_t)read_le(copy + 12 + env_bytes, 4);
        ((int64_t *)env_index.buf)[i] = (int64_t)read_le(copy + 12, env_bytes);
        memcpy((char *)reward.buf + 4 * i, &reward_bits, 4);
        ((unsigned char *)terminated.buf)[i] = (flags & 1) != 0;
        ((unsigned char *)truncated.buf)[i] = (flags & 2) != 0;
        if (flags & 1) {
            ((float *)discount.buf)[i] = 0.0f;
        }
        memcpy((char *)action.buf + i * action_bytes, copy + action_offset, (size_t)action_bytes);
    }
    /* The stacks, back from each next_obs frame through the entries' links (as follow_links). */
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t *stack = frames + i * columns, *stack_slots = frame_slot + i * columns;
        int64_t frame = stack[stack_size];
        for (Py_ssize_t c = stack_size - 1; c >= 0; c--) {
            frame -= (int64_t)read_le(entries + stack_slots[c + 1] * layout.size + layout.link, 4);
            stack[c] = frame;
            stack_slots[c] = ring_slot_near(frame, frame_anchor, frame_slots);
        }
    }
    int located = locate_entries(views, base, &table, frame_slots, &layout, frames, frame_slot, m,
                                 (uint32_t)seed_multiplier, segment_bytes, bytes_written, sources, lengths, checksums,
                                 seeds, buffers, &acquired);
    if (located != 0) {
        result = located < 0 ? NULL : Py_NewRef(Py_False);
        goto done;
    }
    Batch batch = {sources, lengths, checksums, seeds, (char *)pixels.buf, (int)frame_nbytes, m};
    if (threads > (m + BLOCK_FRAMES - 1) / BLOCK_FRAMES) {
        threads = (int)((m + BLOCK_FRAMES - 1) / BLOCK_FRAMES);
    }
    Py_ssize_t bad;
    Py_BEGIN_ALLOW_THREADS
    bad = decode_all(&batch, threads);
    Py_END_ALLOW_THREADS
    if (bad == -2) {
        PyErr_NoMemory();
        goto done;
    }
    if (bad == -1 && zero_padding) {
        for (Py_ssize_t i = 0; i < n; i++) {
            const int64_t *stack = frames + i * columns;
            for (Py_ssize_t c = 0; c < stack_size; c++) {
                if (stack[c] == stack[c + 1]) {
                    memset((char *)pixels.buf + (size_t)(i * columns + c) * (size_t)frame_nbytes, 0, (size_t)frame_nbytes);
                }
            }
        }
    }
    result = Py_NewRef(bad == -1 ? Py_True : Py_False);
done:
    for (Py_ssize_t k = 0; k < acquired; k++) {
        PyBuffer_Release(&buffers[k]);
    }
    PyMem_Free(buffers);
    PyMem_Free(scratch);
    Py_XDECREF(views);
    PyBuffer_Release(&rows_buf);
    PyBuffer_Release(&table);
    PyBuffer_Release(&steps_buf);
    PyBuffer_Release(&pixels);
    PyBuffer_Release(&action);
    PyBuffer_Release(&reward);
    PyBuffer_Release(&terminated);
    PyBuffer_Release(&truncated);
    PyBuffer_Release(&env_index);
    PyBuffer_Release(&discount);
    return result;
}

/* prefetch_rows(table, row_slots, steps) -> None: starts fetching the rows of steps (int64) into the
 * CPU's caches and returns at once, so that their misses (a page walk and a memory read each, in a
 * table of millions of rows) overlap the caller's work before it reads them (read_transitions). A
 * hint: steps that are not a buffer of aligned int64 are ignored, and every address lies in the table. */
static PyObject *
lz4batch_prefetch_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "prefetch_rows(table, row_slots, steps) takes 3 arguments");
        return NULL;
    }
    long long row_slots = PyLong_AsLongLong(args[1]);
    if (row_slots == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer table, steps;
    if (PyObject_GetBuffer(args[0], &table, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &steps, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&table);
        return NULL;
    }
    Py_ssize_t n = steps.len / 8, row_size = row_slots > 0 ? table.len / row_slots : 0;
    PyObject *result = NULL;
    if (row_slots <= 0 || table.len != row_slots * row_size) {
        PyErr_SetString(PyExc_ValueError, "prefetch_rows: table size and row_slots do not agree");
        goto done;
    }
    if (steps.len != n * 8 || (uintptr_t)steps.buf % 8 != 0) {
        n = 0;
    }
    const unsigned char *rows = (const unsigned char *)table.buf;
    const int64_t *step = (const int64_t *)steps.buf;
    int64_t anchor = n > 0 ? step[0] - ring_slot(step[0], row_slots) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        __builtin_prefetch(rows + ring_slot_near(step[i], anchor, row_slots) * row_size, 0, 3);
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&steps);
    return result;
}

/* Writes all of data at offset of descriptor (pwrite may write less than asked); 0, or -1 with errno. */
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

/* append_frames(frames, prev_deltas, first_step, table, frame_slots, layout, seed_multiplier, descriptor,
 *               segment_start, offset, segment_bytes) -> int
 *   FrameRing.append of frames compressed alone, given uncompressed, in one call (add's fast path: a
 *   Python loop over the frames costs as much as compressing them). frames holds len(prev_deltas)
 *   contiguous frames; each is compressed with lz4 (the bytes of codec.compress, python-lz4's),
 *   and all are written back to back at offset of the segment file open as descriptor, whose first byte
 *   is ring position segment_start. Then entry (first_step + i) mod frame_slots gets the frame's ring
 *   position, length, checksum (CRC-32 seeded with step * seed_multiplier + prev delta)
 *   and prev_deltas[i]; layout as decode_entries takes it, link = prev_delta. The bytes go out before
 *   the entries that point at them. Returns the bytes written; -1 with nothing written when they would
 *   run past the segment's end (the caller's general path then starts the next segment). */
static PyObject *
lz4batch_append_frames(PyObject *module, PyObject *args)
{
    Py_buffer frames, table;
    PyObject *deltas_arg;
    long long first_step, frame_slots, offset, segment_bytes, segment_start;
    EntryLayout layout;
    unsigned long seed_multiplier;
    int descriptor;
    if (!PyArg_ParseTuple(args, "y*OLw*L(nnnnnn)kiLLL:append_frames", &frames, &deltas_arg, &first_step, &table,
                          &frame_slots, &layout.size, &layout.position, &layout.length, &layout.checksum,
                          &layout.link, &layout.length_bytes, &seed_multiplier, &descriptor, &segment_start,
                          &offset, &segment_bytes)) {
        return NULL;
    }
    PyObject *result = NULL, *deltas = NULL;
    char *scratch = NULL;
    int *lengths = NULL;
    uint32_t *prev = NULL;
    LZ4_stream_t *stream = NULL;
    deltas = PySequence_Fast(deltas_arg, "prev_deltas must be a sequence of ints");
    if (deltas == NULL) {
        goto done;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(deltas);
    Py_ssize_t frame_nbytes = n > 0 ? frames.len / n : 0;
    if (n <= 0 || frame_nbytes <= 0 || frame_nbytes > INT_MAX / 2 || frames.len != n * frame_nbytes
        || frame_slots <= 0 || first_step < 0 || segment_bytes <= 0 || offset < 0 || offset > segment_bytes
        || segment_start < 0 || !layout_fits(&layout) || table.len != frame_slots * layout.size) {
        PyErr_SetString(PyExc_ValueError, "append_frames: frames, sizes or entry layout out of range");
        goto done;
    }
    int bound = LZ4_compressBound((int)frame_nbytes);
    prev = PyMem_Malloc((size_t)n * sizeof(uint32_t));
    lengths = PyMem_Malloc((size_t)n * sizeof(int));
    scratch = PyMem_Malloc((size_t)n * (size_t)bound);
    stream = LZ4_createStream();
    if (prev == NULL || lengths == NULL || scratch == NULL || stream == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long delta = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(deltas, i));
        if (delta == (unsigned long)-1 && PyErr_Occurred()) {
            goto done;
        }
        prev[i] = (uint32_t)delta;
    }
    long long total = 0;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        /* A fresh stream per frame (LZ4_createStream made the first one), as python-lz4's
         * lz4.block.compress does (codec.compress): the same bytes as the general path.
         * LZ4_compress_default would pick a 16-bit table for inputs under 64 KiB and compress Atari
         * frames ~5% worse. */
        if (i > 0) {
            LZ4_resetStream(stream);
        }
        lengths[i] = LZ4_compress_fast_continue(stream, (const char *)frames.buf + i * frame_nbytes, scratch + total,
                                                (int)frame_nbytes, bound, 1);
        failed = lengths[i] <= 0 || (layout.length_bytes == 2 && lengths[i] > 0xFFFF);
        total += lengths[i];
    }
    if (!failed && offset + total <= segment_bytes) {
        failed = write_all(descriptor, scratch, (size_t)total, (off_t)offset) < 0 ? 2 : 0;
    }
    Py_END_ALLOW_THREADS
    if (failed == 2) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    if (failed || offset + total > segment_bytes) {
        result = PyLong_FromLong(-1);
        goto done;
    }
    unsigned char *entries = (unsigned char *)table.buf;
    long long position = segment_start + offset;
    const char *payload = scratch;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t step = first_step + i;
        unsigned char *entry = entries + ring_slot(step, frame_slots) * layout.size;
        uint32_t seed = (uint32_t)((uint64_t)step * seed_multiplier + prev[i]);
        write_le(entry + layout.position, (uint64_t)position, 8);
        write_le(entry + layout.length, (uint64_t)lengths[i], (int)layout.length_bytes);
        write_le(entry + layout.checksum, frame_crc32(seed, (const unsigned char *)payload, (size_t)lengths[i]), 4);
        write_le(entry + layout.link, prev[i], 4);
        position += lengths[i];
        payload += lengths[i];
    }
    result = PyLong_FromLongLong(total);
done:
    if (stream != NULL) {
        LZ4_freeStream(stream);
    }
    PyMem_Free(scratch);
    PyMem_Free(lengths);
    PyMem_Free(prev);
    Py_XDECREF(deltas);
    PyBuffer_Release(&frames);
    PyBuffer_Release(&table);
    return result;
}

/* write_rows(table, row_slots, first_step, frame_lead, env_bytes, rewards, flags, actions, previous_steps)
 *   TransitionTable.write of the rows of envs 0, 1, ... at steps first_step + env, in one call (add's
 *   fast path): each row gets next_delta 0, frame_lead, its env (env_bytes wide), rewards[env] (a float,
 *   stored as float32), flags[env] (a byte) and its equal part of actions (bytes), then the checksum that
 *   gather_rows checks. Then the row of previous_steps[env], the env's transition before, gets its
 *   next_delta link to the new row. Table slots are steps mod row_slots; all fields little-endian. */
static PyObject *
lz4batch_write_rows(PyObject *module, PyObject *args)
{
    Py_buffer table, actions;
    long long row_slots, first_step;
    unsigned long frame_lead;
    int env_bytes;
    PyObject *rewards_arg, *flags_arg, *previous_arg;
    if (!PyArg_ParseTuple(args, "w*LLkiOOy*O:write_rows", &table, &row_slots, &first_step, &frame_lead, &env_bytes,
                          &rewards_arg, &flags_arg, &actions, &previous_arg)) {
        return NULL;
    }
    PyObject *result = NULL, *rewards = NULL, *flags = NULL, *previous = NULL;
    rewards = PySequence_Fast(rewards_arg, "rewards must be a sequence of floats");
    flags = rewards == NULL ? NULL : PySequence_Fast(flags_arg, "flags must be a sequence of ints");
    previous = flags == NULL ? NULL : PySequence_Fast(previous_arg, "previous_steps must be a sequence of ints");
    if (previous == NULL) {
        goto done;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rewards);
    Py_ssize_t row_size = row_slots > 0 ? table.len / row_slots : 0;
    Py_ssize_t action_bytes = n > 0 ? actions.len / n : 0;
    Py_ssize_t action_offset = 17 + env_bytes; /* checksum, next_delta, frame_lead, env, reward, flags */
    if (n <= 0 || row_slots <= 0 || first_step < 0 || (env_bytes != 1 && env_bytes != 2)
        || table.len != row_slots * row_size || actions.len != n * action_bytes
        || row_size != action_offset + action_bytes || PySequence_Fast_GET_SIZE(flags) != n
        || PySequence_Fast_GET_SIZE(previous) != n || (env_bytes == 1 && n > 256)) {
        PyErr_SetString(PyExc_ValueError, "write_rows: table, row layout or argument lengths out of range");
        goto done;
    }
    unsigned char *rows = (unsigned char *)table.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        double reward = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(rewards, i));
        long flag = PyLong_AsLong(PySequence_Fast_GET_ITEM(flags, i));
        long long before = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(previous, i));
        if (PyErr_Occurred()) {
            goto done;
        }
        int64_t step = first_step + i;
        unsigned char *row = rows + ring_slot(step, row_slots) * row_size;
        float single = (float)reward;
        uint32_t bits;
        memcpy(&bits, &single, 4);
        write_le(row + 4, 0, 4);
        write_le(row + 8, frame_lead, 4);
        write_le(row + 12, (uint64_t)i, env_bytes);
        write_le(row + 12 + env_bytes, bits, 4);
        row[16 + env_bytes] = (unsigned char)flag;
        memcpy(row + action_offset, (const char *)actions.buf + i * action_bytes, (size_t)action_bytes);
        write_le(row, row_crc(row, row_size, step), 4);
        write_le(rows + ring_slot(before, row_slots) * row_size + 4, (uint64_t)(step - before), 4);
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(rewards);
    Py_XDECREF(flags);
    Py_XDECREF(previous);
    PyBuffer_Release(&table);
    PyBuffer_Release(&actions);
    return result;
}

static PyMethodDef lz4batch_methods[] = {
    {"decode", lz4batch_decode, METH_VARARGS,
     "decode(views, segments, offsets, lengths, checksums, seeds, out, frame_nbytes, threads) -> int\n\n"
     "Decode n lz4 blocks into out with the GIL released; -1 when all are good, else the first bad index."},
    {"crc32", lz4batch_crc32, METH_VARARGS,
     "crc32(data, seed) -> int\n\nzlib.crc32(data, seed & 0xFFFFFFFF), folded 16 bytes at a time where the CPU can."},
    {"decode_entries", lz4batch_decode_entries, METH_VARARGS,
     "decode_entries(views, base, table, frame_slots, layout, steps, seed_multiplier, segment_bytes,\n"
     "               bytes_written, out, frame_nbytes, threads) -> bool\n\n"
     "Locate frames through a frame table and decode them into out with the GIL released; True when every\n"
     "frame lies in the bytes written and in a view and is good, else False (out is then unspecified)."},
    {"gather_entries", lz4batch_gather_entries, METH_VARARGS,
     "gather_entries(views, base, table, frame_slots, layout, steps, seed_multiplier, segment_bytes,\n"
     "               bytes_written, lengths, checksums, seeds, verify) -> bytes | int | None\n\n"
     "The stored blocks of frames back to back, their lengths, checksums and seeds into the arrays given;\n"
     "with verify, the first block that fails its checksum (an int); None when a frame lies outside."},
    {"row_checksums", lz4batch_row_checksums, METH_VARARGS,
     "row_checksums(rows, row_size, steps, out) -> None\n\n"
     "The row checksum (mmreplay.row_checksum) of each packed row at its step, into out (uint32)."},
    {"gather_rows", lz4batch_gather_rows, METH_VARARGS,
     "gather_rows(table, row_slots, steps, out, version_3=False) -> int\n\n"
     "Copy the rows of these steps into out and check the copies: -1, or the first index that fails."},
    {"gather_fields", lz4batch_gather_fields, METH_VARARGS,
     "gather_fields(table, row_slots, steps, env_bytes, next_frames, action, reward, terminated, truncated,\n"
     "              env_index, detached, version_3=False) -> int\n\n"
     "Unpack the rows of these steps into a batch's arrays and check them: -1, or the first index that fails."},
    {"follow_links", lz4batch_follow_links, METH_VARARGS,
     "follow_links(table, frame_slots, entry_size, link_offset, next_frames, out) -> None\n\n"
     "Frame stacks: each row of out (int64, n x columns) ends with next_frames[i] and steps back by links."},
    {"prefetch_rows", (PyCFunction)(void (*)(void))lz4batch_prefetch_rows, METH_FASTCALL,
     "prefetch_rows(table, row_slots, steps) -> None\n\nStart fetching the rows of these steps into the CPU's caches."},
    {"read_transitions", lz4batch_read_transitions, METH_VARARGS,
     "read_transitions(rows, row_slots, env_bytes, version_3, table, frame_slots, layout, seed_multiplier,\n"
     "                 segment_bytes, bytes_written, views, base, steps, stack_size, zero_padding, pixels,\n"
     "                 action, reward, terminated, truncated, env_index, discount, threads) -> bool\n\n"
     "A batch of transitions in one call: rows checked and unpacked, stacks followed, frames decoded; False\n"
     "(the arrays unspecified) when a row or frame fails or a row is DETACHED."},
    {"append_frames", lz4batch_append_frames, METH_VARARGS,
     "append_frames(frames, prev_deltas, first_step, table, frame_slots, layout, seed_multiplier, descriptor,\n"
     "              segment_start, offset, segment_bytes) -> int\n\n"
     "Compress frames, write them at offset of a segment file and fill their frame-table entries: the bytes\n"
     "written, or -1 (nothing written) when they would run past the segment's end."},
    {"write_rows", lz4batch_write_rows, METH_VARARGS,
     "write_rows(table, row_slots, first_step, frame_lead, env_bytes, rewards, flags, actions, previous_steps)\n\n"
     "Write the transition rows of envs 0, 1, ... with their checksums, and link each env's previous row."},
    {NULL, NULL, 0, NULL},
};

/* The interface of this module's functions, as mmreplay/extensions.py's INTERFACES expects it: bump
 * both when a function is added or its arguments change, so that a build from older sources is
 * refused (and its pure-Python fallback used) rather than failing mid-call. */
#define INTERFACE 3

static struct PyModuleDef lz4batch_module = {
    PyModuleDef_HEAD_INIT, "mmreplay._lz4batch",
    "Batch lz4 decoding for mmreplay.codec, the index work of reading a sampled batch, and add's fast path.", -1, lz4batch_methods,
};

PyMODINIT_FUNC
PyInit__lz4batch(void)
{
#ifdef MMREPLAY_HAVE_FOLD
    __builtin_cpu_init();
    use_fold = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
#ifdef MMREPLAY_HAVE_SLICE8
    crc_tables_init();
#endif
    PyObject *module = PyModule_Create(&lz4batch_module);
    if (module != NULL && (PyModule_AddIntConstant(module, "LZ4_VERSION", LZ4_versionNumber()) < 0
                           || PyModule_AddIntConstant(module, "INTERFACE", INTERFACE) < 0)) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
