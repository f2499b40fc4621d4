/* Key frames kept decoded across a reader's batches: see key_frames.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>

#include "key_frames.h"

#define CAPSULE_NAME "mmreplay._lz4batch.KeyFrames"

/* sequence: 0 for a slot never written, odd while one is being written. The other fields are read and
 * written with relaxed atomics (the sequence orders them). */
typedef struct {
    uint32_t sequence, checksum, seed;
    int64_t step;
} SlotHead;

/* The slots' heads lie together, apart from their frames: a plan asks whether a slot holds a frame for
 * every frame of its chains (key_frames_holds), and 4,096 heads (96 KB) stay in the caches where their
 * frames (29 MB) would not. */
struct KeyFrames {
    size_t frame_nbytes, slot_bytes;
    int bits; /* slots: 1 << bits */
    SlotHead *heads;
    int64_t min_delta; /* key_frames_keeps; 0: key frames alone */
    int64_t horizon;   /* key_frames_put: a slot's frame this many steps older may be replaced */
    char *memory;
    long long hits, stores; /* relaxed counters (key_frames_counts) */
};

static size_t
slot_of(const KeyFrames *k, int64_t step)
{
    return (size_t)(((uint64_t)step * 0x9E3779B97F4A7C15ull) >> (64 - k->bits));
}

static char *
frame_of(const KeyFrames *k, size_t slot)
{
    return k->memory + slot * k->slot_bytes;
}

/* Whether a head whose sequence read `sequence` (acquire) holds, whole, the frame at step decoded from
 * the block of this checksum and seed. */
static int
head_holds(const SlotHead *h, uint32_t sequence, int64_t step, uint32_t checksum, uint32_t seed)
{
    return sequence != 0 && sequence % 2 == 0 && __atomic_load_n(&h->step, __ATOMIC_RELAXED) == step
           && __atomic_load_n(&h->checksum, __ATOMIC_RELAXED) == checksum
           && __atomic_load_n(&h->seed, __ATOMIC_RELAXED) == seed;
}

int
key_frames_get(KeyFrames *k, int64_t step, uint32_t checksum, uint32_t seed, char *dst)
{
    size_t slot = slot_of(k, step);
    SlotHead *h = &k->heads[slot];
    uint32_t before = __atomic_load_n(&h->sequence, __ATOMIC_ACQUIRE);
    if (!head_holds(h, before, step, checksum, seed)) {
        return 0;
    }
    memcpy(dst, frame_of(k, slot), k->frame_nbytes);
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the copy read before the sequence is read again */
    if (__atomic_load_n(&h->sequence, __ATOMIC_RELAXED) != before) {
        return 0; /* written meanwhile: the copy may mix two frames */
    }
    __atomic_fetch_add(&k->hits, 1, __ATOMIC_RELAXED);
    return 1;
}

int
key_frames_holds(KeyFrames *k, int64_t step, uint32_t checksum, uint32_t seed)
{
    const SlotHead *h = &k->heads[slot_of(k, step)];
    return head_holds(h, __atomic_load_n(&h->sequence, __ATOMIC_ACQUIRE), step, checksum, seed);
}

int
key_frames_keeps(const KeyFrames *k, int64_t ref_delta)
{
    return k->min_delta > 0 && ref_delta >= k->min_delta;
}

void
key_frames_put(KeyFrames *k, int64_t step, uint32_t checksum, uint32_t seed, const char *frame)
{
    size_t slot = slot_of(k, step);
    SlotHead *h = &k->heads[slot];
    uint32_t sequence = __atomic_load_n(&h->sequence, __ATOMIC_ACQUIRE);
    int64_t held = __atomic_load_n(&h->step, __ATOMIC_RELAXED);
    /* A slot that holds this very frame is not written again: a batch split between threads may decode a
     * frame in two parts, one of which may be copying it out of this slot (a copy that would fail). */
    if (head_holds(h, sequence, step, checksum, seed)) {
        return;
    }
    if (sequence % 2 == 1 || (sequence != 0 && held != step && held > step - k->horizon)
        || !__atomic_compare_exchange_n(&h->sequence, &sequence, sequence + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
        return; /* another thread is writing it */
    }
    __atomic_thread_fence(__ATOMIC_RELEASE); /* the odd sequence seen before any byte changes */
    __atomic_store_n(&h->step, step, __ATOMIC_RELAXED);
    __atomic_store_n(&h->checksum, checksum, __ATOMIC_RELAXED);
    __atomic_store_n(&h->seed, seed, __ATOMIC_RELAXED);
    memcpy(frame_of(k, slot), frame, k->frame_nbytes);
    __atomic_store_n(&h->sequence, sequence + 2, __ATOMIC_RELEASE);
    __atomic_fetch_add(&k->stores, 1, __ATOMIC_RELAXED);
}

static void
key_frames_destroy(PyObject *capsule)
{
    KeyFrames *k = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (k != NULL) {
        free(k->heads);
        free(k->memory);
        PyMem_Free(k);
    }
}

KeyFrames *
key_frames_from(PyObject *capsule, int *error)
{
    *error = 0;
    if (capsule == Py_None) {
        return NULL;
    }
    if (!PyCapsule_IsValid(capsule, CAPSULE_NAME)) {
        PyErr_Format(PyExc_TypeError, "keys must be None or what key_frames() made; got %s", Py_TYPE(capsule)->tp_name);
        *error = 1;
        return NULL;
    }
    return PyCapsule_GetPointer(capsule, CAPSULE_NAME);
}

PyObject *
py_key_frames(PyObject *module, PyObject *args)
{
    (void)module;
    Py_ssize_t frame_nbytes, slots;
    long long min_delta = 0, horizon = 0;
    if (!PyArg_ParseTuple(args, "nn|LL:key_frames", &frame_nbytes, &slots, &min_delta, &horizon)) {
        return NULL;
    }
    int bits = 0;
    while (bits < 30 && ((Py_ssize_t)1 << bits) < slots) {
        bits++;
    }
    if (frame_nbytes < 1 || frame_nbytes > INT_MAX / 8 || slots < 2 || ((Py_ssize_t)1 << bits) != slots
        || min_delta < 0 || horizon < 0) {
        PyErr_Format(PyExc_ValueError, "key_frames: frame_nbytes is %zd, slots %zd, min_delta %lld and horizon %lld; "
                     "expected 1 to %d bytes, a power of two from 2 to 2**30 slots, min_delta >= 0 and horizon >= 0",
                     frame_nbytes, slots, min_delta, horizon, INT_MAX / 8);
        return NULL;
    }
    KeyFrames *k = PyMem_Calloc(1, sizeof(KeyFrames));
    if (k == NULL) {
        return PyErr_NoMemory();
    }
    k->frame_nbytes = (size_t)frame_nbytes;
    k->slot_bytes = ((size_t)frame_nbytes + 63) & ~(size_t)63;
    k->bits = bits;
    k->min_delta = min_delta;
    k->horizon = horizon;
    k->heads = calloc((size_t)slots, sizeof(SlotHead));
    k->memory = calloc((size_t)slots, k->slot_bytes); /* its pages taken as slots fill */
    PyObject *capsule = k->memory == NULL || k->heads == NULL ? NULL : PyCapsule_New(k, CAPSULE_NAME, key_frames_destroy);
    if (capsule == NULL) {
        free(k->heads);
        free(k->memory);
        PyMem_Free(k);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    return capsule;
}

PyObject *
py_key_frames_counts(PyObject *module, PyObject *arg)
{
    (void)module;
    int error;
    KeyFrames *k = key_frames_from(arg, &error);
    if (k == NULL) {
        if (!error) {
            PyErr_SetString(PyExc_TypeError, "key_frames_counts: expected what key_frames() made; got None");
        }
        return NULL;
    }
    return Py_BuildValue("(LL)", __atomic_load_n(&k->hits, __ATOMIC_RELAXED), __atomic_load_n(&k->stores, __ATOMIC_RELAXED));
}

/* The capsule's key frames and a buffer of their size, parsed for key_frames_get and key_frames_put. */
static KeyFrames *
slot_arguments(PyObject *args, const char *format, int64_t *step, uint32_t *checksum, uint32_t *seed,
               Py_buffer *frame)
{
    PyObject *capsule;
    long long step_arg;
    unsigned long checksum_arg, seed_arg;
    if (!PyArg_ParseTuple(args, format, &capsule, &step_arg, &checksum_arg, &seed_arg, frame)) {
        return NULL;
    }
    int error;
    KeyFrames *k = key_frames_from(capsule, &error);
    if (k == NULL || (size_t)frame->len != k->frame_nbytes) {
        if (k == NULL && !error) {
            PyErr_SetString(PyExc_TypeError, "expected what key_frames() made; got None");
        }
        else if (k != NULL) {
            PyErr_Format(PyExc_ValueError, "expected a frame buffer of %zu bytes; got %zd", k->frame_nbytes, frame->len);
        }
        PyBuffer_Release(frame);
        return NULL;
    }
    *step = step_arg, *checksum = (uint32_t)checksum_arg, *seed = (uint32_t)seed_arg;
    return k;
}

PyObject *
py_key_frames_get(PyObject *module, PyObject *args)
{
    (void)module;
    int64_t step;
    uint32_t checksum, seed;
    Py_buffer out;
    KeyFrames *k = slot_arguments(args, "OLkkw*:key_frames_get", &step, &checksum, &seed, &out);
    if (k == NULL) {
        return NULL;
    }
    int found = key_frames_get(k, step, checksum, seed, out.buf);
    PyBuffer_Release(&out);
    return PyBool_FromLong(found);
}

PyObject *
py_key_frames_put(PyObject *module, PyObject *args)
{
    (void)module;
    int64_t step;
    uint32_t checksum, seed;
    Py_buffer frame;
    KeyFrames *k = slot_arguments(args, "OLkky*:key_frames_put", &step, &checksum, &seed, &frame);
    if (k == NULL) {
        return NULL;
    }
    key_frames_put(k, step, checksum, seed, frame.buf);
    PyBuffer_Release(&frame);
    Py_RETURN_NONE;
}
