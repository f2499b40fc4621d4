/* Reference frames decoded on the pool's threads, one tree of references per task: see
 * reference_threads.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "reference_threads.h"
#include "work_pool.h"

/* Below this many entries a batch decodes in order on the calling thread. */
#define THREADED_MIN_ENTRIES 32

typedef struct {
    const ReferencePlan *plan;
    const Py_ssize_t *order;  /* the entries grouped by tree, each tree's in plan order */
    const Py_ssize_t *starts; /* tree t's entries: order[starts[t] .. starts[t + 1]) */
    Py_ssize_t bad;           /* the smallest entry that failed so far (plan->m: none), updated atomically */
} TreeJob;

static void
note_bad(TreeJob *job, Py_ssize_t i)
{
    Py_ssize_t seen = __atomic_load_n(&job->bad, __ATOMIC_RELAXED);
    while (i < seen && !__atomic_compare_exchange_n(&job->bad, &seen, i, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

/* One tree in plan order, stopping at its first failure: the entries after it in the tree may depend on
 * it, and the plan lists each after it, so the smallest failure over all trees is the first in order. */
static void
tree_task(void *context, Py_ssize_t tree)
{
    TreeJob *job = context;
    for (Py_ssize_t k = job->starts[tree]; k < job->starts[tree + 1]; k++) {
        Py_ssize_t i = job->order[k];
        if (!reference_entry_decode(job->plan, i)) {
            note_bad(job, i);
            return;
        }
    }
}

Py_ssize_t
reference_decode_on_threads(const ReferencePlan *plan, int threads)
{
    Py_ssize_t m = plan->m;
    if (threads < 2 || m < THREADED_MIN_ENTRIES) {
        return reference_decode_in_order(plan, 1);
    }
    /* tree[i]: the number of entry i's key frame among the key frames (refs[i] < i: checked), then the
     * entries counted per tree and grouped by tree, each tree's in plan order. */
    Py_ssize_t *tree = PyMem_RawMalloc((size_t)m * sizeof(Py_ssize_t));
    Py_ssize_t *order = PyMem_RawMalloc((size_t)m * sizeof(Py_ssize_t));
    Py_ssize_t *starts = PyMem_RawCalloc((size_t)m + 1, sizeof(Py_ssize_t));
    if (tree == NULL || order == NULL || starts == NULL) {
        PyMem_RawFree(tree);
        PyMem_RawFree(order);
        PyMem_RawFree(starts);
        return reference_decode_in_order(plan, 1);
    }
    Py_ssize_t trees = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        tree[i] = plan->refs[i] < 0 ? trees++ : tree[plan->refs[i]];
        starts[tree[i] + 1]++;
    }
    for (Py_ssize_t t = 0; t < trees; t++) {
        starts[t + 1] += starts[t];
    }
    for (Py_ssize_t i = 0; i < m; i++) { /* tree[i] becomes the next free place in its tree */
        Py_ssize_t t = tree[i];
        order[starts[t]++] = i;
    }
    for (Py_ssize_t t = trees; t > 0; t--) { /* starts[t] moved to the end of tree t: shift back */
        starts[t] = starts[t - 1];
    }
    starts[0] = 0;
    TreeJob job = {plan, order, starts, m};
    if (trees > 1) {
        pool_run(trees, threads, tree_task, &job);
    }
    else {
        tree_task(&job, 0);
    }
    PyMem_RawFree(tree);
    PyMem_RawFree(order);
    PyMem_RawFree(starts);
    return job.bad < m ? job.bad : -1;
}

PyObject *
py_reference_decode_threads(PyObject *module, PyObject *args)
{
    (void)module;
    return reference_decode_call(args, reference_decode_on_threads);
}
