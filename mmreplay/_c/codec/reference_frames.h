/* One frame of a reference store (format version 6, mmreplay/frames/reference_codec.py) compressed
 * against its reference with stock liblz4 calls, and applied back onto it.
 *
 * The frame is cut into units of `unit` bytes (reference_codec.unit_nbytes: a divisor of the frame's
 * row). A dependent frame is one lz4 block, compressed with its reference as lz4's dictionary
 * (LZ4_loadDict, then LZ4_compress_fast_continue) where its bytes before compression are
 * REFERENCE_DICT_MIN_BYTES or more, else alone (no dictionary loaded; it decodes with the reference as
 * dictionary all the same), whose bytes decode to
 *
 *     runs, taken, then `runs` pairs (skip, take), then the `taken` changed units' bytes
 *
 * each number written as lz4 writes a length (bytes of 255 add 255 and go on; the first byte below 255
 * ends it), skip and take counted in units: after `skip` units equal to the reference's come `take`
 * changed ones, and units past the last run are equal too. A key frame is a plain lz4 block. */
#ifndef MMREPLAY_REFERENCE_FRAMES_H
#define MMREPLAY_REFERENCE_FRAMES_H

#include <Python.h>

#include <stddef.h>
#include <stdint.h>

#include "codec/lz4_api.h"

/* The fewest bytes (the numbers and the changed units) a dependent frame is compressed with its reference
 * as dictionary from: frames/reference_codec.py's DICT_MIN_BYTES says what it was measured on. */
#define REFERENCE_DICT_MIN_BYTES 256

/* The deepest chain of references a scheme may have (ReferenceScheme: group_size at most 65,536). */
#define REFERENCE_MAX_DEPTH 16

/* A reference store's frames: their bytes, the row whose equal rows the encoder skips at once (a
 * multiple of unit dividing frame_nbytes), the unit, and the bytes a dependent frame's block decodes to
 * at most (reference_work_bytes). */
typedef struct {
    int frame_nbytes, row_nbytes, unit, work_bytes;
} ReferenceShape;

/* The shape of frames of frame_nbytes bytes cut into rows and units (0, or -1 when unit does not
 * divide row_nbytes, or row_nbytes frame_nbytes, or the sizes are not positive). */
int reference_shape_init(ReferenceShape *shape, long long frame_nbytes, long long row_nbytes, long long unit);

/* Compresses frame against ref (both frame_nbytes bytes) into out (capacity bytes; room for
 * LZ4_compressBound(work_bytes) always suffices), through stream (any state: it is reset) and work
 * (work_bytes of scratch). The block's length, or 0 when it did not fit. Any thread. */
int reference_frame_encode(const ReferenceShape *shape, const char *frame, const char *ref, char *out, int capacity,
                           LZ4_stream_t *stream, char *work);

/* Decodes a dependent frame's block (length bytes at src) against ref into dst, whose frame_nbytes bytes
 * may be ref itself (the frame is then built in place: only its changed units are written); work:
 * work_bytes of scratch. 1 when the block decodes to a frame of this shape; 0 when not (dst then
 * unspecified). Any thread. */
int reference_frame_apply(const ReferenceShape *shape, const char *src, int length, char *dst, const char *ref,
                          char *work);

/* reference_encode(frame, reference, row_nbytes, unit) -> bytes
 *   frame compressed against reference (buffers of the same size): the dependent frame's block.
 * reference_apply(block, reference, row_nbytes, unit) -> bytes | None
 *   The frame a dependent block holds against reference; None when it is not one of this shape. */
PyObject *py_reference_encode(PyObject *module, PyObject *args);
PyObject *py_reference_apply(PyObject *module, PyObject *args);

#define REFERENCE_FRAMES_METHODS                                                                                   \
    {"reference_encode", py_reference_encode, METH_VARARGS,                                                        \
     "reference_encode(frame, reference, row_nbytes, unit) -> bytes\n\n"                                           \
     "A frame compressed against its reference: one lz4 block of its changed units."},                             \
    {"reference_apply", py_reference_apply, METH_VARARGS,                                                          \
     "reference_apply(block, reference, row_nbytes, unit) -> bytes | None\n\n"                                      \
     "The frame a dependent block holds against its reference; None when the block is not one."},

#endif
