/* Reference frames decoded on the pool's threads, level by level: see reference_threads.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "reference_threads.h"
#include "work_pool.h"

/* Entries a task decodes: a few frames, so that a late helper delays little (work_pool.h). */
#define ENTRIES_PER_TASK 4
/* Below this many entries a batch decodes in order on the calling thread. */
#define THREADED_MIN_ENTRIES 32

typedef struct {
    const ReferencePlan *plan;
    const Py_ssize_t *order; /* this level's entries */
    Py_ssize_t count;
    Py_ssize_t bad; /* the smallest entry that failed so far (plan->m: none), updated atomically */
} LevelJob;

static void
note_bad(LevelJob *job, Py_ssize_t i)
{
    Py_ssize_t seen = __atomic_load_n(&job->bad, __ATOMIC_RELAXED);
    while (i < seen && !__atomic_compare_exchange_n(&job->bad, &seen, i, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

static void
level_task(void *context, Py_ssize_t number)
{
    LevelJob *job = context;
    Py_ssize_t start = number * ENTRIES_PER_TASK;
    Py_ssize_t stop = start + ENTRIES_PER_TASK < job->count ? start + ENTRIES_PER_TASK : job->count;
    for (Py_ssize_t k = start; k < stop; k++) {
        Py_ssize_t i = job->order[k];
        if (!reference_entry_decode(job->plan, i)) {
            note_bad(job, i);
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
    /* level[i] = level[refs[i]] + 1 (refs[i] < i: checked), then the entries sorted by level, stably. */
    int32_t *level = PyMem_RawMalloc((size_t)m * sizeof(int32_t));
    Py_ssize_t *order = PyMem_RawMalloc((size_t)m * sizeof(Py_ssize_t));
    Py_ssize_t *starts = NULL;
    int32_t levels = 0;
    if (level != NULL && order != NULL) {
        for (Py_ssize_t i = 0; i < m; i++) {
            level[i] = plan->refs[i] < 0 ? 0 : level[plan->refs[i]] + 1;
            levels = level[i] + 1 > levels ? level[i] + 1 : levels;
        }
        starts = PyMem_RawCalloc((size_t)levels + 1, sizeof(Py_ssize_t));
    }
    if (starts == NULL) {
        PyMem_RawFree(level);
        PyMem_RawFree(order);
        return reference_decode_in_order(plan, 1);
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        starts[level[i] + 1]++;
    }
    for (int32_t l = 0; l < levels; l++) {
        starts[l + 1] += starts[l];
    }
    Py_ssize_t *next = PyMem_RawMalloc((size_t)levels * sizeof(Py_ssize_t));
    if (next == NULL) {
        PyMem_RawFree(level);
        PyMem_RawFree(order);
        PyMem_RawFree(starts);
        return reference_decode_in_order(plan, 1);
    }
    for (int32_t l = 0; l < levels; l++) {
        next[l] = starts[l];
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        order[next[level[i]]++] = i;
    }
    LevelJob job = {plan, order, 0, m};
    for (int32_t l = 0; l < levels; l++) {
        job.order = order + starts[l];
        job.count = starts[l + 1] - starts[l];
        Py_ssize_t tasks = (job.count + ENTRIES_PER_TASK - 1) / ENTRIES_PER_TASK;
        if (tasks > 1) {
            pool_run(tasks, threads, level_task, &job);
        }
        else {
            level_task(&job, 0);
        }
    }
    PyMem_RawFree(level);
    PyMem_RawFree(order);
    PyMem_RawFree(starts);
    PyMem_RawFree(next);
    return job.bad < m ? job.bad : -1;
}

PyObject *
py_reference_decode_threads(PyObject *module, PyObject *args)
{
    (void)module;
    return reference_decode_call(args, reference_decode_on_threads);
}
