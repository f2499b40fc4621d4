/* A writer's reference groups: see reference_groups.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdatomic.h>
#include <string.h>

#include "codec/frame_blocks.h"
#include "codec/reference_groups.h"
#include "pool/work_pool.h"

#define GROUPS_CAPSULE "mmreplay._lz4batch.reference_groups"

/* One env's group: its next place, its key frame's step, its last frame's step, and its anchors:
 * anchor m is the frame referenced by the next place whose lowest nonzero base-branching digit is
 * digit m, kept in buffers[anchor_buffer[m]]. A frame whose lowest nonzero digit is d > 0 is kept in
 * buffer d - 1 (a key frame in buffer depth - 1) and becomes anchors 0 .. d - 1; every anchor m points
 * at a buffer m or above, so a frame never overwrites the anchor it references. */
typedef struct {
    int64_t place, key_step, last_step;
    int64_t anchor_step[REFERENCE_MAX_DEPTH];
    int anchor_buffer[REFERENCE_MAX_DEPTH];
    char *buffers; /* depth frames, allocated with the env's first key frame */
} EnvGroup;

struct ReferenceGroups {
    Py_ssize_t num_envs;
    int64_t group_size, branching, max_distance;
    int depth;
    ReferenceShape shape;
    EnvGroup *envs;
    LZ4_stream_t *stream; /* the GIL holder's: groups_encode's */
    char *work;
};

int
reference_block_bound(const ReferenceShape *shape)
{
    int key = LZ4_compressBound(shape->frame_nbytes);
    int dependent = LZ4_compressBound(shape->work_bytes); /* what a dependent block decodes to, bounded */
    return key > dependent ? key : dependent;
}

static void
groups_free(PyObject *capsule)
{
    ReferenceGroups *g = PyCapsule_GetPointer(capsule, GROUPS_CAPSULE);
    if (g == NULL) {
        return;
    }
    for (Py_ssize_t e = 0; g->envs != NULL && e < g->num_envs; e++) {
        PyMem_Free(g->envs[e].buffers);
    }
    PyMem_Free(g->envs);
    PyMem_Free(g->work);
    if (g->stream != NULL) {
        LZ4_freeStream(g->stream);
    }
    PyMem_Free(g);
}

ReferenceGroups *
reference_groups_from(PyObject *capsule)
{
    if (!PyCapsule_IsValid(capsule, GROUPS_CAPSULE)) {
        PyErr_Format(PyExc_TypeError, "expected reference_groups()'s capsule; got %s", Py_TYPE(capsule)->tp_name);
        return NULL;
    }
    return PyCapsule_GetPointer(capsule, GROUPS_CAPSULE);
}

int
reference_groups_frame_nbytes(const ReferenceGroups *groups)
{
    return groups->shape.frame_nbytes;
}

void
groups_restart(ReferenceGroups *groups, Py_ssize_t env)
{
    /* also forgets its last frame step: an add that failed may assign the same steps again */
    groups->envs[env].place = 0, groups->envs[env].last_step = -1;
}

const char *
groups_assign(ReferenceGroups *g, Py_ssize_t env, int64_t frame_step, const char *frame, int64_t frame_tail,
              int restart, int64_t *ref_delta)
{
    EnvGroup *e = &g->envs[env];
    if (frame_step <= e->last_step) {
        PyErr_Format(PyExc_ValueError, "frame_step is %lld; expected more than env %zd's last one, %lld",
                     (long long)frame_step, env, (long long)e->last_step);
        *ref_delta = -1;
        return NULL;
    }
    size_t n = (size_t)g->shape.frame_nbytes;
    if (e->buffers == NULL && g->depth > 0 && (e->buffers = PyMem_Malloc((size_t)g->depth * n)) == NULL) {
        PyErr_NoMemory();
        *ref_delta = -1;
        return NULL;
    }
    if (restart || e->place == g->group_size || frame_step - e->key_step > g->max_distance || e->key_step < frame_tail) {
        e->place = 0;
    }
    e->last_step = frame_step;
    int64_t place = e->place++;
    *ref_delta = 0;
    if (place == 0) {
        e->key_step = frame_step;
        if (g->depth > 0) {
            memcpy(e->buffers + (size_t)(g->depth - 1) * n, frame, n);
        }
        for (int m = 0; m < g->depth; m++) {
            e->anchor_step[m] = frame_step, e->anchor_buffer[m] = g->depth - 1;
        }
        return NULL;
    }
    int digit = 0;
    for (int64_t rest = place; rest % g->branching == 0; rest /= g->branching) {
        digit++;
    }
    const char *reference = e->buffers + (size_t)e->anchor_buffer[digit] * n;
    *ref_delta = frame_step - e->anchor_step[digit];
    if (digit > 0) { /* this frame is the reference of the places that follow it, down to its own level */
        memcpy(e->buffers + (size_t)(digit - 1) * n, frame, n);
        for (int m = 0; m < digit; m++) {
            e->anchor_step[m] = frame_step, e->anchor_buffer[m] = digit - 1;
        }
    }
    return reference;
}

/* Frames of a batch compressed on the pool's threads, each against its reference (NULL: alone). */
typedef struct {
    const ReferenceShape *shape;
    const char *frames;
    const char **references;
    Py_ssize_t n;
    char *blocks;
    int bound, *lengths;
    _Atomic int failed;
} EncodeJob;

static void
encode_task(void *context, Py_ssize_t i)
{
    EncodeJob *job = context;
    LZ4_stream_t *stream = LZ4_createStream();
    char *work = PyMem_RawMalloc((size_t)job->shape->work_bytes);
    int n = job->shape->frame_nbytes, length = 0;
    if (stream != NULL && work != NULL) {
        const char *frame = job->frames + (size_t)i * (size_t)n;
        char *block = job->blocks + (size_t)i * (size_t)job->bound;
        length = job->references[i] == NULL
                     ? frame_block_compress(stream, frame, n, block, job->bound)
                     : reference_frame_encode(job->shape, frame, job->references[i], block, job->bound, stream, work);
    }
    job->lengths[i] = length;
    if (length <= 0) {
        atomic_store(&job->failed, 1);
    }
    PyMem_RawFree(work);
    if (stream != NULL) {
        LZ4_freeStream(stream);
    }
}

int
groups_encode_envs(ReferenceGroups *g, const char *frames, Py_ssize_t n, int64_t first_step, int64_t frame_tail,
                   int threads, char *blocks, int bound, int *lengths, int64_t *refs)
{
    const char **references = PyMem_Malloc((size_t)n * sizeof(*references));
    if (references == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    size_t frame_nbytes = (size_t)g->shape.frame_nbytes;
    for (Py_ssize_t i = 0; i < n; i++) {
        references[i] = groups_assign(g, i, first_step + i, frames + (size_t)i * frame_nbytes, frame_tail, 0, &refs[i]);
        if (refs[i] < 0) {
            for (Py_ssize_t e = 0; e < n; e++) {
                groups_restart(g, e);
            }
            PyMem_Free(references);
            return -1;
        }
    }
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    if (threads <= 1 || n == 1) { /* the caller's own stream and scratch (its writer's lock is held) */
        for (Py_ssize_t i = 0; i < n && !failed; i++) {
            const char *frame = frames + (size_t)i * frame_nbytes;
            char *block = blocks + (size_t)i * (size_t)bound;
            lengths[i] = references[i] == NULL
                             ? frame_block_compress(g->stream, frame, (int)frame_nbytes, block, bound)
                             : reference_frame_encode(&g->shape, frame, references[i], block, bound, g->stream, g->work);
            failed = lengths[i] <= 0;
        }
    }
    else {
        EncodeJob job = {&g->shape, frames, references, n, blocks, bound, lengths};
        atomic_init(&job.failed, 0);
        pool_run(n, threads, encode_task, &job);
        failed = atomic_load(&job.failed);
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(references);
    if (failed) { /* a block did not fit its bound (it always does), or memory ran out */
        for (Py_ssize_t e = 0; e < n; e++) {
            groups_restart(g, e);
        }
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

PyObject *
py_reference_groups(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    static char *keywords[] = {"num_envs", "group_size", "branching", "max_distance", "frame_nbytes", "row_nbytes",
                               "unit", NULL};
    Py_ssize_t num_envs;
    long long group_size, branching, max_distance, frame_nbytes, row_nbytes, unit;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$nLLLLLL:reference_groups", keywords, &num_envs, &group_size,
                                     &branching, &max_distance, &frame_nbytes, &row_nbytes, &unit)) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(args) != 0 || kwargs == NULL || PyDict_GET_SIZE(kwargs) != 7) {
        PyErr_SetString(PyExc_TypeError, "reference_groups takes its 7 arguments by keyword");
        return NULL;
    }
    int depth = 0;
    for (long long reach = 1; reach < group_size && depth <= REFERENCE_MAX_DEPTH; reach *= branching) {
        depth++;
    }
    ReferenceShape shape;
    if (num_envs < 1 || group_size < 1 || group_size > 65536 || branching < 2 || depth > REFERENCE_MAX_DEPTH
        || max_distance < 1 || reference_shape_init(&shape, frame_nbytes, row_nbytes, unit) < 0) {
        PyErr_SetString(PyExc_ValueError, "reference_groups: num_envs, group_size (1 to 65536), branching (from 2), "
                                          "max_distance, or the frame's shape out of range");
        return NULL;
    }
    ReferenceGroups *g = PyMem_Calloc(1, sizeof(ReferenceGroups));
    if (g == NULL) {
        return PyErr_NoMemory();
    }
    *g = (ReferenceGroups){num_envs, group_size, branching, max_distance, depth, shape};
    g->envs = PyMem_Calloc((size_t)num_envs, sizeof(EnvGroup));
    g->work = PyMem_Malloc((size_t)shape.work_bytes);
    g->stream = LZ4_createStream();
    PyObject *capsule = PyCapsule_New(g, GROUPS_CAPSULE, groups_free);
    if (capsule == NULL) {
        PyMem_Free(g->envs), PyMem_Free(g->work), PyMem_Free(g);
        return NULL;
    }
    if (g->envs == NULL || g->work == NULL || g->stream == NULL) {
        Py_DECREF(capsule);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t e = 0; e < num_envs; e++) {
        g->envs[e].key_step = g->envs[e].last_step = -1;
    }
    return capsule;
}

PyObject *
py_groups_encode(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *groups_arg;
    Py_ssize_t env;
    long long frame_step, frame_tail;
    int restart;
    Py_buffer frame;
    if (!PyArg_ParseTuple(args, "OnLy*pL:groups_encode", &groups_arg, &env, &frame_step, &frame, &restart,
                          &frame_tail)) {
        return NULL;
    }
    PyObject *result = NULL, *block = NULL;
    ReferenceGroups *g = reference_groups_from(groups_arg);
    if (g == NULL) {
        goto done;
    }
    if (env < 0 || env >= g->num_envs || frame.len != g->shape.frame_nbytes) {
        PyErr_Format(PyExc_ValueError, "groups_encode: env %zd of %zd, or a frame of %zd bytes (expected %d)", env,
                     g->num_envs, frame.len, g->shape.frame_nbytes);
        goto done;
    }
    int64_t ref_delta;
    const char *reference = groups_assign(g, env, frame_step, frame.buf, frame_tail, restart, &ref_delta);
    if (ref_delta < 0) {
        goto done;
    }
    int bound = reference_block_bound(&g->shape);
    block = PyBytes_FromStringAndSize(NULL, bound);
    if (block == NULL) {
        groups_restart(g, env);
        goto done;
    }
    char *out = PyBytes_AS_STRING(block);
    int length = reference == NULL ? frame_block_compress(g->stream, frame.buf, g->shape.frame_nbytes, out, bound)
                                   : reference_frame_encode(&g->shape, frame.buf, reference, out, bound, g->stream,
                                                            g->work);
    if (length <= 0 || _PyBytes_Resize(&block, length) < 0) {
        groups_restart(g, env);
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "groups_encode: a block overran its bound");
        }
        goto done;
    }
    result = Py_BuildValue("(NL)", block, (long long)ref_delta);
    block = NULL;
done:
    Py_XDECREF(block);
    PyBuffer_Release(&frame);
    return result;
}

PyObject *
py_groups_restart(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *groups_arg, *envs_arg;
    if (!PyArg_ParseTuple(args, "OO:groups_restart", &groups_arg, &envs_arg)) {
        return NULL;
    }
    ReferenceGroups *g = reference_groups_from(groups_arg);
    PyObject *envs = g == NULL ? NULL : PySequence_Fast(envs_arg, "envs must be a sequence of ints");
    if (envs == NULL) {
        return NULL;
    }
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(envs); k++) {
        Py_ssize_t env = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(envs, k));
        if (env == -1 && PyErr_Occurred()) {
            Py_DECREF(envs);
            return NULL;
        }
        if (env >= 0 && env < g->num_envs) {
            groups_restart(g, env);
        }
    }
    Py_DECREF(envs);
    Py_RETURN_NONE;
}
