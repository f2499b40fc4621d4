/* Decoding a batch of reference-compressed frames (mmreplay/frames/reference_codec.py): key frames are
 * plain lz4 blocks, dependent frames blocks with their reference frame as lz4's dictionary
 * (reference_encode.h), decoded in the order reference_plan.h lists them. */
#ifndef MMREPLAY_REFERENCE_DECODE_H
#define MMREPLAY_REFERENCE_DECODE_H

#include <Python.h>

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
 * Raises ValueError for a segment outside views, a row outside out and scratch, or refs[i] >= i. */
PyObject *py_reference_decode(PyObject *module, PyObject *args);

#define REFERENCE_DECODE_METHODS                                                                                   \
    {"decode", py_reference_decode, METH_VARARGS,                                                                  \
     "decode(views, segments, offsets, lengths, checksums, seeds, refs, rows, out, scratch, frame_nbytes,\n"     \
     "       row_nbytes=0) -> int\n\n"                                                                             \
     "Decode m lz4 blocks in order, each against the entry refs[i] (or alone when -1), into out or scratch\n"      \
     "(rows[i]), with the GIL released; -1 when all are good, else the first bad entry."},

#endif
