/* A batch of a reference store's frames decoded (mmreplay/frames/reference_ring.py, wire.py): each
 * requested frame rebuilt in its own row of out from its nearest frame already decoded by the call,
 * a frame requested before it (its row) or its group's key frame, by applying the dependent frames
 * between them in place, oldest first (codec/reference_frames.h). Nothing is planned ahead: a frame's
 * chain is followed back through its references until it meets one of those. Each task of the call
 * rebuilds a run of consecutive rows (whole stacks of `columns` frames) in memory of its own, keeping
 * the last key frame it decoded, so the threads never wait on each other; a frame two tasks need is
 * rebuilt by both. The frames are found through a frame table (frame steps) or as blocks of an encoded
 * batch (their indices). */
#ifndef MMREPLAY_REFERENCE_READS_H
#define MMREPLAY_REFERENCE_READS_H

#include <Python.h>

#include <stdint.h>

#include "codec/reference_frames.h"
#include "ring/frame_table.h"

/* The block of one frame, checked against its CRC: its bytes, and its reference's key (-1: a key frame). */
typedef struct {
    const char *source;
    int length;
    int64_t reference;
} ReferenceBlock;

/* Where a call's frames are: 0 with *block filled, or nonzero when the frame at key is not good (out of
 * range, failing its CRC, a reference that cannot be one). Any thread, without the GIL. */
typedef int (*reference_locate)(const void *frames, int64_t key, ReferenceBlock *block);

typedef struct {
    reference_locate locate;
    const void *frames;
    const int64_t *keys; /* the requested frames' keys, a row each */
    Py_ssize_t n, columns;
    char *out; /* n rows of shape.frame_nbytes */
    const ReferenceShape *shape;
    int depth; /* the longest chain a frame may have: a longer one is damage */
} ReferenceRead;

/* Rebuilds every requested frame into its row on up to `threads` threads (call with the GIL released):
 * -1 when all are good, else the smallest row whose frame (or a frame it needs) is not; -2 when memory
 * ran out. */
Py_ssize_t reference_read(const ReferenceRead *read, int threads);

/* reference_read of the frames at steps through a ring's table (ring_parse'd, views acquired near the
 * frames first): 0 when every frame is good, 1 when one is not or its chain reaches a view not
 * acquired (the caller's general path names the frame), -1 with a Python error. The GIL is released. */
int reference_read_table(RingArgument *ring, const int64_t *steps, Py_ssize_t n, Py_ssize_t columns, char *out,
                         int threads);

/* decode_referenced(views, blocks, references, wanted, out, shape, threads) -> int
 *   An encoded batch's frames (wire.py): blocks as decode() takes them, references (int64[m]) each block's
 *   reference's index (an earlier block), or -1 for a key frame; wanted (int64[n]) the blocks whose
 *   frames go to out's n rows; shape (frame_nbytes, row_nbytes, unit, depth). -1 when all are good, else
 *   the first row whose frame (or a frame it needs) is not. */
PyObject *py_decode_referenced(PyObject *module, PyObject *args);

#define REFERENCE_READS_METHODS                                                                                    \
    {"decode_referenced", py_decode_referenced, METH_VARARGS,                                                      \
     "decode_referenced(views, blocks, references, wanted, out, shape, threads) -> int\n\n"                      \
     "Decode the wanted frames of blocks that reference each other into out; -1 when all are good, else the\n"     \
     "first bad row."},

#endif
