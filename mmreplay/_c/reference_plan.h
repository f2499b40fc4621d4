/* The order in which a batch of reference-compressed frames decodes (mmreplay/frames/reference_codec.py):
 * each frame after the frame it references, each reference decoded once. */
#ifndef MMREPLAY_REFERENCE_PLAN_H
#define MMREPLAY_REFERENCE_PLAN_H

#include <Python.h>

#include <stdint.h>

/* plan()'s work on a checked chain (int64[width][n], as plan() takes it): the entries in order of first
 * appearance (requested frames, then references row by row), then sorted by level, stably, into steps,
 * refs and rows (n * (width - 1) items each). Returns m; -1 when out of memory, -2 on an internal error
 * (neither sets a Python error). Needs the GIL (PyMem_Malloc). */
Py_ssize_t reference_plan_entries(const int64_t *chain, Py_ssize_t n, Py_ssize_t width, int64_t *steps, int64_t *refs,
                                  int64_t *rows);

/* The deepest chain reference_plan_follow follows. */
#define REFERENCE_PLAN_MAX_DEPTH 64

/* Where a frame's reference lies, for reference_plan_follow: reference(source, step) is the frame's
 * step minus its reference's (0: a key frame), read from wherever the frames are recorded (a frame
 * ring's table); prefetch(source, step) starts fetching what reference() will read for step. */
typedef struct {
    int64_t (*reference)(const void *source, int64_t step);
    void (*prefetch)(const void *source, int64_t step);
    const void *source;
} ReferenceLookup;

/* reference_plan_entries' plan of the n frames at requested, their chains followed through lookup
 * instead of given: each distinct frame's reference read once, a round of the batch's chains at a time
 * (the next round's frames prefetched as they are listed), so that a batch of stacks, whose frames
 * share most of their references, reads each once, and the lookups' cache misses overlap. The entries
 * reference_plan_entries would list for the same chains, ordered by level as it orders them (ties by
 * first listing, here round by round rather than chain by chain). steps, refs and rows: capacity items
 * each. Returns m; -1 when out of memory;
 * -3 when a step is negative, a chain leads before step 0 or does not reach a key frame within depth
 * references (a damaged table, or frames overwritten since), or the plan would list more than capacity
 * entries (at least n; n * (depth + 1) always suffices). depth at most REFERENCE_PLAN_MAX_DEPTH.
 * Needs the GIL (PyMem_Malloc); sets no Python error. */
Py_ssize_t reference_plan_follow(const ReferenceLookup *lookup, const int64_t *requested, Py_ssize_t n,
                                 Py_ssize_t depth, Py_ssize_t capacity, int64_t *steps, int64_t *refs, int64_t *rows);

/* plan(chain, width, entries) -> int
 *   chain:   int64[width][n]: chain[0] the requested frame steps, chain[k + 1][i] the reference of
 *            chain[k][i], a key frame being its own reference; chain[width - 1] == chain[width - 2]
 *   entries: int64[3][n * (width - 1)] output: steps, refs, rows as decode() takes them
 * Lists each requested frame (repeats included) and each reference not requested (once), ordered by
 * level (how many references lie between the frame and its key frame: key frames first) and then by
 * first appearance: the order decode() needs. Returns the number of entries m; rows[i] is the requested
 * row i for a requested frame and n, n + 1, ... for the references added, in order of first appearance.
 * Raises ValueError when chain is not such a table. */
PyObject *py_plan(PyObject *module, PyObject *args);

#define REFERENCE_PLAN_METHODS                                                                                     \
    {"plan", py_plan, METH_VARARGS,                                                                                \
     "plan(chain, width, entries) -> int\n\n"                                                                      \
     "List requested frames and their references in decode order (see reference_plan.h)."},

#endif
