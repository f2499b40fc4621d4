/* A batch of reference-compressed frames decoded on the pool's threads, one tree of references per
 * task: a key frame and every entry that depends on it, directly or through others, decoded in plan
 * order by one thread. Trees share no frame, so the threads never wait on each other (decoding level by
 * level instead costs a wait for every thread at each level: 5 levels for the default scheme). Each
 * reference is decoded once (the plan lists it once, reference_plan.h). The result is
 * reference_decode_in_order's: -1, or the smallest entry that fails (every entry before it decoded
 * right, so it failed as it would in order). */
#ifndef MMREPLAY_REFERENCE_THREADS_H
#define MMREPLAY_REFERENCE_THREADS_H

#include <Python.h>

#include "reference_decode.h"

/* reference_runner on up to threads threads; in order on the calling thread when threads < 2, the plan
 * is small, or the tree lists cannot be allocated. */
Py_ssize_t reference_decode_on_threads(const ReferencePlan *plan, int threads);

/* reference_decode(views, segments, offsets, lengths, checksums, seeds, refs, rows, out, scratch,
 *                  frame_nbytes, row_nbytes=0, threads=1) -> int
 * mmreplay._lz4ref.decode's arguments and result (reference_decode.h), on up to threads threads. */
PyObject *py_reference_decode_threads(PyObject *module, PyObject *args);

#define REFERENCE_THREADS_METHODS                                                                                  \
    {"reference_decode", py_reference_decode_threads, METH_VARARGS,                                                \
     "reference_decode(views, segments, offsets, lengths, checksums, seeds, refs, rows, out, scratch,\n"           \
     "                 frame_nbytes, row_nbytes=0, threads=1) -> int\n\n"                                          \
     "mmreplay._lz4ref.decode on up to threads of the pool's threads, a tree of references a task; -1 when\n"      \
     "all are good, else the first bad entry."},

#endif
