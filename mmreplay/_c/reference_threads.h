/* A batch of reference-compressed frames decoded on the pool's threads (work_pool.h), level by level: a
 * key frame is level 0 and a dependent frame one more than its reference, so the frames of one level
 * depend only on frames of lower levels, which are decoded by then. Each reference is decoded once (the
 * plan lists it once, reference_plan.h). The result is reference_decode_in_order's: -1, or the smallest
 * entry that fails (every entry before it decoded right, so it failed as it would in order). */
#ifndef MMREPLAY_REFERENCE_THREADS_H
#define MMREPLAY_REFERENCE_THREADS_H

#include <Python.h>

#include "reference_decode.h"

/* reference_runner on up to threads threads; in order on the calling thread when threads < 2, the plan
 * is small, or the level lists cannot be allocated. */
Py_ssize_t reference_decode_on_threads(const ReferencePlan *plan, int threads);

/* reference_decode(views, segments, offsets, lengths, checksums, seeds, refs, rows, out, scratch,
 *                  frame_nbytes, row_nbytes=0, threads=1) -> int
 * mmreplay._lz4ref.decode's arguments and result (reference_decode.h), on up to threads threads. */
PyObject *py_reference_decode_threads(PyObject *module, PyObject *args);

#define REFERENCE_THREADS_METHODS                                                                                  \
    {"reference_decode", py_reference_decode_threads, METH_VARARGS,                                                \
     "reference_decode(views, segments, offsets, lengths, checksums, seeds, refs, rows, out, scratch,\n"          \
     "                 frame_nbytes, row_nbytes=0, threads=1) -> int\n\n"                                          \
     "mmreplay._lz4ref.decode on up to threads of the pool's threads, level by level; -1 when all are good,\n"   \
     "else the first bad entry."},

#endif
