/* A frame compressed as one lz4 block against its reference frame (mmreplay/frames/reference_codec.py):
 * its matches may reach back into the reference, as if the reference lay just before it (lz4's
 * "dictionary"), so any lz4 decoder given the reference as dictionary decodes it
 * (LZ4_decompress_safe_usingDict, python-lz4's ``dict=``). */
#ifndef MMREPLAY_REFERENCE_ENCODE_H
#define MMREPLAY_REFERENCE_ENCODE_H

#include <Python.h>

/* encode(frame, reference, row_nbytes) -> bytes
 *   A greedy lz4 block (one step of lazy matching) of ``frame`` against ``reference`` (same length;
 *   row_nbytes: bytes per image row, for the offsets that mean "one row away"). Atari frames change in
 *   a few small places between nearby frames, so nearly every match is one of a few known offsets or
 *   lines up the end of a run of one colour (see reference_encode.c). Trying only those is ~5-10x faster
 *   than lz4's HC mode and within a few percent of HC 9's size (benchmarks/bench_dense.py measures
 *   both). Every block is decoded again and compared before it is returned: a block that would not
 *   round-trip raises RuntimeError instead of being stored. Keeps the GIL (it uses one work area). */
PyObject *py_encode(PyObject *module, PyObject *args);

#define REFERENCE_ENCODE_METHODS                                                                                   \
    {"encode", py_encode, METH_VARARGS,                                                                            \
     "encode(frame, reference, row_nbytes) -> bytes\n\n"                                                           \
     "One lz4 block of frame with reference as its dictionary, checked to decode back to frame."},

#endif
