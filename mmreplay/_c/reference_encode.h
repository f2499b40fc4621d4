/* A frame compressed against its reference frame (mmreplay/frames/reference_codec.py): its matches may
 * reach back into the reference, as if the reference lay just before it (lz4's "dictionary"), so any
 * lz4 decoder given the reference as dictionary decodes it (LZ4_decompress_safe_usingDict, python-lz4's
 * ``dict=``). Format version 5 compresses only the rows that changed (changed_rows.h); version 4
 * compressed the whole frame. */
#ifndef MMREPLAY_REFERENCE_ENCODE_H
#define MMREPLAY_REFERENCE_ENCODE_H

#include <Python.h>

#include <stddef.h>
#include <stdint.h>

/* A reference frame kept for the frames encoded against it (format version 5, changed rows): a copy of
 * it with room after it for the changed rows of a frame being encoded (2n bytes), and, built at its first
 * use when the frame is sparse, its index (the encoder's table of change points: most of what encoding
 * a sparse frame costs, so kept while the frame is a reference). One thread at a time may encode
 * against it and build its index (reference_encode_apart reads it beside them). Zero-initialized before its
 * first reference_index_init. */
typedef struct {
    uint8_t *bytes;
    size_t n, row;
    int prepared, indexed;
    int32_t *ints; /* the index: its head, then next and run over [0, n) */
    size_t run_start;
} ReferenceIndex;

/* Makes r hold a copy of the n bytes of frame (rows of row bytes), its index not built yet: 0, or -1 when
 * memory ran out. */
int reference_index_init(ReferenceIndex *r, const uint8_t *frame, size_t n, size_t row);
void reference_index_free(ReferenceIndex *r);

/* reference_encode in changed-rows mode against a kept reference. */
Py_ssize_t reference_encode_indexed(const uint8_t *frame, ReferenceIndex *reference, uint8_t *dst);

/* reference_encode_indexed without writing to `reference`, for a reference another thread may be encoding
 * against (or building the index of) at the same time: the frame's rows go after a copy of the reference
 * in this thread's work area, and the reference's index is read where it is built, else built for the
 * copy. The same bytes as reference_encode_indexed; a frame's reference copied (n bytes) more. */
Py_ssize_t reference_encode_apart(const uint8_t *frame, const ReferenceIndex *reference, uint8_t *dst);

/* The most bytes reference_encode writes for a frame of n bytes in rows of row_nbytes. */
size_t reference_encode_bound(size_t n, size_t row_nbytes, int changed_rows);

/* Encodes the n bytes of frame against reference (rows of row_nbytes bytes) into dst (room for
 * reference_encode_bound): with changed_rows, version 5's frame (changed_rows.h), else one lz4 block of
 * the whole frame. Returns its bytes; -1 when memory ran out or the block would not decode back to the
 * frame (a bug: such a block is never returned). Any thread may call it, without the GIL: each keeps its
 * own work area. */
Py_ssize_t reference_encode(const uint8_t *frame, const uint8_t *reference, size_t n, size_t row_nbytes,
                            int changed_rows, uint8_t *dst);

/* encode(frame, reference, row_nbytes) -> bytes
 *   A greedy lz4 block (one step of lazy matching) of ``frame`` against ``reference`` (same length;
 *   row_nbytes: bytes per image row, for the offsets that mean "one row away"). Atari frames change in
 *   a few small places between nearby frames, so nearly every match is one of a few known offsets or
 *   lines up the end of a run of one colour (see reference_encode.c). Trying only those is ~5-10x faster
 *   than lz4's HC mode and within a few percent of HC 9's size (benchmarks/bench_dense.py measures
 *   both). Every block is decoded again and compared before it is returned: a block that would not
 *   round-trip raises RuntimeError instead of being stored. Format version 4's dependent frames. */
PyObject *py_encode(PyObject *module, PyObject *args);

/* encode_rows(frame, reference, row_nbytes) -> bytes
 *   Format version 5's dependent frame: which rows of row_nbytes bytes differ from the reference, then
 *   encode()'s block of just those rows (changed_rows.h), checked the same way. */
PyObject *py_encode_rows(PyObject *module, PyObject *args);

#define REFERENCE_ENCODE_METHODS                                                                                   \
    {"encode", py_encode, METH_VARARGS,                                                                            \
     "encode(frame, reference, row_nbytes) -> bytes\n\n"                                                           \
     "One lz4 block of frame with reference as its dictionary, checked to decode back to frame."},                 \
    {"encode_rows", py_encode_rows, METH_VARARGS,                                                                  \
     "encode_rows(frame, reference, row_nbytes) -> bytes\n\n"                                                      \
     "The rows of frame that differ from reference, and one lz4 block of them against it (format version 5)."},

#endif
