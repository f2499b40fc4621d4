/* A prioritized batch in one call each: see priority_batch.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "sampling/bit_generator.h"
#include "sampling/priority_batch.h"
#include "sampling/sum_tree.h"

/* Batches up to this many steps keep their scratch arrays on the stack. */
#define STACK_ITEMS 256

/* numpy's int64 a % b for b > 0 (the sign of b), in numpy's wrapping int64 arithmetic. */
static inline int64_t
floor_mod(int64_t a, int64_t b)
{
    int64_t r = a % b;
    return r < 0 ? r + b : r;
}

/* The step of slot `leaf`, counting from first_step: numpy's steps -= first; steps %= slots; steps += first. */
static inline int64_t
step_of_slot(int64_t leaf, int64_t first_step, int64_t slots)
{
    int64_t offset = (int64_t)((uint64_t)leaf - (uint64_t)first_step);
    return (int64_t)((uint64_t)floor_mod(offset, slots) + (uint64_t)first_step);
}

static int
check_slots(long long slots, const Tree *tree)
{
    if (slots < 1 || slots > tree->size) {
        PyErr_Format(PyExc_ValueError, "slots is %lld; expected 1 to %zd (the tree's leaves)", slots, tree->size);
        return -1;
    }
    return 0;
}

PyObject *
py_draw(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *bit_generator, *capsule = NULL, *result = NULL;
    Py_buffer sums_view, out_view;
    int top;
    long long first_step, slots;
    if (!PyArg_ParseTuple(args, "Oy*iLLw*:draw", &bit_generator, &sums_view, &top, &first_step, &slots, &out_view)) {
        return NULL;
    }
    double stack_targets[STACK_ITEMS], *targets = stack_targets, *cumulative = NULL;
    Tree tree;
    BitGen *bitgen = bit_generator_open(bit_generator, &capsule);
    Py_ssize_t n = bitgen == NULL ? -1 : parse_items(&out_view, "out");
    if (n < 0 || parse_tree(&sums_view, "sums", &tree) < 0 || check_slots(slots, &tree) < 0) {
        goto done;
    }
    if (top < 0 || top > tree.depth) {
        PyErr_Format(PyExc_ValueError, "top_level must be in [0, %d] for %zd leaves; got %d", tree.depth, tree.size,
                     top);
        goto done;
    }
    double total = tree.nodes[1];
    if (!(total > 0)) {
        PyErr_SetString(PyExc_ValueError, "cannot search a sum tree whose leaves are all empty");
        goto done;
    }
    if (n > STACK_ITEMS && (targets = PyMem_Malloc((size_t)n * sizeof(double))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if ((cumulative = PyMem_Malloc((((size_t)1 << top) + 1) * sizeof(double))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        targets[i] = bitgen->next_double(bitgen->state) * total; /* rng.random(n), then *= total */
    }
    int64_t *steps = (int64_t *)out_view.buf;
    find_all(&tree, top, cumulative, targets, steps, n);
    for (Py_ssize_t i = 0; i < n; i++) {
        steps[i] = step_of_slot(steps[i], first_step, slots);
    }
    result = Py_NewRef(Py_None);
done:
    if (targets != stack_targets) {
        PyMem_Free(targets);
    }
    PyMem_Free(cumulative);
    Py_XDECREF(capsule);
    PyBuffer_Release(&sums_view);
    PyBuffer_Release(&out_view);
    return result;
}

PyObject *
py_weights(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer sums_view, minimums_view, steps_view, out_view;
    long long slots;
    double beta;
    if (!PyArg_ParseTuple(args, "y*y*y*Ldw*:weights", &sums_view, &minimums_view, &steps_view, &slots, &beta,
                          &out_view)) {
        return NULL;
    }
    PyObject *result = NULL;
    Tree tree;
    Py_ssize_t n = parse_items(&steps_view, "steps");
    if (n < 0 || parse_pair(&sums_view, &minimums_view, &tree) < 0 || check_slots(slots, &tree) < 0) {
        goto done;
    }
    if (out_view.len != n * (Py_ssize_t)sizeof(float) || (uintptr_t)out_view.buf % sizeof(float) != 0) {
        PyErr_Format(PyExc_ValueError, "out has %zd bytes; expected %zd, an aligned float32 per step", out_view.len,
                     n * (Py_ssize_t)sizeof(float));
        goto done;
    }
    const int64_t *steps = (const int64_t *)steps_view.buf;
    const double *leaves = tree.nodes + tree.size;
    double minimum = ((const double *)minimums_view.buf)[1], exponent = -beta;
    float *out = (float *)out_view.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = (float)pow(leaves[floor_mod(steps[i], slots)] / minimum, exponent); /* astype rounds to nearest */
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&sums_view);
    PyBuffer_Release(&minimums_view);
    PyBuffer_Release(&steps_view);
    PyBuffer_Release(&out_view);
    return result;
}

PyObject *
py_update(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer sums_view, minimums_view, steps_view, priorities_view;
    long long first_step, stop_step, slots, added = -1;
    double alpha, epsilon;
    if (!PyArg_ParseTuple(args, "w*w*y*y*(LLL)(dd)|L:update", &sums_view, &minimums_view, &steps_view,
                          &priorities_view, &first_step, &stop_step, &slots, &alpha, &epsilon, &added)) {
        return NULL;
    }
    PyObject *result = NULL;
    int64_t stack_slots[STACK_ITEMS], *leaf_slots = stack_slots;
    double stack_leaves[STACK_ITEMS], *leaves = stack_leaves;
    Tree tree;
    Py_ssize_t n = parse_items(&steps_view, "steps");
    if (n < 0 || parse_items(&priorities_view, "priorities") < 0 || parse_pair(&sums_view, &minimums_view, &tree) < 0
        || check_slots(slots, &tree) < 0) {
        goto done;
    }
    if (priorities_view.len != steps_view.len) {
        PyErr_Format(PyExc_ValueError, "priorities has %zd items; expected %zd, one per step", priorities_view.len / 8,
                     n);
        goto done;
    }
    if (n > STACK_ITEMS) {
        leaf_slots = PyMem_Malloc((size_t)n * sizeof(int64_t));
        leaves = PyMem_Malloc((size_t)n * sizeof(double));
        if (leaf_slots == NULL || leaves == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    const int64_t *steps = (const int64_t *)steps_view.buf;
    const double *priorities = (const double *)priorities_view.buf;
    for (Py_ssize_t i = 0; added >= 0 && i < n; i++) {
        /* The store's checks, before anything is written: a step never added, or a priority that is not
         * a finite number >= 0, and the caller checks again to name it. */
        if (steps[i] < 0 || steps[i] >= added || !(priorities[i] >= 0 && priorities[i] <= DBL_MAX)) {
            result = Py_NewRef(Py_False);
            goto done;
        }
    }
    Py_ssize_t kept = 0;
    double largest = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (steps[i] < first_step || steps[i] >= stop_step) {
            continue; /* evicted since it was sampled */
        }
        double priority = priorities[i];
        if (kept == 0 || (largest == largest && (priority != priority || priority > largest))) {
            largest = priority; /* numpy's max: NaN once one is NaN */
        }
        leaf_slots[kept] = floor_mod(steps[i], slots);
        leaves[kept] = pow(priority + epsilon, alpha);
        kept++;
    }
    if (kept == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    set_all(&tree, (double *)minimums_view.buf, leaf_slots, leaves, kept);
    result = PyFloat_FromDouble(largest);
done:
    if (leaf_slots != stack_slots) {
        PyMem_Free(leaf_slots);
    }
    if (leaves != stack_leaves) {
        PyMem_Free(leaves);
    }
    PyBuffer_Release(&sums_view);
    PyBuffer_Release(&minimums_view);
    PyBuffer_Release(&steps_view);
    PyBuffer_Release(&priorities_view);
    return result;
}
