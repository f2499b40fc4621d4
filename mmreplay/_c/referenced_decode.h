/* Encoded frames that reference each other (an encoded batch of a reference store: mmreplay/frames/
 * referenced_blocks.py) decoded in one call: the requested frames' chains followed through an array of
 * references (reference_plan.h's plan), every entry located in its source's buffer, and the plan decoded
 * as a reference ring's batch is (reference_table.h's reference_plan_decode: the references in rows of
 * out where the blocks are changed rows, no scratch). */
#ifndef MMREPLAY_REFERENCED_DECODE_H
#define MMREPLAY_REFERENCED_DECODE_H

#include <Python.h>

/* referenced_decode(views, segments, offsets, lengths, checksums, seeds, references, requested, out,
 *                   frame_nbytes, row_nbytes, threads) -> int | tuple | None
 *   frames are numbered 0 .. t - 1 across the sources; for frame k: its block lies at offsets[k] of
 *   views[segments[k]] with lengths[k] bytes, checksums[k] and seeds[k] (uint32: CRC-32 and its seed),
 *   references[k] the frame its block is compressed against (an earlier frame, k' < k) or -1
 *   requested: int64[n] frames, repeats allowed, decoded into out's n frames of frame_nbytes
 *   row_nbytes: 0 for dependent blocks of whole frames (format version 4), else a changed-rows row's bytes
 * Returns -1 when every needed block matches its checksum and decodes; (row, frame) of the first that
 * does not (row < n: a requested row; else a frame no row asked for); None when a chain is deeper than
 * the compiled plan follows (64 references: the caller's general path decodes it). ValueError for
 * arrays of other sizes, a reference that is not earlier, a segment outside views or a block outside
 * its view. */
PyObject *py_referenced_decode(PyObject *module, PyObject *args);

#define REFERENCED_DECODE_METHODS                                                                                  \
    {"referenced_decode", py_referenced_decode, METH_VARARGS,                                                      \
     "referenced_decode(views, segments, offsets, lengths, checksums, seeds, references, requested, out,\n"       \
     "                  frame_nbytes, row_nbytes, threads) -> int | tuple | None\n\n"                              \
     "Decode requested frames of encoded blocks that reference each other, each needed block once;\n"             \
     "-1 when all are good, else (row, frame) of the first bad one (see referenced_decode.h)."},

#endif
