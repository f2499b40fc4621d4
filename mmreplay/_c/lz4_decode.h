/* Batch lz4 decoding: each frame one lz4 block, checked against its CRC-32 and decoded to exactly
 * frame_nbytes bytes, the batch shared by the calling thread and the pool's helpers (work_pool.h).
 * The pure-Python fallback in mmreplay/frames/lz4_codec.py gives identical results. */
#ifndef MMREPLAY_LZ4_DECODE_H
#define MMREPLAY_LZ4_DECODE_H

#include <Python.h>

#include <stdint.h>

/* Frame i: its compressed bytes sources[i] (NULL when out of range), lengths[i] of them, its CRC-32
 * seeded with seeds[i] must equal checksums[i], and it decodes to out[i * frame_nbytes : (i + 1) *
 * frame_nbytes]. */
typedef struct {
    const char *const *sources;
    const int64_t *lengths;
    const uint32_t *checksums;
    const uint32_t *seeds;
    char *out;
    int frame_nbytes;
    Py_ssize_t n;
} FrameBatch;

/* Checks and decodes every frame of batch on up to `threads` threads; call with the GIL released.
 * -1 when every frame is good, else the smallest index that is not (frames after it may be left
 * undecoded). */
Py_ssize_t decode_frames(const FrameBatch *batch, int threads);

/* decode(views, segments, offsets, lengths, checksums, seeds, out, frame_nbytes, threads) -> int
 *   views:     sequence of contiguous byte buffers (segment files mapped in memory)
 *   segments:  int64[n], index into views
 *   offsets:   int64[n], lengths: int64[n], byte range of frame i inside its view
 *   checksums: uint32[n], CRC-32 of the compressed bytes, seeded with seeds[i]
 *   seeds:     uint32[n]
 *   out:       writable C-contiguous buffer of n * frame_nbytes bytes; frame i decodes to
 *              out[i * frame_nbytes : (i + 1) * frame_nbytes]
 *   threads:   how many threads share the batch (1 decodes on the calling thread only)
 * Returns -1 when every frame's range lies inside its view, its CRC matches and it decodes to exactly
 * frame_nbytes bytes; else the smallest i that fails. Raises ValueError for a segment outside views. */
PyObject *py_decode(PyObject *module, PyObject *args);

/* decode_entries(views, base, table, frame_slots, layout, steps, seed_multiplier, segment_bytes,
 *                bytes_written, out, frame_nbytes, threads) -> bool
 *   The frame ring's fast path (lz4_codec.decode_from_table): the frames of steps located through the
 *   table (frame_entries.h) and decoded as decode() decodes them. True when every frame lies below
 *   bytes_written and inside its view and decodes as decode() checks; False otherwise, with nothing
 *   said about which frame: the caller's general path finds it. */
PyObject *py_decode_entries(PyObject *module, PyObject *args);

/* wake_helpers(helpers) -> None
 *   Wakes up to `helpers` of the pool's sleeping helper threads (work_pool.h, pool_wake): a hint that a
 *   batch will be decoded on that many helpers shortly. */
PyObject *py_wake_helpers(PyObject *module, PyObject *arg);

#define LZ4_DECODE_METHODS                                                                                         \
    {"wake_helpers", py_wake_helpers, METH_O,                                                                      \
     "wake_helpers(helpers): wake up to that many sleeping helper threads for a batch about to be decoded."},      \
    {"decode", py_decode, METH_VARARGS,                                                                            \
     "decode(views, segments, offsets, lengths, checksums, seeds, out, frame_nbytes, threads) -> int\n\n"          \
     "Decode n lz4 blocks into out with the GIL released; -1 when all are good, else the first bad index."},       \
    {"decode_entries", py_decode_entries, METH_VARARGS,                                                            \
     "decode_entries(views, base, table, frame_slots, layout, steps, seed_multiplier, segment_bytes,\n"            \
     "               bytes_written, out, frame_nbytes, threads) -> bool\n\n"                                       \
     "Locate frames through a frame table and decode them into out with the GIL released; True when every\n"      \
     "frame lies in the bytes written and in a view and is good, else False (out is then unspecified)."},

#endif
