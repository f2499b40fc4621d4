/* The hot loops of mmreplay.sampling.sum_tree.SumTree, one C call per batch.
 *
 * The numpy code in mmreplay/sampling/sum_tree.py is the fallback and the specification: these loops
 * make the same IEEE double operations on the same operands in an order that yields the same bits, so
 * the two give identical trees and find identical leaves (tests/test_sum_tree.py compares them bit for
 * bit). Only additions, subtractions and comparisons of doubles occur (nothing an FMA could contract),
 * and the build refuses a platform that evaluates doubles in wider precision (x87), where the optional
 * extension is then skipped.
 *
 * The node arrays are C-contiguous, aligned float64 buffers of 2 * size nodes in heap order (node 1
 * the root, children 2i and 2i + 1, leaf j at node size + j, size a power of two), possibly memory
 * maps of a file. sum_tree.py checks their dtype; here the lengths and alignment are checked.
 *
 * The GIL is released only for large batches: for a batch of 32 the loops take a few microseconds,
 * and a thread that lets the GIL go may wait a whole switch interval (5 ms) to get it back from a
 * busy thread (the prefetcher samples while the learner runs). */
#ifndef MMREPLAY_SUM_TREE_H
#define MMREPLAY_SUM_TREE_H

#include <Python.h>

#include <stdint.h>

/* A node array: its nodes and its size (leaves, a power of two). */
typedef struct {
    double *nodes;
    Py_ssize_t size;
    int depth; /* levels below the root: size == 1 << depth */
} Tree;

/* The tree of a buffer of 2 * size float64 nodes (size a power of two), or -1 with an error set. */
int parse_tree(const Py_buffer *view, const char *name, Tree *tree);

/* Both trees (sums and minimums, of one size), or -1 with an error set. */
int parse_pair(Py_buffer *sums_view, Py_buffer *minimums_view, Tree *tree);

/* The number of 8-byte items of an aligned batch argument, or -1 with an error set. */
Py_ssize_t parse_items(const Py_buffer *view, const char *name);

/* The leaf of each of targets[0:n] into out, as py_find finds it; cumulative has room for 2^top + 1
 * doubles. */
void find_all(const Tree *tree, int top, double *cumulative, const double *targets, int64_t *out, Py_ssize_t n);

/* Leaves indices[i] set to values[i] (the last of repeats wins; each index in [0, size)) and their
 * ancestors recomputed, as py_set does; the tree settled before. */
void set_all(const Tree *tree, double *minimums, const int64_t *indices, const double *values, Py_ssize_t n);

/* find(sums, targets, out, top_level) -> None
 *   For each float64 target, the leaf (an int64 written to out) that SumTree.find's numpy code finds:
 *   cumulative sums of the 2^top nodes of the top level, added one after the other as np.cumsum does,
 *   searched as np.searchsorted(side="right") does, then one comparison per level below; a target that
 *   ends in an empty leaf takes the guarded descent from the root (SumTree._find_guarded). */
PyObject *py_find(PyObject *module, PyObject *args);

/* set(sums, minimums, indices, values) -> None
 *   Leaves indices[i] (int64, each in [0, size)) to values[i] (the last of repeats wins) and every
 *   ancestor of them recomputed from its two children, up to the root. Nothing is written when an
 *   index is out of range (IndexError). */
PyObject *py_set(PyObject *module, PyObject *args);

/* settle(sums, minimums, start, stop) -> None
 *   Every ancestor of leaves [start, stop) recomputed from its two children, up to the root. */
PyObject *py_settle(PyObject *module, PyObject *args);

#define SUM_TREE_METHODS                                                                                           \
    {"find", py_find, METH_VARARGS,                                                                                \
     "find(sums, targets, out, top_level): the leaf of each target, as SumTree.find's numpy code finds it."},      \
    {"set", py_set, METH_VARARGS,                                                                                  \
     "set(sums, minimums, indices, values): set leaves (the last of repeats wins) and recompute their ancestors."}, \
    {"settle", py_settle, METH_VARARGS,                                                                            \
     "settle(sums, minimums, start, stop): recompute the ancestors of leaves [start, stop)."},

#endif
