/* A batch of a reference store's frames decoded: see reference_reads.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdatomic.h>
#include <string.h>

#include "argument_arrays.h"
#include "codec/crc32.h"
#include "codec/frame_blocks.h"
#include "pool/work_pool.h"
#include "ring/reference_reads.h"

#define NO_KEY INT64_MIN

/* Tasks a call's rows are split into for each thread, taken in turn as threads come free: a helper that
 * wakes late, or loses its core, leaves the others less to finish. Measured on the 2-core development VM
 * (uniform sample(256) of Pong, Breakout, MsPacman and Seaquest, windows alternating in one process):
 * 8 a thread sampled 1.04x-1.08x (median) of 2 a thread; sample(32) alike (0.98x-1.02x). */
#define TASKS_PER_THREAD 8

/* The frames a task has rebuilt (key -> its row), open addressing over a power of two of slots. */
typedef struct {
    int64_t *keys;
    char **rows;
    size_t mask;
} RowMap;

static inline size_t
row_map_slot(const RowMap *map, int64_t key)
{
    return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15u) >> 20) & map->mask;
}

static char *
row_map_get(const RowMap *map, int64_t key)
{
    for (size_t s = row_map_slot(map, key);; s = (s + 1) & map->mask) {
        if (map->keys[s] == key) {
            return map->rows[s];
        }
        if (map->keys[s] == NO_KEY) {
            return NULL;
        }
    }
}

static void
row_map_put(RowMap *map, int64_t key, char *row)
{
    size_t s = row_map_slot(map, key);
    while (map->keys[s] != NO_KEY && map->keys[s] != key) {
        s = (s + 1) & map->mask;
    }
    map->keys[s] = key, map->rows[s] = row;
}

/* The blocks a task has located and checked (key -> its block), so that a chain two rows share is read
 * from the table and checked against its CRC once; open addressing, and full once `left` reaches 0
 * (blocks are then located again). */
typedef struct {
    int64_t *keys;
    ReferenceBlock *blocks;
    size_t mask, left;
} BlockMap;

/* The block of key: from the map, else located (and kept while there is room); 0, or nonzero when it
 * is not good. */
static int
located_block(const ReferenceRead *read, BlockMap *map, int64_t key, ReferenceBlock *block)
{
    size_t s = (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15u) >> 20) & map->mask;
    for (; map->keys[s] != NO_KEY; s = (s + 1) & map->mask) {
        if (map->keys[s] == key) {
            *block = map->blocks[s];
            return 0;
        }
    }
    if (read->locate(read->frames, key, block) != 0) {
        return 1;
    }
    if (map->left > 0) {
        map->keys[s] = key, map->blocks[s] = *block, map->left--;
    }
    return 0;
}

typedef struct {
    const ReferenceRead *read;
    Py_ssize_t rows_per_task;
    _Atomic Py_ssize_t first_bad; /* n while none is known; -2 when memory ran out */
} ReadJob;

static void
mark_bad(ReadJob *job, Py_ssize_t row)
{
    Py_ssize_t known = atomic_load(&job->first_bad);
    while ((known == -2 ? 0 : row < known) && !atomic_compare_exchange_weak(&job->first_bad, &known, row)) {
    }
}

/* Rebuilds row i's frame (see the header): 1, or 0 when a frame it needs is not good. */
static int
rebuild(const ReferenceRead *read, RowMap *map, BlockMap *located, char *key_frame, int64_t *key_frame_step,
        char *work, Py_ssize_t i)
{
    const ReferenceShape *shape = read->shape;
    size_t n = (size_t)shape->frame_nbytes;
    int64_t key = read->keys[i];
    char *row = read->out + (size_t)i * n;
    const char *done = row_map_get(map, key);
    if (done != NULL) { /* requested before: a repeat */
        memcpy(row, done, n);
        return 1;
    }
    ReferenceBlock chain[REFERENCE_MAX_DEPTH];
    int length = 0;
    const char *base = NULL;
    for (int64_t k = key;;) {
        if (k == *key_frame_step || (k != key && (base = row_map_get(map, k)) != NULL)) {
            base = base != NULL ? base : key_frame;
            break;
        }
        ReferenceBlock block;
        if (located_block(read, located, k, &block) != 0) {
            return 0;
        }
        if (block.reference < 0) { /* the group's key frame: into the row itself when it is the one asked for */
            char *into = k == key ? row : key_frame;
            if (!frame_block_decode(block.source, block.length, into, (int)n)) {
                return 0;
            }
            if (into == key_frame) {
                *key_frame_step = k;
            }
            base = into;
            break;
        }
        if (length >= read->depth) {
            return 0; /* a chain longer than the scheme's: a damaged link */
        }
        chain[length++] = block;
        k = block.reference;
    }
    for (int j = length - 1; j >= 0; j--) { /* oldest first; the first copies its reference into the row */
        if (!reference_frame_apply(shape, chain[j].source, chain[j].length, row, j == length - 1 ? base : row, work)) {
            return 0;
        }
    }
    if (length == 0 && base != row) {
        memcpy(row, base, n); /* a key frame another row decoded */
    }
    row_map_put(map, key, row);
    return 1;
}

static void
read_task(void *context, Py_ssize_t number)
{
    ReadJob *job = context;
    const ReferenceRead *read = job->read;
    Py_ssize_t start = number * job->rows_per_task, stop = start + job->rows_per_task;
    stop = stop < read->n ? stop : read->n;
    if (start >= stop || start >= atomic_load(&job->first_bad)) {
        return;
    }
    size_t slots = 16;
    while (slots < 2 * (size_t)(stop - start)) {
        slots *= 2;
    }
    RowMap map = {PyMem_RawMalloc(slots * sizeof(int64_t)), PyMem_RawMalloc(slots * sizeof(char *)), slots - 1};
    BlockMap located = {PyMem_RawMalloc(4 * slots * sizeof(int64_t)), PyMem_RawMalloc(4 * slots * sizeof(ReferenceBlock)),
                        4 * slots - 1, 2 * slots};
    char *key_frame = PyMem_RawMalloc((size_t)read->shape->frame_nbytes);
    char *work = PyMem_RawMalloc((size_t)read->shape->work_bytes);
    if (map.keys == NULL || map.rows == NULL || located.keys == NULL || located.blocks == NULL || key_frame == NULL
        || work == NULL) {
        atomic_store(&job->first_bad, -2);
    }
    else {
        for (size_t s = 0; s < slots; s++) {
            map.keys[s] = NO_KEY;
        }
        for (size_t s = 0; s < 4 * slots; s++) {
            located.keys[s] = NO_KEY;
        }
        int64_t key_frame_step = NO_KEY;
        for (Py_ssize_t i = start; i < stop; i++) {
            if (!rebuild(read, &map, &located, key_frame, &key_frame_step, work, i)) {
                mark_bad(job, i);
                break;
            }
        }
    }
    PyMem_RawFree(map.keys);
    PyMem_RawFree(map.rows);
    PyMem_RawFree(located.keys);
    PyMem_RawFree(located.blocks);
    PyMem_RawFree(key_frame);
    PyMem_RawFree(work);
}

Py_ssize_t
reference_read(const ReferenceRead *read, int threads)
{
    if (read->n == 0) {
        return -1;
    }
    Py_ssize_t columns = read->columns > 0 ? read->columns : 1, stacks = (read->n + columns - 1) / columns;
    Py_ssize_t tasks = threads > 1 ? TASKS_PER_THREAD * (Py_ssize_t)threads : 1;
    tasks = tasks < stacks ? tasks : stacks;
    ReadJob job = {read, (stacks + tasks - 1) / tasks * columns};
    atomic_init(&job.first_bad, read->n);
    pool_run((read->n + job.rows_per_task - 1) / job.rows_per_task, threads, read_task, &job);
    Py_ssize_t bad = atomic_load(&job.first_bad);
    return bad == read->n ? -1 : bad;
}

/* -- frames through a table ------------------------------------------------------------------------ */

typedef struct {
    const FrameTable *frames;
    BatchViews *views;
} TableFrames;

static int
table_locate(const void *context, int64_t step, ReferenceBlock *block)
{
    const TableFrames *t = context;
    LocatedFrame frame;
    if (locate_frame(t->frames, t->views, 0, step, &frame) != 0 || frame.length > INT_MAX
        || frame_crc32(frame.seed, (const unsigned char *)frame.source, (size_t)frame.length) != frame.checksum) {
        return 1;
    }
    *block = (ReferenceBlock){frame.source, (int)frame.length, frame.ref_delta == 0 ? -1 : step - frame.ref_delta};
    return 0;
}

int
reference_read_table(RingArgument *ring, const int64_t *steps, Py_ssize_t n, Py_ssize_t columns, char *out,
                     int threads)
{
    const RingGeometry *g = ring->frames.geometry;
    BatchViews *views = &ring->batch;
    if (views_acquire_near(&ring->frames, views, steps, n) < 0) {
        return -1;
    }
    TableFrames frames = {&ring->frames, views};
    ReferenceRead read = {table_locate, &frames, steps, n, columns, out, &g->shape, g->depth};
    Py_ssize_t bad;
    Py_BEGIN_ALLOW_THREADS
    bad = reference_read(&read, threads);
    Py_END_ALLOW_THREADS
    if (bad == -2) {
        PyErr_NoMemory();
        return -1;
    }
    return bad == -1 ? 0 : 1;
}

/* -- frames as an encoded batch's blocks ------------------------------------------------------------- */

typedef struct {
    const char *const *sources;
    const int64_t *lengths, *references;
    const uint32_t *checksums, *seeds;
    Py_ssize_t m;
} BlockFrames;

static int
block_locate(const void *context, int64_t index, ReferenceBlock *block)
{
    const BlockFrames *b = context;
    if (index < 0 || index >= b->m || b->sources[index] == NULL || b->lengths[index] > INT_MAX
        || b->references[index] >= index
        || frame_crc32(b->seeds[index], (const unsigned char *)b->sources[index], (size_t)b->lengths[index])
               != b->checksums[index]) {
        return 1;
    }
    *block = (ReferenceBlock){b->sources[index], (int)b->lengths[index], b->references[index] < 0 ? -1
                                                                                               : b->references[index]};
    return 0;
}

PyObject *
py_decode_referenced(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *views_arg, *blocks;
    Py_buffer references, wanted, out;
    long long frame_nbytes, row_nbytes, unit;
    int depth, threads;
    FrameSources frames;
    if (!PyArg_ParseTuple(args, "OOy*y*w*(LLLi)i:decode_referenced", &views_arg, &blocks, &references, &wanted, &out,
                          &frame_nbytes, &row_nbytes, &unit, &depth, &threads)) {
        return NULL;
    }
    PyObject *result = NULL;
    int parsed = frame_sources_parse(blocks, &frames) == 0;
    ReferenceShape shape;
    Py_ssize_t n = wanted.len / 8;
    if (!parsed) {
        goto done;
    }
    if (reference_shape_init(&shape, frame_nbytes, row_nbytes, unit) < 0 || depth < 0 || depth > REFERENCE_MAX_DEPTH
        || threads < 1
        || threads > POOL_MAX_THREADS || check_array(&references, "references", frames.n, 8) < 0
        || check_array(&wanted, "wanted", n, 8) < 0 || out.len != n * frame_nbytes) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "decode_referenced: shape, threads or out out of range");
        }
        goto done;
    }
    if (frame_sources_locate(&frames, views_arg) < 0) {
        goto done;
    }
    BlockFrames source = {frames.sources, frames.lengths.buf, references.buf, frames.checksums.buf, frames.seeds.buf,
                          frames.n};
    ReferenceRead read = {block_locate, &source, wanted.buf, n, 1, out.buf, &shape, depth};
    Py_ssize_t bad;
    Py_BEGIN_ALLOW_THREADS
    bad = reference_read(&read, threads);
    Py_END_ALLOW_THREADS
    result = bad == -2 ? PyErr_NoMemory() : PyLong_FromSsize_t(bad);
done:
    if (parsed) {
        frame_sources_release(&frames);
    }
    PyBuffer_Release(&references);
    PyBuffer_Release(&wanted);
    PyBuffer_Release(&out);
    return result;
}
