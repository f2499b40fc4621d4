/* A writer's reference groups: see reference_groups.h. The assignment follows
 * mmreplay/frames/reference_codec.py's EnvReferences.assign step for step (the pure-Python writer's). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "lz4_api.h"
#include "reference_ahead.h"
#include "reference_anchors.h"
#include "reference_encode.h"
#include "reference_groups.h"
#include "work_pool.h"

#define CAPSULE_NAME "mmreplay._lz4batch.ReferenceGroups"

void
anchor_hold(Anchor *anchor)
{
    if (anchor != NULL) {
        anchor->refs++;
    }
}

void
anchor_release(ReferenceGroups *g, Anchor *anchor)
{
    if (anchor != NULL && --anchor->refs == 0) {
        anchor->next_free = g->free_anchors;
        g->free_anchors = anchor;
    }
}

/* A new anchor holding env's frame at step: its bytes the copy a helper made of the frame encoded ahead
 * (ahead_take_copy), where there is one, else copied here. */
static Anchor *
anchor_new(ReferenceGroups *g, const char *frame, int64_t step, AheadFrame *ahead, Py_ssize_t env)
{
    Anchor *anchor = g->free_anchors;
    if (anchor != NULL) {
        g->free_anchors = anchor->next_free;
    }
    else {
        anchor = calloc(1, sizeof(Anchor));
        if (anchor == NULL) {
            return NULL;
        }
    }
    uint8_t *copy = anchor->frame.bytes == NULL || anchor->frame.n == g->n
                        ? ahead_take_copy(ahead, env, step, frame, anchor->frame.bytes) : NULL;
    if (copy != NULL) {
        anchor->frame.bytes = copy;
        anchor->frame.n = g->n, anchor->frame.row = g->row, anchor->frame.prepared = 0;
    }
    else if (reference_index_init(&anchor->frame, (const uint8_t *)frame, g->n, g->row) < 0) {
        reference_index_free(&anchor->frame);
        free(anchor);
        return NULL;
    }
    anchor->refs = 0, anchor->step = step, anchor->next_free = NULL;
    return anchor;
}

static void
env_restart(ReferenceGroups *g, EnvGroup *env)
{
    env->place = 0;
    for (int k = 0; k < g->depth; k++) {
        anchor_release(g, env->anchors[k]);
        env->anchors[k] = NULL;
    }
}

static void
env_copy(EnvGroup *to, const EnvGroup *from, int depth)
{
    *to = *from;
    for (int k = 0; k < depth; k++) {
        anchor_hold(to->anchors[k]);
    }
}

static void
env_drop(ReferenceGroups *g, EnvGroup *env)
{
    for (int k = 0; k < g->depth; k++) {
        anchor_release(g, env->anchors[k]);
        env->anchors[k] = NULL;
    }
}

/* Remembers env's group as it is, once after each checkpoint (before anything changes it). */
static void
env_touch(ReferenceGroups *g, Py_ssize_t env)
{
    if (!g->touched[env]) {
        env_copy(&g->saved[env], &g->envs[env], g->depth);
        g->touched[env] = 1;
    }
}

static void
groups_checkpoint(ReferenceGroups *g)
{
    for (Py_ssize_t env = 0; env < g->num_envs; env++) {
        if (g->touched[env]) {
            env_drop(g, &g->saved[env]);
            g->touched[env] = 0;
        }
    }
}

static void
groups_rollback(ReferenceGroups *g)
{
    for (Py_ssize_t env = 0; env < g->num_envs; env++) {
        if (g->touched[env]) {
            env_drop(g, &g->envs[env]);
            g->envs[env] = g->saved[env]; /* the saved holds pass over */
            g->touched[env] = 0;
        }
    }
}

/* Whether env's frame at step starts a new group, for lack of room in its group: the group is full, would
 * span more than max_distance steps, or its key frame is older than frame_tail (restart, an episode start,
 * is the other reason). */
int
group_ends(const ReferenceGroups *g, const EnvGroup *e, int64_t step, int64_t frame_tail)
{
    return e->place == g->group_size || step - e->key_step > g->max_distance || e->key_step < frame_tail;
}

/* The anchor that the frame at place (> 0) of a group references: anchors[m], m the position of place's
 * lowest nonzero base-branching digit. */
int
reference_digit(const ReferenceGroups *g, int64_t place)
{
    int digit = 0;
    for (int64_t rest = place; rest % g->branching == 0; rest /= g->branching) {
        digit++;
    }
    return digit;
}

/* EnvReferences.assign: the frame at step of env gets its ref_delta and reference (NULL: a key frame); 0,
 * or -1 with a Python error (a step not after the env's last one, or no memory). */
static int
assign(ReferenceGroups *g, Py_ssize_t env, int64_t step, const char *frame, int restart, int64_t frame_tail,
       AheadFrame *ahead, int64_t *ref_delta, Anchor **reference)
{
    EnvGroup *e = &g->envs[env];
    if (step <= e->last_step) {
        PyErr_Format(PyExc_ValueError, "frame_step is %lld; expected more than this env's last one, %lld",
                     (long long)step, (long long)e->last_step);
        return -1;
    }
    env_touch(g, env);
    if (restart || group_ends(g, e, step, frame_tail)) {
        env_restart(g, e);
    }
    int64_t place = e->place;
    if (place == 0) {
        Anchor *anchor = anchor_new(g, frame, step, ahead, env);
        if (anchor == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        e->last_step = step, e->place = 1, e->key_step = step;
        for (int k = 0; k < g->depth; k++) {
            anchor_release(g, e->anchors[k]);
            e->anchors[k] = anchor;
            anchor_hold(anchor);
        }
        *ref_delta = 0, *reference = NULL;
        return 0;
    }
    int digit = reference_digit(g, place);
    Anchor *referenced = e->anchors[digit];
    if (digit > 0) { /* this frame is the reference of the places that follow it, down to its own level */
        Anchor *anchor = anchor_new(g, frame, step, ahead, env);
        if (anchor == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (int k = 0; k < digit; k++) {
            anchor_release(g, e->anchors[k]);
            e->anchors[k] = anchor;
            anchor_hold(anchor);
        }
    }
    e->last_step = step, e->place = place + 1;
    *ref_delta = step - referenced->step, *reference = referenced;
    return 0;
}

/* One frame compressed: alone as lz4_codec.compress (a fresh stream: python-lz4's bytes), or against its
 * reference. The block's bytes, or -1. */
static _Thread_local LZ4_stream_t *key_stream = NULL;

Py_ssize_t
encode_one(const char *frame, size_t n, Anchor *reference, char *dst, size_t room, int apart)
{
    if (reference != NULL) {
        return apart ? reference_encode_apart((const uint8_t *)frame, &reference->frame, (uint8_t *)dst)
                     : reference_encode_indexed((const uint8_t *)frame, &reference->frame, (uint8_t *)dst);
    }
    if (key_stream == NULL && (key_stream = LZ4_createStream()) == NULL) {
        return -1;
    }
    LZ4_resetStream(key_stream);
    int length = LZ4_compress_fast_continue(key_stream, frame, dst, (int)n, (int)room, 1);
    return length > 0 ? length : -1;
}

size_t
block_room(const ReferenceGroups *g)
{
    size_t dependent = reference_encode_bound(g->n, g->row, 1), alone = (size_t)LZ4_compressBound((int)g->n);
    return dependent > alone ? dependent : alone;
}

typedef struct {
    const char *frames;
    size_t n, room;
    Anchor **references;
    char *blocks;
    int *lengths;
    const unsigned char *apart; /* frame i's reference is one a helper may still be encoding against */
    const Py_ssize_t *todo; /* the frames to encode (task t: frame todo[t]); the rest were encoded ahead */
} EncodeJob;

static void
encode_task(void *context, Py_ssize_t t)
{
    EncodeJob *job = context;
    Py_ssize_t i = job->todo[t];
    Py_ssize_t length = encode_one(job->frames + (size_t)i * job->n, job->n, job->references[i],
                                   job->blocks + (size_t)i * job->room, job->room, job->apart[i]);
    job->lengths[i] = (int)length;
}

long long
reference_groups_encode(ReferenceGroups *g, const char *frames, Py_ssize_t n, Py_ssize_t frame_nbytes,
                        long long first_step, long long frame_tail, int threads, AheadFrame *ahead,
                        char **blocks, int *lengths, int64_t *refs)
{
    if ((size_t)frame_nbytes != g->n || n != g->num_envs) {
        PyErr_Format(PyExc_ValueError, "reference groups: %zd frames of %zd bytes; expected %zd of %zu", n,
                     frame_nbytes, g->num_envs, g->n);
        return -1;
    }
    size_t room = block_room(g);
    Anchor **references = PyMem_Malloc((size_t)n * (sizeof(Anchor *) + sizeof(Py_ssize_t) + 1));
    *blocks = PyMem_Malloc((size_t)n * room);
    if (references == NULL || *blocks == NULL) {
        PyMem_Free(references);
        PyMem_Free(*blocks);
        *blocks = NULL;
        PyErr_NoMemory();
        return -1;
    }
    /* Frames encoded ahead: their helper done, or still running (preempted), and then a frame here whose
     * reference it holds is encoded apart from it (the helper may be writing beside it). */
    groups_settle(g, 0);
    groups_checkpoint(g);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (assign(g, i, first_step + i, frames + (size_t)i * g->n, 0, frame_tail, ahead, &refs[i], &references[i])
            < 0) {
            groups_rollback(g);
            PyMem_Free(references);
            PyMem_Free(*blocks);
            *blocks = NULL;
            return -1;
        }
    }
    Py_ssize_t *todo = (Py_ssize_t *)(references + n), count = 0;
    unsigned char *apart = (unsigned char *)(todo + n);
    for (Py_ssize_t i = 0; i < n; i++) { /* the frames encoded ahead against the same references are taken */
        lengths[i] = (int)ahead_block(ahead, i, first_step + i, frames + (size_t)i * g->n, references[i],
                                      *blocks + (size_t)i * room);
        apart[i] = (unsigned char)ahead_uses(g, references[i]);
        if (lengths[i] < 0) {
            todo[count++] = i;
        }
    }
    EncodeJob job = {frames, g->n, room, references, *blocks, lengths, apart, todo};
    Py_BEGIN_ALLOW_THREADS
    if (threads > 1 && count > 1) {
        pool_run(count, threads, encode_task, &job);
    }
    else {
        for (Py_ssize_t t = 0; t < count; t++) {
            encode_task(&job, t);
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(references);
    long long total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (lengths[i] < 0) {
            groups_rollback(g);
            PyMem_Free(*blocks);
            *blocks = NULL;
            PyErr_SetString(PyExc_RuntimeError, "mmreplay._lz4batch could not encode a frame (out of memory, or a "
                            "block that does not decode to the frame: a bug in the encoder)");
            return -1;
        }
        if (total != (long long)i * (long long)room) { /* pack: each block moves down */
            memmove(*blocks + total, *blocks + (size_t)i * room, (size_t)lengths[i]);
        }
        total += lengths[i];
    }
    return total;
}

void
reference_groups_undo(ReferenceGroups *g)
{
    groups_settle(g, 0);
    groups_rollback(g);
}

static void
groups_destroy(PyObject *capsule)
{
    ReferenceGroups *g = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (g == NULL) {
        return;
    }
    groups_settle(g, 1); /* an orphaned frame encoded ahead (the groups own it) waits for its helper */
    groups_checkpoint(g); /* drops the saved groups */
    for (Py_ssize_t env = 0; env < g->num_envs; env++) {
        env_drop(g, &g->envs[env]);
    }
    while (g->free_anchors != NULL) {
        Anchor *anchor = g->free_anchors;
        g->free_anchors = anchor->next_free;
        reference_index_free(&anchor->frame);
        free(anchor);
    }
    PyMem_Free(g->envs);
    PyMem_Free(g->saved);
    PyMem_Free(g->touched);
    PyMem_Free(g);
}

/* The pointer of a capsule named name; NULL with a TypeError that says what was expected ("groups must be
 * <expected>; got <type>") for any other object. */
void *
capsule_pointer(PyObject *capsule, const char *name, const char *expected)
{
    if (!PyCapsule_IsValid(capsule, name)) {
        PyErr_Format(PyExc_TypeError, "%s; got %s", expected, Py_TYPE(capsule)->tp_name);
        return NULL;
    }
    return PyCapsule_GetPointer(capsule, name);
}

ReferenceGroups *
reference_groups_from(PyObject *capsule)
{
    return capsule_pointer(capsule, CAPSULE_NAME, "groups must be reference groups that reference_groups() made");
}

PyObject *
py_reference_groups(PyObject *module, PyObject *args)
{
    (void)module;
    Py_ssize_t num_envs, frame_nbytes, row_nbytes;
    long long group_size, branching, max_distance;
    if (!PyArg_ParseTuple(args, "nLLLnn:reference_groups", &num_envs, &group_size, &branching, &max_distance,
                          &frame_nbytes, &row_nbytes)) {
        return NULL;
    }
    if (num_envs < 1 || group_size < 1 || branching < 2 || max_distance < 1 || frame_nbytes < 1
        || frame_nbytes > INT_MAX / 8 || row_nbytes < 1 || frame_nbytes % row_nbytes != 0) {
        PyErr_SetString(PyExc_ValueError, "reference_groups: envs, scheme, frame_nbytes or row_nbytes out of range");
        return NULL;
    }
    int depth = 0;
    for (long double power = 1; power < (long double)group_size; power *= (long double)branching) {
        depth++;
    }
    ReferenceGroups *g = PyMem_Calloc(1, sizeof(ReferenceGroups));
    if (g == NULL) {
        return PyErr_NoMemory();
    }
    *g = (ReferenceGroups){.num_envs = num_envs, .group_size = group_size, .branching = branching,
                           .max_distance = max_distance, .depth = depth < 1 ? 1 : depth, .n = (size_t)frame_nbytes,
                           .row = (size_t)row_nbytes};
    g->envs = PyMem_Calloc((size_t)num_envs, sizeof(EnvGroup));
    g->saved = PyMem_Calloc((size_t)num_envs, sizeof(EnvGroup));
    g->touched = PyMem_Calloc((size_t)num_envs, 1);
    PyObject *capsule = NULL;
    if (g->envs != NULL && g->saved != NULL && g->touched != NULL) {
        for (Py_ssize_t env = 0; env < num_envs; env++) {
            g->envs[env].key_step = -1, g->envs[env].last_step = -1;
        }
        capsule = PyCapsule_New(g, CAPSULE_NAME, groups_destroy);
    }
    if (capsule == NULL) {
        PyMem_Free(g->envs);
        PyMem_Free(g->saved);
        PyMem_Free(g->touched);
        PyMem_Free(g);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    return capsule;
}

PyObject *
py_encode_frame(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *capsule;
    Py_ssize_t env;
    long long step, frame_tail;
    Py_buffer frame;
    int restart;
    if (!PyArg_ParseTuple(args, "OnLy*pL:encode_frame", &capsule, &env, &step, &frame, &restart, &frame_tail)) {
        return NULL;
    }
    PyObject *result = NULL;
    char *dst = NULL;
    ReferenceGroups *g = reference_groups_from(capsule);
    if (g == NULL) {
        goto done;
    }
    if (env < 0 || env >= g->num_envs || (size_t)frame.len != g->n) {
        PyErr_Format(PyExc_ValueError, "encode_frame: env %zd of %zd, a frame of %zd bytes (expected %zu)", env,
                     g->num_envs, frame.len, g->n);
        goto done;
    }
    int64_t ref_delta;
    Anchor *reference;
    groups_settle(g, 0);
    if (assign(g, env, step, frame.buf, restart, frame_tail, NULL, &ref_delta, &reference) < 0) {
        goto done;
    }
    size_t room = block_room(g);
    dst = PyMem_Malloc(room);
    if (dst == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t length = encode_one(frame.buf, g->n, reference, dst, room, ahead_uses(g, reference));
    if (length < 0) {
        PyErr_SetString(PyExc_RuntimeError, "mmreplay._lz4batch could not encode a frame (out of memory, or a block "
                        "that does not decode to the frame: a bug in the encoder)");
        goto done;
    }
    result = Py_BuildValue("(y#L)", dst, length, (long long)ref_delta);
done:
    PyMem_Free(dst);
    PyBuffer_Release(&frame);
    return result;
}

PyObject *
py_groups_checkpoint(PyObject *module, PyObject *arg)
{
    (void)module;
    ReferenceGroups *g = reference_groups_from(arg);
    if (g == NULL) {
        return NULL;
    }
    groups_settle(g, 0);
    groups_checkpoint(g);
    Py_RETURN_NONE;
}

PyObject *
py_groups_rollback(PyObject *module, PyObject *arg)
{
    (void)module;
    ReferenceGroups *g = reference_groups_from(arg);
    if (g == NULL) {
        return NULL;
    }
    groups_settle(g, 0);
    groups_rollback(g);
    Py_RETURN_NONE;
}


