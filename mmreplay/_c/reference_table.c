/* A reference ring's frames located through its frame table and decoded in one call: see
 * reference_table.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>

#include "argument_arrays.h"
#include "frame_entries.h"
#include "frame_sources.h"
#include "reference_decode.h"
#include "reference_plan.h"
#include "reference_table.h"
#include "reference_threads.h"
#include "work_pool.h"

/* Each thread's room for the references a batch adds (scratch frames), grown as needed and kept: a
 * Pong batch of 32 adds ~90 frames (~600 KB), which malloc would map afresh for every batch, and the
 * kernel's zeroing of those pages cost a tenth of the batch. Rooms above SCRATCH_KEPT_BYTES (batches of
 * thousands) are allocated and freed with their batch instead. */
#define SCRATCH_KEPT_BYTES ((size_t)16 << 20)
static _Thread_local char *scratch_area = NULL;
static _Thread_local size_t scratch_area_bytes = 0;

/* Room for `bytes` of scratch frames: the thread's kept room, or (*owned set) a new allocation the
 * caller frees; NULL when out of memory. */
static char *
scratch_room(size_t bytes, char **owned)
{
    *owned = NULL;
    if (bytes > SCRATCH_KEPT_BYTES) {
        *owned = PyMem_Malloc(bytes);
        return *owned;
    }
    if (bytes > scratch_area_bytes) {
        char *grown = PyMem_RawRealloc(scratch_area, bytes);
        if (grown == NULL) {
            return NULL;
        }
        scratch_area = grown, scratch_area_bytes = bytes;
    }
    return scratch_area;
}

Py_ssize_t
reference_plan_decode(ReferencePlan *plan, int threads)
{
    Py_ssize_t bad = -2;
    if (plan->changed_rows) { /* the references in rows of out (reference_threads.h): no scratch */
        Py_BEGIN_ALLOW_THREADS
        bad = reference_decode_inherited(plan, threads);
        Py_END_ALLOW_THREADS
    }
    if (bad != -2) {
        return bad;
    }
    /* the plan's rows: 0 .. n_out - 1 for the requested frames, n_out .. m - 1 for references */
    char *scratch = NULL, *owned = NULL;
    if (plan->m > plan->n_out) {
        scratch = scratch_room((size_t)(plan->m - plan->n_out) * (size_t)plan->frame_nbytes, &owned);
        if (scratch == NULL) {
            PyErr_NoMemory();
            return -3;
        }
    }
    plan->scratch = scratch;
    Py_BEGIN_ALLOW_THREADS
    bad = reference_decode_on_threads(plan, threads);
    Py_END_ALLOW_THREADS
    plan->scratch = NULL;
    PyMem_Free(owned);
    return bad;
}

int
reference_arguments_check(Py_ssize_t depth, Py_ssize_t row_nbytes, Py_ssize_t frame_nbytes, const char *function)
{
    if (depth < 0 || depth > REFERENCE_MAX_DEPTH) {
        PyErr_Format(PyExc_ValueError, "%s: depth is %zd; expected 0 to %d", function, depth, REFERENCE_MAX_DEPTH);
        return -1;
    }
    if (row_nbytes < 0 || (row_nbytes > 0 && frame_nbytes % row_nbytes != 0)) {
        PyErr_Format(PyExc_ValueError, "%s: row_nbytes is %zd; expected 0 (whole frames) or a divisor of %zd",
                     function, row_nbytes, frame_nbytes);
        return -1;
    }
    return 0;
}

/* The frame table as reference_plan_follow reads it, with the reader's kept frames (or NULL). */
typedef struct {
    const FrameTable *frames;
    KeyFrames *keys;
} TableLookup;

/* A frame's ref_delta; 0 for a dependent frame whose block a slot holds decoded (key_frames.h): its chain
 * stops there, the frame taken from the slot as a key frame is. */
static int64_t
table_reference(const void *source, int64_t step)
{
    const TableLookup *t = source;
    const FrameTable *frames = t->frames;
    const unsigned char *entry = table_entry(frames, step);
    int64_t delta = entry_ref(&frames->layout, entry);
    if (delta > 0 && t->keys != NULL
        && key_frames_holds(t->keys, step, (uint32_t)read_le(entry + frames->layout.checksum, 4),
                            entry_seed(&frames->layout, entry, step, frames->seed_multiplier))) {
        return 0;
    }
    return delta;
}

static void
table_prefetch(const void *source, int64_t step)
{
    __builtin_prefetch(table_entry(((const TableLookup *)source)->frames, step), 0, 0);
}

/* How a batch's frames are read: its table, views and kept frames, and the scheme's sizes. */
typedef struct {
    const FrameTable *frames;
    BatchViews *batch;
    KeyFrames *keys;
    Py_ssize_t depth, row_nbytes, frame_nbytes;
} TableRead;

/* Status of table_decode and of each part of a split batch, the worse the larger (split_decode keeps a
 * batch's worst part's): */
#define READ_DONE 0
#define READ_GENERAL 1 /* a frame or chain fails: the caller's general path names it */
#define READ_UNSPLIT 2 /* a part cannot go on without the GIL: the batch is decoded unsplit */
#define READ_NO_MEMORY 3
#define READ_ERROR 4   /* a Python error is set (with the GIL only) */

/* The n frames at steps planned (reference_plan_follow), located and decoded into out, the plan in memory
 * of the calling thread's. With the GIL (with_gil), views are acquired as needed and the decode runs on up
 * to `threads` threads; without it (a part of a split batch, threads 1), only views already acquired are
 * read, and only a changed-rows plan decodes (others need scratch rows). */
static int
table_decode(const TableRead *t, const int64_t *steps, Py_ssize_t n, char *out, int threads, int with_gil)
{
    const FrameTable *frames = t->frames;
    size_t capacity = (size_t)n * (size_t)(t->depth + 1);
    /* the plan's steps, refs and rows int64[capacity] each; each entry's lengths int64, sources,
     * checksums and seeds uint32, and whether it is a dependent frame taken from the slots */
    char *room = PyMem_RawMalloc(capacity * (4 * sizeof(int64_t) + sizeof(const char *) + 2 * sizeof(uint32_t) + 1));
    if (room == NULL) {
        return READ_NO_MEMORY;
    }
    int64_t *plan_steps = (int64_t *)room, *refs = plan_steps + capacity, *rows = refs + capacity;
    int64_t *lengths = rows + capacity;
    const char **sources = (const char **)(lengths + capacity);
    uint32_t *checksums = (uint32_t *)(sources + capacity), *seeds = checksums + capacity;
    unsigned char *cached = (unsigned char *)(seeds + capacity);
    TableLookup source = {frames, t->keys};
    ReferenceLookup lookup = {table_reference, table_prefetch, &source};
    int status;
    Py_ssize_t m = reference_plan_follow(&lookup, steps, n, t->depth, (Py_ssize_t)capacity, plan_steps, refs, rows);
    if (m < 0) {
        status = m == -3 ? READ_GENERAL : READ_NO_MEMORY; /* -3: a chain the table cannot give */
        goto done;
    }
    status = locate_in_views(frames, t->batch, with_gil, plan_steps, NULL, m, sources, lengths, checksums, seeds);
    if (status != 0) {
        status = status < 0 ? READ_ERROR : status == 2 ? READ_UNSPLIT : READ_GENERAL;
        goto done;
    }
    for (Py_ssize_t e = 0; e < m; e++) { /* a chain that stopped at a frame a slot holds */
        cached[e] = t->keys != NULL && refs[e] < 0
                    && entry_ref(&frames->layout, table_entry(frames, plan_steps[e])) != 0;
    }
    ReferencePlan plan = {sources, lengths, refs, rows, checksums, seeds, out, NULL, n, (int)t->frame_nbytes,
                          (int)t->row_nbytes, t->row_nbytes > 0, m, t->keys, plan_steps,
                          t->keys != NULL ? cached : NULL};
    Py_ssize_t bad = with_gil ? reference_plan_decode(&plan, threads) : reference_decode_inherited(&plan, 1);
    status = bad == -1 ? READ_DONE : bad == -3 ? READ_ERROR : bad == -2 ? READ_UNSPLIT : READ_GENERAL;
done:
    PyMem_RawFree(room);
    return status;
}

/* Below this many frames a batch is decoded unsplit. */
#define SPLIT_MIN_FRAMES 64

/* A batch split into parts, each planned, located and decoded by one thread in its own memory. A plan
 * written by the caller and read by a helper crossed cores line by line (~250 ns each on the 2-core
 * development VM when its two vCPUs do not share a cache), and with it the batch's frames: decoded
 * apart, the threads share only the table, the kept frames and the views they read. Frames that two
 * parts' chains both reach are decoded by each (a few in a batch). */
static long long split_batches, unsplit_batches; /* relaxed counters (reference_split_counts) */

typedef struct {
    const TableRead *read;
    const int64_t *steps;
    Py_ssize_t n, parts;
    char *out;
    int status[POOL_MAX_THREADS * 2];
} SplitJob;

static void
split_task(void *context, Py_ssize_t part)
{
    SplitJob *job = context;
    Py_ssize_t start = part * job->n / job->parts, stop = (part + 1) * job->n / job->parts;
    job->status[part] = table_decode(job->read, job->steps + start, stop - start,
                                     job->out + (size_t)start * (size_t)job->read->frame_nbytes, 1, 0);
}

/* The batch decoded in parts on up to `threads` threads, the views its frames lie in (and the ones before)
 * acquired first: READ_DONE, READ_GENERAL, READ_UNSPLIT, READ_NO_MEMORY or READ_ERROR (with a Python
 * error). With the GIL held; released while the parts decode. */
static int
split_decode(const TableRead *t, const int64_t *steps, Py_ssize_t n, char *out, int threads)
{
    if (views_acquire_near(t->frames, t->batch, steps, n) < 0) {
        return READ_ERROR;
    }
    __atomic_fetch_add(&split_batches, 1, __ATOMIC_RELAXED);
    SplitJob job = {t, steps, n, 2 * (Py_ssize_t)threads, out, {0}};
    if (job.parts > 2 * POOL_MAX_THREADS) {
        job.parts = 2 * POOL_MAX_THREADS;
    }
    Py_BEGIN_ALLOW_THREADS
    pool_run(job.parts, threads, split_task, &job);
    Py_END_ALLOW_THREADS
    /* the worst part's: no memory, over decoding again unsplit, over a frame that fails (which the caller's
     * general path names), over done (a part without the GIL sets no Python error) */
    int status = READ_DONE;
    for (Py_ssize_t part = 0; part < job.parts; part++) {
        status = job.status[part] > status ? job.status[part] : status;
    }
    if (status == READ_UNSPLIT) {
        __atomic_fetch_add(&unsplit_batches, 1, __ATOMIC_RELAXED);
    }
    return status;
}

int
reference_decode_table(const FrameTable *frames, PyObject *views, const int64_t *steps, Py_ssize_t n,
                       Py_ssize_t depth, Py_ssize_t row_nbytes, KeyFrames *keys, char *out, Py_ssize_t frame_nbytes,
                       int threads, Py_buffer *buffers, Py_ssize_t *acquired)
{
    if (n == 0) {
        return 0;
    }
    int status = READ_UNSPLIT;
    BatchViews batch;
    TableRead read = {frames, &batch, keys, depth, row_nbytes, frame_nbytes};
    /* Split: the parts' own views, acquired up front (every view, at most, whatever n is). */
    if (threads > 1 && row_nbytes > 0 && n >= SPLIT_MIN_FRAMES) {
        Py_ssize_t own_acquired = 0, count = PySequence_Fast_GET_SIZE(views);
        Py_buffer *own = PyMem_Malloc((size_t)(count > 0 ? count : 1) * sizeof(Py_buffer));
        if (own == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (batch_views_open(&batch, views, own, &own_acquired) < 0) {
            PyMem_Free(own);
            return -1;
        }
        status = split_decode(&read, steps, n, out, threads);
        batch_views_close(&batch);
        views_release(NULL, own, own_acquired);
    }
    if (status == READ_UNSPLIT) {
        if (batch_views_open(&batch, views, buffers, acquired) < 0) {
            return -1;
        }
        status = table_decode(&read, steps, n, out, threads, 1);
        batch_views_close(&batch);
    }
    if (status == READ_NO_MEMORY) {
        PyErr_NoMemory();
    }
    return status == READ_DONE ? 0 : status == READ_GENERAL ? 1 : -1;
}

PyObject *
py_reference_split_counts(PyObject *module, PyObject *unused)
{
    (void)module, (void)unused;
    return Py_BuildValue("(LL)", __atomic_load_n(&split_batches, __ATOMIC_RELAXED),
                         __atomic_load_n(&unsplit_batches, __ATOMIC_RELAXED));
}

PyObject *
py_reference_decode_entries(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *views_arg, *keys_arg = Py_None;
    Py_buffer table, steps, out;
    FrameTable frames = {.table = &table};
    unsigned long seed_multiplier;
    Py_ssize_t depth, row_nbytes, frame_nbytes;
    int threads;
    if (!PyArg_ParseTuple(args, "OLy*L" ENTRY_LAYOUT_FORMAT "y*kLLnnw*ni|O:reference_decode_entries", &views_arg,
                          &frames.base, &table, &frames.frame_slots, ENTRY_LAYOUT_FIELDS(frames.layout), &steps,
                          &seed_multiplier, &frames.segment_bytes, &frames.bytes_written, &depth, &row_nbytes, &out,
                          &frame_nbytes, &threads, &keys_arg)) {
        return NULL;
    }
    frames.seed_multiplier = (uint32_t)seed_multiplier;
    PyObject *result = NULL, *views = NULL;
    Py_buffer *buffers = NULL;
    Py_ssize_t acquired = 0;
    Py_ssize_t n = steps.len / 8;
    if (frame_nbytes <= 0 || frame_nbytes > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "frame_nbytes is %zd; expected 1 to %d", frame_nbytes, INT_MAX);
        goto done;
    }
    if (threads < 1 || threads > POOL_MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "threads is %d; expected 1 to %d", threads, POOL_MAX_THREADS);
        goto done;
    }
    if (frame_table_check(&frames, "reference_decode_entries") < 0 || check_array(&steps, "steps", n, 8) < 0
        || reference_arguments_check(depth, row_nbytes, frame_nbytes, "reference_decode_entries") < 0) {
        goto done;
    }
    if (out.len != n * frame_nbytes) {
        PyErr_Format(PyExc_ValueError, "out has %zd bytes; expected %zd frames of %zd bytes", out.len, n,
                     frame_nbytes);
        goto done;
    }
    int keys_error;
    KeyFrames *keys = key_frames_from(keys_arg, &keys_error);
    if (keys_error || views_prepare(views_arg, n * (depth + 1), &views, &buffers) < 0) {
        goto done;
    }
    int status = reference_decode_table(&frames, views, (const int64_t *)steps.buf, n, depth, row_nbytes, keys,
                                        (char *)out.buf, frame_nbytes, threads, buffers, &acquired);
    result = status < 0 ? NULL : Py_NewRef(status == 0 ? Py_True : Py_False);
done:
    views_release(views, buffers, acquired);
    PyBuffer_Release(&table);
    PyBuffer_Release(&steps);
    PyBuffer_Release(&out);
    return result;
}

/* Sorts idx[0..m) by key[idx[i]] (insertion sort: a batch's few hundred frames, mostly in order). */
static void
sort_by_key(Py_ssize_t *idx, Py_ssize_t m, const int64_t *key)
{
    for (Py_ssize_t i = 1; i < m; i++) {
        Py_ssize_t at = idx[i], j = i;
        for (; j > 0 && key[idx[j - 1]] > key[at]; j--) {
            idx[j] = idx[j - 1];
        }
        idx[j] = at;
    }
}

PyObject *
py_reference_closure(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer table, steps, closure, references;
    FrameTable frames = {.table = &table};
    Py_ssize_t depth;
    if (!PyArg_ParseTuple(args, "y*L" ENTRY_LAYOUT_FORMAT "y*nw*w*:reference_closure", &table, &frames.frame_slots,
                          ENTRY_LAYOUT_FIELDS(frames.layout), &steps, &depth, &closure, &references)) {
        return NULL;
    }
    frames.segment_bytes = 1; /* no segments are read: only the table's links */
    PyObject *result = NULL;
    char *room = NULL;
    Py_ssize_t n = steps.len / 8, capacity = n * (depth + 1) > 0 ? n * (depth + 1) : 1;
    if (frame_table_check(&frames, "reference_closure") < 0 || check_array(&steps, "steps", n, 8) < 0
        || reference_arguments_check(depth, 0, 1, "reference_closure") < 0
        || check_array(&closure, "closure", capacity, 8) < 0 || check_array(&references, "references", capacity, 8) < 0) {
        goto done;
    }
    /* the plan's steps, refs and rows, then each entry's rank by step */
    room = PyMem_Malloc((size_t)capacity * (3 * sizeof(int64_t) + 2 * sizeof(Py_ssize_t)));
    if (room == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *plan_steps = (int64_t *)room, *refs = plan_steps + capacity, *rows = refs + capacity;
    Py_ssize_t *order = (Py_ssize_t *)(rows + capacity), *rank = order + capacity;
    TableLookup source = {&frames, NULL};
    ReferenceLookup lookup = {table_reference, table_prefetch, &source};
    Py_ssize_t m = n == 0 ? 0 : reference_plan_follow(&lookup, steps.buf, n, depth, capacity, plan_steps, refs, rows);
    if (m == -3) {
        result = PyLong_FromLong(-1);
        goto done;
    }
    if (m < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t e = 0; e < m; e++) {
        order[e] = e;
    }
    sort_by_key(order, m, plan_steps);
    for (Py_ssize_t i = 0; i < m; i++) {
        rank[order[i]] = i;
    }
    int64_t *sorted = closure.buf, *reference_of = references.buf;
    for (Py_ssize_t e = 0; e < m; e++) {
        sorted[rank[e]] = plan_steps[e];
        reference_of[rank[e]] = refs[e] < 0 ? -1 : rank[refs[e]];
    }
    result = PyLong_FromSsize_t(m);
done:
    PyMem_Free(room);
    PyBuffer_Release(&table);
    PyBuffer_Release(&steps);
    PyBuffer_Release(&closure);
    PyBuffer_Release(&references);
    return result;
}
