/* Decoding a batch of reference-compressed frames (mmreplay/frames/reference_codec.py): key frames are
 * plain lz4 blocks, dependent frames blocks with their reference frame as lz4's dictionary
 * (reference_encode.h), decoded in the order reference_plan.h lists them. */
#ifndef MMREPLAY_REFERENCE_DECODE_H
#define MMREPLAY_REFERENCE_DECODE_H

#include <Python.h>

#include <stdint.h>

#include "key_frames.h"

/* A checked batch: entry i's compressed bytes (sources[i], NULL when out of range), its length, reference
 * entry, destination row, checksum and seed; out's n_out frames, then scratch's. */
typedef struct {
    const char *const *sources;
    const int64_t *lengths, *refs, *rows;
    const uint32_t *checksums, *seeds;
    char *out, *scratch;
    Py_ssize_t n_out;
    int frame_nbytes, row_nbytes, changed_rows;
    Py_ssize_t m;
    /* Key frames kept decoded across batches (key_frames.h), or NULL; then steps: each entry's frame step,
     * and cached: 1 for a dependent frame the plan takes from a slot (its references are not in the plan:
     * if the slot lost it meanwhile, it fails). Only the changed-rows decode uses them (reference_threads.h). */
    KeyFrames *keys;
    const int64_t *steps;
    const unsigned char *cached;
} ReferencePlan;

/* Decodes entry i (its reference already decoded): 1, or 0 when its CRC fails or it does not decode. */
int reference_entry_decode(const ReferencePlan *plan, Py_ssize_t i);

/* Decodes a plan's entries, -1 when all are good, else the smallest i that fails; threads: at most that
 * many threads (reference_threads.h), 1 for the calling thread alone. Called with the GIL released. */
typedef Py_ssize_t (*reference_runner)(const ReferencePlan *plan, int threads);

/* Every entry in order on the calling thread, stopping at the first that fails. */
Py_ssize_t reference_decode_in_order(const ReferencePlan *plan, int threads);

/* decode's arguments (below, and threads: 1 to 64) checked and located, then the plan run by runner. */
PyObject *reference_decode_call(PyObject *args, reference_runner runner);

/* decode(views, segments, offsets, lengths, checksums, seeds, refs, rows, out, scratch, frame_nbytes,
 *        row_nbytes=0) -> int
 *   views, segments, offsets, lengths, checksums, seeds: as in mmreplay._lz4batch.decode, for m entries
 *   refs:    int64[m]: the entry whose frame is entry i's reference (refs[i] < i), or -1 for a key frame
 *   rows:    int64[m]: where entry i's frame goes: rows[i] < n_out is out's row, else scratch's row
 *            rows[i] - n_out, where n_out = len(out) / frame_nbytes
 *   out, scratch: writable C-contiguous buffers of whole frames
 *   row_nbytes: 0 for dependent frames compressed whole (format version 4), else the bytes of a row of
 *            frames stored as their changed rows (version 5: reference_frame.h)
 * Entries decode in order, the GIL released once, so a reference is decoded before the frames that
 * use it. Returns -1 when every entry's range lies inside its view, its CRC matches and it decodes to
 * exactly frame_nbytes bytes; else the smallest i that fails (later entries are left undecoded).
 * Raises ValueError for a segment outside views, a row outside out and scratch, or refs[i] >= i. A 13th
 * argument, threads, is accepted and ignored here (mmreplay._lz4batch.reference_decode uses it). */
PyObject *py_reference_decode(PyObject *module, PyObject *args);

#define REFERENCE_DECODE_METHODS                                                                                   \
    {"decode", py_reference_decode, METH_VARARGS,                                                                  \
     "decode(views, segments, offsets, lengths, checksums, seeds, refs, rows, out, scratch, frame_nbytes,\n"     \
     "       row_nbytes=0) -> int\n\n"                                                                             \
     "Decode m lz4 blocks in order, each against the entry refs[i] (or alone when -1), into out or scratch\n"      \
     "(rows[i]), with the GIL released; -1 when all are good, else the first bad entry."},

#endif
