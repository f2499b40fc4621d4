/* An add's frames encoded ahead on a helper, and taken back from a preempted one: see reference_ahead.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reference_ahead.h"
#include "reference_anchors.h"
#include "work_pool.h"

/* The frames of one or more envs encoded ahead on helpers (encode_ahead), each against the reference its
 * group would give it next, or alone where it would be a key frame, while the caller checks its add.
 * Every function here that reads or changes the groups settles it first (ahead_settle): its helpers
 * joined where they are done or within TAKE_BACK_NANOSECONDS. A helper still running then (preempted: on
 * 2 cores another process took its core for a time slice) is not waited for: the add encodes that frame
 * itself, apart from the reference the helper writes beside, and the frames stay the groups' g->ahead,
 * holding their references, until a later settle finds their helpers done (and frees them, once their
 * capsule is gone: orphaned). */
typedef struct AheadFrame {
    ReferenceGroups *g;
    PyObject *groups;   /* the groups' capsule, held while this lives */
    Py_ssize_t env;     /* the first env's number; count envs from it, each at its frame step */
    Py_ssize_t count;
    int64_t step;       /* the first env's frame step: env + k's is step + k (a vector add's) */
    Py_buffer frame;    /* frame k at frame.buf + offset + k * stride */
    size_t offset, stride;
    /* each frame's, allocated with this: */
    Anchor **reference;         /* held until settled; NULL: a key frame */
    const Anchor **predicted;
    int64_t *reference_step;
    Py_ssize_t *length;         /* the block's bytes; -1: it did not encode; -2: not encoded */
    uint8_t **copy;             /* where the frame will be an anchor: room (2n bytes) its helper copies it
                                 * to, for the add to take as the anchor's bytes (ahead_take_copy); NULL:
                                 * none (and then the room an anchor gave back, freed with this) */
    unsigned char *done;        /* set (release) once the frame's block and length are written */
    unsigned char *same;        /* 0: not compared yet; 1: the add's frame is the one posted; 2: it is not */
    char *block;                /* frame k's at block + k * room */
    size_t room;
    PoolJob *posted;
    int settled;
    int taken_back; /* an add took it back (counted once in g->taken_back, however many settles find it running) */
    int orphaned; /* its capsule is gone: the groups free it once settled */
    long long helper_delay_ns; /* the groups' at its post: read by the helper */
} AheadFrame;

/* How long a settle polls for a helper that is encoding the frame (~3-6 us for an 84x84 frame, ~7 where
 * the frame crosses cores that share no cache) before the add encodes it itself; and how many
 * encode_aheads decline after that (a busy machine would otherwise make every add poll and then encode).
 * A vector add's settle mostly finds its helper mid-frame (it takes frames until the add takes the rest):
 * 5 us took back frames a helper was about to finish, and the pause after each left ~90% of Pong's 8-env
 * adds without a helper (0.65x-0.97x of plain's rate; with 20 us, 5 take-backs in 7,500 adds, 1.03x). */
#define TAKE_BACK_NANOSECONDS 20000
#define TAKE_BACK_PAUSE 64
/* After this many adds in a row whose frames no helper took (every helper asleep, or its core taken by
 * another process: the add then encodes them itself, and handing them over was cost alone), encode_ahead
 * declines for TAKE_BACK_PAUSE calls too. */
#define UNTAKEN_LIMIT 8

/* Whether env's frame at step is frame k of this post, its helper done, with the bytes the add passes
 * (compared once: ahead_take_copy and ahead_block both ask): k, or -1. */
static Py_ssize_t
ahead_match(AheadFrame *a, Py_ssize_t env, int64_t step, const char *frame)
{
    Py_ssize_t k = env - (a == NULL ? 0 : a->env);
    /* a frame encoded (by a helper, or by a join), even where another is still running (taken back: not
     * settled); none is where no helper was awake to post to */
    if (a == NULL || k < 0 || k >= a->count || a->step + k != step || !__atomic_load_n(&a->done[k], __ATOMIC_ACQUIRE)) {
        return -1;
    }
    if (a->same[k] == 0) {
        const char *posted = (const char *)a->frame.buf + a->offset + (size_t)k * a->stride;
        a->same[k] = posted == frame || memcmp(posted, frame, a->g->n) == 0 ? 1 : 2;
    }
    return a->same[k] == 1 ? k : -1;
}

static void
ahead_task(void *context, Py_ssize_t k)
{
    AheadFrame *a = context;
    if (a->helper_delay_ns > 0 && pool_on_helper()) { /* a test's stand-in for a preempted helper */
        struct timespec pause = {(time_t)(a->helper_delay_ns / 1000000000), (long)(a->helper_delay_ns % 1000000000)};
        nanosleep(&pause, NULL);
    }
    if (pool_on_helper()) {
        __atomic_fetch_add(&a->g->ahead_on_helper, 1, __ATOMIC_RELAXED);
    }
    const char *frame = (const char *)a->frame.buf + a->offset + (size_t)k * a->stride;
    a->length[k] = encode_one(frame, a->g->n, a->reference[k], a->block + (size_t)k * a->room, a->room, 0);
    if (a->copy[k] != NULL) { /* the frame just read, copied where the thread that encodes against it reads */
        memcpy(a->copy[k], frame, a->g->n);
    }
    __atomic_store_n(&a->done[k], 1, __ATOMIC_RELEASE); /* an add may take it before the others are done */
}

static void ahead_free(AheadFrame *a);

/* Joins the frame's helper where it is done (waiting for it with `wait`, else for at most
 * TAKE_BACK_NANOSECONDS), and lets go of its reference: 1. 0 while the helper still runs: the frame stays
 * g->ahead, and the caller encodes apart. Call with the GIL (an orphaned frame is freed here). */
static int
ahead_settle(AheadFrame *a, int wait)
{
    if (a->settled) {
        return 1;
    }
    ReferenceGroups *g = a->g;
    if (a->posted == NULL || !pool_started(a->posted)) {
        if (++g->untaken >= UNTAKEN_LIMIT && g->ahead_pause == 0) {
            g->ahead_pause = TAKE_BACK_PAUSE;
            g->untaken = 0;
        }
    }
    else {
        g->untaken = 0;
    }
    if (a->posted == NULL) {
        for (Py_ssize_t k = 0; k < a->count; k++) {
            a->length[k] = -2; /* no helper awake: the add encodes the frames itself */
        }
    }
    else if (wait) {
        pool_join(a->posted, a->count, ahead_task, a); /* what no helper took, this thread runs */
    }
    /* With a test's delay the add never runs a frame itself: as if a helper had just taken it. */
    else {
        /* how long the add waits here for helpers that took its frames (groups_ahead_counts' wait_ns) */
        struct timespec before, after;
        int taken = pool_started(a->posted);
        if (taken) {
            clock_gettime(CLOCK_MONOTONIC, &before);
        }
        int joined = pool_try_join(a->posted, a->count, ahead_task, a, TAKE_BACK_NANOSECONDS, a->helper_delay_ns == 0);
        if (taken) {
            clock_gettime(CLOCK_MONOTONIC, &after);
            g->ahead_wait_ns += (after.tv_sec - before.tv_sec) * 1000000000LL + (after.tv_nsec - before.tv_nsec);
        }
        if (!joined) { /* taken back: this add encodes the frame */
            if (!a->taken_back) {
                a->taken_back = 1;
                g->taken_back++;
            }
            if (g->ahead_pause == 0) {
                g->ahead_pause = TAKE_BACK_PAUSE;
            }
            return 0;
        }
    }
    a->settled = 1;
    if (g->ahead == a) {
        g->ahead = NULL;
    }
    for (Py_ssize_t k = 0; k < a->count; k++) {
        anchor_release(g, a->reference[k]);
        a->reference[k] = NULL;
    }
    if (a->orphaned) {
        ahead_free(a);
    }
    return 1;
}

int
groups_settle(ReferenceGroups *g, int wait)
{
    return g->ahead == NULL || ahead_settle(g->ahead, wait);
}

int
ahead_uses(const ReferenceGroups *g, const Anchor *reference)
{
    const AheadFrame *a = g->ahead;
    if (a == NULL || a->settled || reference == NULL) {
        return 0;
    }
    for (Py_ssize_t k = 0; k < a->count; k++) {
        if (a->reference[k] == reference) {
            return 1;
        }
    }
    return 0;
}

Py_ssize_t
ahead_block(AheadFrame *a, Py_ssize_t env, int64_t step, const char *frame, const Anchor *reference, char *dst)
{
    Py_ssize_t k = ahead_match(a, env, step, frame);
    if (k < 0 || a->length[k] < 0 || a->predicted[k] != reference
        || (reference != NULL && a->reference_step[k] != reference->step)) {
        return -1;
    }
    memcpy(dst, a->block + (size_t)k * a->room, (size_t)a->length[k]);
    a->g->ahead_used++;
    return a->length[k];
}

uint8_t *
ahead_take_copy(AheadFrame *a, Py_ssize_t env, int64_t step, const char *frame, uint8_t *bytes)
{
    Py_ssize_t k = ahead_match(a, env, step, frame);
    if (k < 0 || a->copy[k] == NULL) {
        return NULL;
    }
    uint8_t *copy = a->copy[k];
    a->copy[k] = bytes; /* freed with the frame (NULL: nothing to free, and no copy taken twice) */
    return copy;
}

#define AHEAD_NAME "mmreplay._lz4batch.AheadFrame"

static void
ahead_free(AheadFrame *a)
{
    for (Py_ssize_t k = 0; k < a->count; k++) {
        free(a->copy[k]);
    }
    PyBuffer_Release(&a->frame);
    PyMem_Free(a);
}

static void
ahead_destroy(PyObject *capsule)
{
    AheadFrame *a = PyCapsule_GetPointer(capsule, AHEAD_NAME);
    if (a == NULL) {
        return;
    }
    PyObject *groups = a->groups;
    if (ahead_settle(a, 0)) {
        ahead_free(a);
    }
    else { /* its helper still reads its frame: the groups free it once settled (it is their g->ahead) */
        a->orphaned = 1;
    }
    Py_DECREF(groups); /* last: it may free the groups, which then wait for an orphaned frame's helper */
}

AheadFrame *
ahead_frame_of(PyObject *capsule)
{
    if (capsule == Py_None) {
        return NULL;
    }
    return capsule_pointer(capsule, AHEAD_NAME, "ahead must be None or what encode_ahead() returned");
}

PyObject *
py_encode_ahead(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *capsule;
    Py_ssize_t env, count = 1, offset = 0, stride = 0;
    long long step, frame_tail;
    Py_buffer frame;
    int threads;
    if (!PyArg_ParseTuple(args, "OnLy*Li|nnn:encode_ahead", &capsule, &env, &step, &frame, &frame_tail, &threads,
                          &count, &offset, &stride)) {
        return NULL;
    }
    return encode_ahead_start(capsule, env, step, &frame, frame_tail, threads, count, offset, stride);
}

PyObject *
encode_ahead_start(PyObject *capsule, Py_ssize_t env, long long step, Py_buffer *frame_view, long long frame_tail,
                   int threads, Py_ssize_t count, Py_ssize_t offset, Py_ssize_t stride)
{
    Py_buffer frame = *frame_view;
    ReferenceGroups *g = reference_groups_from(capsule);
    if (g == NULL || env < 0 || count < 1 || env > g->num_envs - count || offset < 0 || stride < 0
        || (count > 1 && stride < (Py_ssize_t)g->n) || threads < 1 || threads > POOL_MAX_THREADS
        || (size_t)frame.len < (size_t)offset + (size_t)(count - 1) * (size_t)stride + g->n) {
        if (g != NULL) {
            PyErr_Format(PyExc_ValueError, "encode_ahead: envs %zd to %zd of %zd, frames of %zu bytes at %zd + k * %zd in "
                         "%zd bytes, threads %d", env, env + count - 1, g->num_envs, g->n, offset, stride, frame.len,
                         threads);
        }
        PyBuffer_Release(&frame);
        return NULL;
    }
    g->ahead_asked += count;
    /* None while a frame taken back is still being encoded (its helper holds the one posting slot), and
     * for a while after one was (ahead_pause). */
    if (!groups_settle(g, 0) || g->ahead_pause > 0) {
        g->ahead_pause -= g->ahead_pause > 0;
        PyBuffer_Release(&frame);
        Py_RETURN_NONE;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        if (step + k <= g->envs[env + k].last_step) {
            PyBuffer_Release(&frame);
            Py_RETURN_NONE;
        }
    }
    size_t room = block_room(g), n = (size_t)count;
    /* the frame, then each frame's reference, prediction, reference step, length, copy, done and same
     * flags, then the blocks (from a multiple of 8 bytes) */
    size_t arrays = (n * (2 * sizeof(Anchor *) + sizeof(int64_t) + sizeof(Py_ssize_t) + sizeof(uint8_t *) + 2) + 7)
                    & ~(size_t)7;
    AheadFrame *a = PyMem_Malloc(sizeof(AheadFrame) + arrays + n * room); /* the blocks not cleared: ~7 KB a frame */
    PyObject *result = a == NULL ? NULL : PyCapsule_New(a, AHEAD_NAME, ahead_destroy);
    if (result == NULL) {
        PyMem_Free(a);
        PyBuffer_Release(&frame);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    char *after = (char *)(a + 1), *at = after;
    *a = (AheadFrame){.g = g, .groups = Py_NewRef(capsule), .env = env, .count = count, .step = step, .frame = frame,
                      .offset = (size_t)offset, .stride = (size_t)stride, .block = after + arrays, .room = room,
                      .helper_delay_ns = g->helper_delay_ns};
    a->reference = (Anchor **)at, at += n * sizeof(Anchor *);
    a->predicted = (const Anchor **)at, at += n * sizeof(Anchor *);
    a->reference_step = (int64_t *)at, at += n * sizeof(int64_t);
    a->length = (Py_ssize_t *)at, at += n * sizeof(Py_ssize_t);
    a->copy = (uint8_t **)at, at += n * sizeof(uint8_t *);
    a->done = (unsigned char *)at, at += n;
    a->same = (unsigned char *)at;
    /* The reference assign would give each frame if its add continues the env's group (no episode start:
     * that add's obs frame is written first, at this step, and the block is not taken). */
    for (Py_ssize_t k = 0; k < count; k++) {
        const EnvGroup *e = &g->envs[env + k];
        int key = e->place == 0 || group_ends(g, e, step + k, frame_tail);
        int digit = key ? 0 : reference_digit(g, e->place);
        Anchor *reference = key ? NULL : e->anchors[digit];
        /* a key frame, or a place later ones reference: an anchor, whose bytes the helper copies (2n: an
         * anchor's room, reference_index_init's); without memory, the add copies them as before */
        a->copy[k] = key || digit > 0 ? malloc(2 * g->n) : NULL;
        a->reference[k] = reference, a->predicted[k] = reference;
        a->reference_step[k] = reference != NULL ? reference->step : -1;
        a->length[k] = -2;
        a->done[k] = 0, a->same[k] = 0;
        anchor_hold(reference);
    }
    g->ahead = a;
    /* posted last: nothing can fail after a helper may have started on it */
    a->posted = pool_post(count, threads, ahead_task, a, a->helper_delay_ns > 0 ? POOL_AHEAD_WAKING : POOL_AHEAD);
    g->ahead_posted += a->posted != NULL ? count : 0;
    return result;
}

PyObject *
py_groups_taken_back(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *capsule;
    long long delay = -1;
    if (!PyArg_ParseTuple(args, "O|L:groups_taken_back", &capsule, &delay)) {
        return NULL;
    }
    ReferenceGroups *g = reference_groups_from(capsule);
    if (g == NULL) {
        return NULL;
    }
    if (delay >= 0) {
        g->helper_delay_ns = delay;
    }
    return PyLong_FromLongLong(g->taken_back);
}

PyObject *
py_groups_ahead_counts(PyObject *module, PyObject *capsule)
{
    (void)module;
    ReferenceGroups *g = reference_groups_from(capsule);
    if (g == NULL) {
        return NULL;
    }
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L}", "asked", g->ahead_asked, "posted", g->ahead_posted,
                         "on_helper", __atomic_load_n(&g->ahead_on_helper, __ATOMIC_RELAXED), "used", g->ahead_used,
                         "taken_back", g->taken_back, "wait_ns", g->ahead_wait_ns);
}
