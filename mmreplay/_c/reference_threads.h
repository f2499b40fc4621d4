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

/* reference_runner on up to threads threads: a changed-rows plan by reference_decode_inherited; else, or
 * where that declines, one tree a task with its references in scratch rows, or in order on the calling
 * thread when threads < 2, the plan is small, or the tree lists cannot be allocated. */
Py_ssize_t reference_decode_on_threads(const ReferencePlan *plan, int threads);

/* A changed-rows plan (format version 5) decoded one tree a task, without scratch rows: a reference
 * that no row of out asked for is decoded into the out row of one of its dependents, its heir, which
 * then decodes in place over it, writing only its changed rows, after the reference's other dependents
 * have copied it. A batch then writes each requested frame's row about once, as plain frames do,
 * instead of every reference and every frame whole. Returns -1 or the first entry that fails, as
 * reference_decode_in_order; -2 when the plan is not of changed rows, lists a reference no entry
 * depends on, or memory runs out (nothing decoded: the caller takes another path). */
Py_ssize_t reference_decode_inherited(const ReferencePlan *plan, int threads);

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
