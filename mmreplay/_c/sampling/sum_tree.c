/* The sum tree's hot loops: see sum_tree.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "sampling/sum_tree.h"

#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0 && FLT_EVAL_METHOD != -1
#error "mmreplay._sumtree needs doubles evaluated in double precision; the numpy sum tree is used instead"
#endif

/* Node visits above which a call lets the GIL go (hundreds of microseconds of work). */
#define RELEASE_GIL_VISITS (1 << 16)

/* np.minimum of two doubles: the first when it is smaller, equal or NaN. */
static inline double
np_minimum(double a, double b)
{
    return (a <= b || a != a) ? a : b;
}

/* numpy's sort order for doubles (NaN last), which np.searchsorted follows. */
static inline int
np_less(double a, double b)
{
    return a < b || (b != b && a == a);
}

int
parse_tree(const Py_buffer *view, const char *name, Tree *tree)
{
    Py_ssize_t count = view->len / (Py_ssize_t)sizeof(double);
    Py_ssize_t size = count / 2;
    if (view->len % (Py_ssize_t)(2 * sizeof(double)) != 0 || size < 1 || (size & (size - 1)) != 0) {
        PyErr_Format(PyExc_ValueError, "%s has %zd bytes; expected 2 * size float64 nodes, size a power of two",
                     name, view->len);
        return -1;
    }
    if ((uintptr_t)view->buf % sizeof(double) != 0) {
        PyErr_Format(PyExc_ValueError, "%s is not aligned to 8 bytes", name);
        return -1;
    }
    tree->nodes = (double *)view->buf;
    tree->size = size;
    tree->depth = 0;
    while (((Py_ssize_t)1 << tree->depth) < size) {
        tree->depth++;
    }
    return 0;
}

Py_ssize_t
parse_items(const Py_buffer *view, const char *name)
{
    if (view->len % 8 != 0 || (uintptr_t)view->buf % 8 != 0) {
        PyErr_Format(PyExc_ValueError, "%s must be an aligned buffer of 8-byte items; got %zd bytes", name,
                     view->len);
        return -1;
    }
    return view->len / 8;
}

/* SumTree._find_guarded for one target: never steps into an empty subtree. Returns a node. */
static Py_ssize_t
find_guarded(const double *sums, int depth, double remaining)
{
    Py_ssize_t node = 1;
    for (int level = 0; level < depth; level++) {
        Py_ssize_t left = 2 * node;
        double left_sum = sums[left];
        int go_right = (remaining >= left_sum && sums[left + 1] > 0) || left_sum <= 0;
        if (go_right) {
            remaining -= left_sum; /* numpy subtracts 0.0 otherwise, which leaves every double as it is */
        }
        node = left + go_right;
    }
    return node;
}

/* Targets (and leaves) handled together: each level's loads of a chunk are independent of one another,
 * so the CPU overlaps their cache misses instead of waiting for one target's descent after another's
 * (the lower levels of a million-leaf tree lie far outside the caches). Every target still makes its
 * own operations in the numpy code's order. */
#define CHUNK 64

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(address) __builtin_prefetch(address)
#else
#define PREFETCH(address) ((void)0)
#endif

/* find for targets[0:n]; cumulative holds the cumulative sums of the top level's nodes. */
static void
find_chunk(const Tree *tree, int top, const double *cumulative, const double *targets, int64_t *out, Py_ssize_t n)
{
    const double *sums = tree->nodes;
    Py_ssize_t width = (Py_ssize_t)1 << top; /* nodes of the top level: nodes width .. 2 width - 1 */
    Py_ssize_t nodes[CHUNK];
    double remaining[CHUNK];
    for (Py_ssize_t i = 0; i < n; i++) {
        /* np.searchsorted(cumulative[1:], target, side="right"), clipped to width - 1: the number of
         * k with cumulative[k + 1] <= target in numpy's order (NaN last), at most width - 1. Those k
         * are a prefix, as cumulative[1:] is sorted in that order (sums of non-negative nodes), so
         * this search agrees with numpy's whatever path each takes. Its length is found one bit at a
         * time; the bits of width - 1 stop it at width - 1. */
        double target = targets[i];
        Py_ssize_t found = 0;
        for (Py_ssize_t step = width >> 1; step > 0; step >>= 1) {
            found += np_less(target, cumulative[found + step]) ? 0 : step;
        }
        remaining[i] = target - cumulative[found];
        nodes[i] = found + width;
    }
    for (int level = top; level < tree->depth; level++) {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t node = nodes[i] << 1;
            double left = sums[node];
            int go_right = remaining[i] >= left;
            /* numpy subtracts where go_right only; x - 0.0 is x for every double, -0.0 and NaN included */
            remaining[i] -= go_right ? left : 0.0;
            nodes[i] = node + go_right;
            if (level + 2 < tree->depth) {
                /* The four grandchildren (32 contiguous bytes): the descent reads two of them after the
                 * children, so their cache miss overlaps this level's next one (~15% faster at 1M). */
                PREFETCH(&sums[4 * nodes[i]]);
            }
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t node = nodes[i];
        if (sums[node] <= 0) { /* rounding carried the target into an empty leaf */
            node = find_guarded(sums, tree->depth, targets[i]);
        }
        out[i] = (int64_t)(node - tree->size);
    }
}

void
find_all(const Tree *tree, int top, double *cumulative, const double *targets, int64_t *out, Py_ssize_t n)
{
    const double *sums = tree->nodes;
    Py_ssize_t width = (Py_ssize_t)1 << top;
    /* np.cumsum into cumulative[1:], after cumulative[0] = 0: the first copied, then one add each. */
    cumulative[0] = 0.0;
    cumulative[1] = sums[width];
    for (Py_ssize_t k = 1; k < width; k++) {
        cumulative[k + 1] = cumulative[k] + sums[width + k];
    }
    for (Py_ssize_t start = 0; start < n; start += CHUNK) {
        Py_ssize_t count = n - start < CHUNK ? n - start : CHUNK;
        find_chunk(tree, top, cumulative, targets + start, out + start, count);
    }
}

PyObject *
py_find(PyObject *module, PyObject *args)
{
    Py_buffer sums_view, targets_view, out_view;
    int top;
    if (!PyArg_ParseTuple(args, "y*y*w*i:find", &sums_view, &targets_view, &out_view, &top)) {
        return NULL;
    }
    PyObject *result = NULL;
    double *cumulative = NULL;
    Tree tree;
    Py_ssize_t n = parse_items(&targets_view, "targets");
    if (n < 0 || parse_tree(&sums_view, "sums", &tree) < 0 || parse_items(&out_view, "out") < 0) {
        goto done;
    }
    if (out_view.len != targets_view.len) {
        PyErr_Format(PyExc_ValueError, "out has %zd bytes; expected %zd, one int64 per target", out_view.len,
                     targets_view.len);
        goto done;
    }
    if (top < 0 || top > tree.depth) {
        PyErr_Format(PyExc_ValueError, "top_level must be in [0, %d] for %zd leaves; got %d", tree.depth, tree.size,
                     top);
        goto done;
    }
    cumulative = PyMem_Malloc(((size_t)1 << top) * sizeof(double) + sizeof(double));
    if (cumulative == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (n * (Py_ssize_t)(tree.depth + 1) >= RELEASE_GIL_VISITS) {
        Py_BEGIN_ALLOW_THREADS
        find_all(&tree, top, cumulative, (const double *)targets_view.buf, (int64_t *)out_view.buf, n);
        Py_END_ALLOW_THREADS
    }
    else {
        find_all(&tree, top, cumulative, (const double *)targets_view.buf, (int64_t *)out_view.buf, n);
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(cumulative);
    PyBuffer_Release(&sums_view);
    PyBuffer_Release(&targets_view);
    PyBuffer_Release(&out_view);
    return result;
}

/* Node node recomputed from its two children: sum left + right, minimum np.minimum(left, right). */
static inline void
recompute(double *sums, double *minimums, Py_ssize_t node)
{
    sums[node] = sums[2 * node] + sums[2 * node + 1];
    minimums[node] = np_minimum(minimums[2 * node], minimums[2 * node + 1]);
}

/* Every leaf is written before any ancestor, and a chunk of paths climbs one level at a time: then the
 * last chunk to pass through a node recomputes it after everything below it is final, so repeats and
 * crossing paths leave each node left + right of its final children, as the numpy code's paths (child +
 * sibling: IEEE addition commutes) and its rebuild of the whole top do. Nodes off the paths keep their
 * values, already left + right of children that did not change (SumTree settles before a set). */
void
set_all(const Tree *tree, double *minimums, const int64_t *indices, const double *values, Py_ssize_t n)
{
    double *sums = tree->nodes;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t node = tree->size + (Py_ssize_t)indices[i];
        double value = values[i];
        sums[node] = value;
        minimums[node] = value > 0 ? value : INFINITY;
    }
    Py_ssize_t nodes[CHUNK];
    for (Py_ssize_t start = 0; start < n; start += CHUNK) {
        Py_ssize_t count = n - start < CHUNK ? n - start : CHUNK;
        for (Py_ssize_t i = 0; i < count; i++) {
            nodes[i] = tree->size + (Py_ssize_t)indices[start + i];
        }
        for (int level = 0; level < tree->depth; level++) {
            for (Py_ssize_t i = 0; i < count; i++) {
                nodes[i] >>= 1;
                recompute(sums, minimums, nodes[i]);
            }
        }
    }
}

int
parse_pair(Py_buffer *sums_view, Py_buffer *minimums_view, Tree *tree)
{
    Tree minimums;
    if (parse_tree(sums_view, "sums", tree) < 0 || parse_tree(minimums_view, "minimums", &minimums) < 0) {
        return -1;
    }
    if (minimums.size != tree->size) {
        PyErr_Format(PyExc_ValueError, "minimums has %zd nodes; expected %zd like sums", 2 * minimums.size,
                     2 * tree->size);
        return -1;
    }
    return 0;
}

PyObject *
py_set(PyObject *module, PyObject *args)
{
    Py_buffer sums_view, minimums_view, indices_view, values_view;
    if (!PyArg_ParseTuple(args, "w*w*y*y*:set", &sums_view, &minimums_view, &indices_view, &values_view)) {
        return NULL;
    }
    PyObject *result = NULL;
    Tree tree;
    Py_ssize_t n = parse_items(&indices_view, "indices");
    if (n < 0 || parse_items(&values_view, "values") < 0 || parse_pair(&sums_view, &minimums_view, &tree) < 0) {
        goto done;
    }
    if (values_view.len != indices_view.len) {
        PyErr_Format(PyExc_ValueError, "values has %zd items; expected %zd, one per index", values_view.len / 8, n);
        goto done;
    }
    const int64_t *indices = (const int64_t *)indices_view.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (indices[i] < 0 || indices[i] >= (int64_t)tree.size) {
            PyErr_Format(PyExc_IndexError, "leaf index %lld is out of range for %zd leaves", (long long)indices[i],
                         tree.size);
            goto done;
        }
    }
    double *minimums = (double *)minimums_view.buf;
    const double *values = (const double *)values_view.buf;
    if (n * (Py_ssize_t)(tree.depth + 1) >= RELEASE_GIL_VISITS) {
        Py_BEGIN_ALLOW_THREADS
        set_all(&tree, minimums, indices, values, n);
        Py_END_ALLOW_THREADS
    }
    else {
        set_all(&tree, minimums, indices, values, n);
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&sums_view);
    PyBuffer_Release(&minimums_view);
    PyBuffer_Release(&indices_view);
    PyBuffer_Release(&values_view);
    return result;
}

/* One level at a time, the parents of the nodes [low, high] of the level below. */
static void
settle_range(const Tree *tree, double *minimums, Py_ssize_t start, Py_ssize_t stop)
{
    double *sums = tree->nodes;
    Py_ssize_t low = tree->size + start, high = tree->size + stop - 1; /* nodes, inclusive */
    while (low > 1) {
        low >>= 1;
        high >>= 1;
        for (Py_ssize_t node = low; node <= high; node++) {
            recompute(sums, minimums, node);
        }
    }
}

PyObject *
py_settle(PyObject *module, PyObject *args)
{
    Py_buffer sums_view, minimums_view;
    Py_ssize_t start, stop;
    if (!PyArg_ParseTuple(args, "w*w*nn:settle", &sums_view, &minimums_view, &start, &stop)) {
        return NULL;
    }
    PyObject *result = NULL;
    Tree tree;
    if (parse_pair(&sums_view, &minimums_view, &tree) < 0) {
        goto done;
    }
    if (start < 0 || stop > tree.size || start >= stop) {
        PyErr_Format(PyExc_ValueError, "leaves [%zd, %zd) are not a non-empty range of the %zd leaves", start, stop,
                     tree.size);
        goto done;
    }
    double *minimums = (double *)minimums_view.buf;
    if (2 * (stop - start) + tree.depth >= RELEASE_GIL_VISITS) {
        Py_BEGIN_ALLOW_THREADS
        settle_range(&tree, minimums, start, stop);
        Py_END_ALLOW_THREADS
    }
    else {
        settle_range(&tree, minimums, start, stop);
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&sums_view);
    PyBuffer_Release(&minimums_view);
    return result;
}
