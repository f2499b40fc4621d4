/* Reference frames decoded on the pool's threads, one tree of references per task: see
 * reference_threads.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "crc32.h"
#include "reference_frame.h"
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

/* *bad becomes i where i is smaller (the tasks of a job note their failures at once). */
static void
note_bad(Py_ssize_t *bad, Py_ssize_t i)
{
    Py_ssize_t seen = __atomic_load_n(bad, __ATOMIC_RELAXED);
    while (i < seen && !__atomic_compare_exchange_n(bad, &seen, i, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
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
            note_bad(&job->bad, i);
            return;
        }
    }
}

Py_ssize_t
reference_decode_on_threads(const ReferencePlan *plan, int threads)
{
    Py_ssize_t m = plan->m;
    if (plan->changed_rows) {
        Py_ssize_t bad = reference_decode_inherited(plan, threads);
        if (bad != -2) {
            return bad;
        }
    }
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

/* A changed-rows plan decoded without scratch rows (reference_decode_inherited): each entry's frame in a
 * buffer, where a reference that no caller's row asked for lives in the row of one of its dependents,
 * its heir, which then decodes in place over it (only its changed rows written) once the reference's
 * other dependents have copied it. */
typedef struct {
    const ReferencePlan *plan;
    const Py_ssize_t *roots;        /* each tree's key frame */
    const Py_ssize_t *first_child;  /* -1: none; then next_sibling, in index order */
    const Py_ssize_t *next_sibling;
    const Py_ssize_t *heir;         /* the dependent that inherits a reference's buffer; -1: none */
    char *const *buffer;            /* where each entry's frame is decoded */
    const Py_ssize_t *stack_start;  /* tree t's depth-first stack: stack[stack_start[t] .. stack_start[t + 1]) */
    Py_ssize_t *stack;
    Py_ssize_t bad;
} InheritJob;

static int
entry_decode_into(const ReferencePlan *p, Py_ssize_t i, char *dst, const char *ref)
{
    const char *src = p->sources[i];
    int length = (int)p->lengths[i];
    if (src == NULL || frame_crc32(p->seeds[i], (const unsigned char *)src, (size_t)length) != p->checksums[i]) {
        return 0;
    }
    if (p->keys == NULL) {
        return reference_frame_decode(src, length, dst, ref, p->frame_nbytes, p->row_nbytes, 1);
    }
    if (ref == NULL) { /* a key frame, or a frame the plan takes from a slot: copied from it where it is */
        if (key_frames_get(p->keys, p->steps[i], p->checksums[i], p->seeds[i], dst)) {
            return 1;
        }
        if (p->cached[i] || !reference_frame_decode(src, length, dst, NULL, p->frame_nbytes, p->row_nbytes, 1)) {
            return 0; /* lost meanwhile (its references are not in the plan), or bad */
        }
        key_frames_put(p->keys, p->steps[i], p->checksums[i], p->seeds[i], dst);
        return 1;
    }
    if (!reference_frame_decode(src, length, dst, ref, p->frame_nbytes, p->row_nbytes, 1)) {
        return 0;
    }
    Py_ssize_t parent = p->refs[i]; /* kept too: a frame of the tree's first levels, against a key frame */
    if (p->refs[parent] < 0 && !p->cached[parent] && key_frames_keeps(p->keys, p->steps[i] - p->steps[parent])) {
        key_frames_put(p->keys, p->steps[i], p->checksums[i], p->seeds[i], dst);
    }
    return 1;
}

/* One tree, depth first: an entry, then its dependents' subtrees, its heir's last (the heir may write
 * over the entry's frame). An entry that fails is noted and its subtree skipped: the smallest entry noted
 * over all trees is then the first that fails in plan order (every entry before it, its references
 * included, decodes). */
static void
inherit_task(void *context, Py_ssize_t tree)
{
    InheritJob *job = context;
    const ReferencePlan *p = job->plan;
    Py_ssize_t root = job->roots[tree], *stack = job->stack + job->stack_start[tree], top = 0;
    stack[top++] = root;
    while (top > 0) {
        Py_ssize_t i = stack[--top], ref = p->refs[i];
        if (!entry_decode_into(p, i, job->buffer[i], ref < 0 ? NULL : job->buffer[ref])) {
            note_bad(&job->bad, i);
            continue;
        }
        if (job->heir[i] >= 0) {
            stack[top++] = job->heir[i];
        }
        for (Py_ssize_t c = job->first_child[i]; c >= 0; c = job->next_sibling[c]) {
            if (c != job->heir[i]) {
                stack[top++] = c;
            }
        }
    }
}

Py_ssize_t
reference_decode_inherited(const ReferencePlan *plan, int threads)
{
    Py_ssize_t m = plan->m, bad = -2;
    if (!plan->changed_rows) {
        return -2;
    }
    /* roots, first_child, next_sibling, heir, the stacks, each entry's tree and the stacks' starts:
     * Py_ssize_t[m] each (the starts m + 1); buffer: char *[m] */
    size_t count = (size_t)(m > 0 ? m : 1);
    Py_ssize_t *room = PyMem_RawMalloc(count * (7 * sizeof(Py_ssize_t) + sizeof(char *)) + sizeof(Py_ssize_t));
    if (room == NULL) {
        return -2;
    }
    Py_ssize_t *roots = room, *first_child = roots + count, *next_sibling = first_child + count;
    Py_ssize_t *heir = next_sibling + count, *stack = heir + count, *tree = stack + count;
    Py_ssize_t *stack_start = tree + count;
    char **buffer = (char **)(stack_start + count + 1);
    Py_ssize_t trees = 0;
    for (Py_ssize_t i = 0; i < m; i++) { /* an entry's tree is its reference's (refs[i] < i: checked) */
        first_child[i] = -1, heir[i] = -1;
        tree[i] = plan->refs[i] < 0 ? trees : tree[plan->refs[i]];
        if (plan->refs[i] < 0) {
            roots[trees++] = i;
        }
    }
    for (Py_ssize_t t = 0; t <= trees; t++) {
        stack_start[t] = 0;
    }
    for (Py_ssize_t i = 0; i < m; i++) { /* a tree's stack holds at most its entries */
        stack_start[tree[i] + 1]++;
    }
    if (threads > 1) { /* the largest trees first (insertion sort by size: a batch has a few dozen trees),
                        * so that the pool's threads finish together rather than one waiting on the last */
        for (Py_ssize_t t = 1; t < trees; t++) {
            Py_ssize_t root = roots[t], size = stack_start[t + 1], u = t;
            for (; u > 0 && stack_start[u] < size; u--) {
                roots[u] = roots[u - 1];
                stack_start[u + 1] = stack_start[u];
            }
            roots[u] = root;
            stack_start[u + 1] = size;
        }
    }
    for (Py_ssize_t t = 0; t < trees; t++) {
        stack_start[t + 1] += stack_start[t];
    }
    for (Py_ssize_t i = m - 1; i >= 0; i--) { /* children in index order; refs[i] < i: checked */
        Py_ssize_t parent = plan->refs[i];
        if (parent >= 0) {
            next_sibling[i] = first_child[parent];
            first_child[parent] = i;
        }
    }
    /* From the last entry down, so that a dependent's buffer is known before its reference's. A reference
     * no row asked for takes its first dependent's buffer; one without any dependent would decode for
     * nothing, and such a plan (never made by reference_plan.h) takes the scratch rows' path. */
    for (Py_ssize_t i = m - 1; i >= 0; i--) {
        int64_t row = plan->rows[i];
        if (row < plan->n_out) {
            buffer[i] = plan->out + (size_t)row * (size_t)plan->frame_nbytes;
        }
        else if (first_child[i] >= 0) {
            heir[i] = first_child[i];
            buffer[i] = buffer[heir[i]];
        }
        else {
            goto done;
        }
    }
    InheritJob job = {plan, roots, first_child, next_sibling, heir, buffer, stack_start, stack, m};
    if (threads > 1 && trees > 1 && m >= THREADED_MIN_ENTRIES) {
        pool_run(trees, threads, inherit_task, &job);
    }
    else {
        for (Py_ssize_t t = 0; t < trees; t++) {
            inherit_task(&job, t);
        }
    }
    bad = job.bad < m ? job.bad : -1;
done:
    PyMem_RawFree(room);
    return bad;
}

PyObject *
py_reference_decode_threads(PyObject *module, PyObject *args)
{
    (void)module;
    return reference_decode_call(args, reference_decode_on_threads);
}
