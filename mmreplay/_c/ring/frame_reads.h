/* A frame ring's frames read by frame step through its table (frame_table.h's `ring` argument): decoded
 * (a plain ring's each alone, a reference ring's with the frames they need: reference_reads.h), gathered
 * still compressed, or their episode links followed into frame stacks. The pure-Python code of
 * frames/ring.py and frames/reference_ring.py gives the same results, and names what fails. */
#ifndef MMREPLAY_FRAME_READS_H
#define MMREPLAY_FRAME_READS_H

#include <Python.h>

#include <stdint.h>

#include "ring/frame_table.h"

/* Decodes the n frames at steps into out (n * frame_nbytes bytes): 0 when every frame (and every frame
 * it needs) lies in the bytes written and in a view, matches its CRC and decodes; 1 when one does not
 * (out unspecified: the caller's general path names it); -1 with a Python error. columns: a reference
 * ring's rows come in stacks of that many (a task decodes whole stacks). The GIL is released to decode. */
int ring_decode(RingArgument *ring, const int64_t *steps, Py_ssize_t n, Py_ssize_t columns, char *out, int threads);

/* decode_entries(ring, steps, out, threads) -> bool
 *   ring_decode of int64 steps into the writable buffer out: True when every frame is good. */
PyObject *py_decode_entries(PyObject *module, PyObject *args);

/* gather_entries(ring, steps, lengths, checksums, seeds, verify) -> bytes | int | None
 *   The stored blocks of frames, still compressed: their bytes back to back, and each one's length
 *   (int64), checksum and CRC seed (uint32) into the arrays given. With verify, each block is checked
 *   against its checksum: the index of the first that fails. None when a frame lies outside the bytes
 *   written or the views (the caller's general path finds it). */
PyObject *py_gather_entries(PyObject *module, PyObject *args);

/* follow_links(ring, next_frames, out) -> None
 *   out is (n, columns) int64: out[i, columns - 1] = next_frames[i], and each column before it is the
 *   one after it minus that frame's prev_delta (its views unused: give an empty list). */
PyObject *py_follow_links(PyObject *module, PyObject *args);

/* reference_closure(ring, steps, every, references) -> int
 *   The frames steps (int64[n]) and every frame their chains of references reach through the table's
 *   ref_delta links, in ascending step order (a reference before the frames that need it), into every's
 *   first m items, and references[i] the index there of every[i]'s reference, or -1 for a key frame;
 *   every and references: int64[n * (depth + 1)], depth the ring's. m, or -1 where a chain leads before
 *   step 0 or deeper than the depth (the caller's general path names the frame). */
PyObject *py_reference_closure(PyObject *module, PyObject *args);

#define FRAME_READS_METHODS                                                                                        \
    {"decode_entries", py_decode_entries, METH_VARARGS,                                                            \
     "decode_entries(ring, steps, out, threads) -> bool\n\n"                                                       \
     "Locate frames through a frame table and decode them into out with the GIL released; True when every\n"      \
     "frame lies in the bytes written and in a view and is good, else False (out is then unspecified)."},          \
    {"gather_entries", py_gather_entries, METH_VARARGS,                                                            \
     "gather_entries(ring, steps, lengths, checksums, seeds, verify) -> bytes | int | None\n\n"                    \
     "The stored blocks of frames back to back, their lengths, checksums and seeds into the arrays given;\n"       \
     "with verify, the first block that fails its checksum (an int); None when a frame lies outside."},            \
    {"follow_links", py_follow_links, METH_VARARGS,                                                                \
     "follow_links(ring, next_frames, out) -> None\n\n"                                                            \
     "Frame stacks: each row of out (int64, n x columns) ends with next_frames[i] and steps back by links."},      \
    {"reference_closure", py_reference_closure, METH_VARARGS,                                                      \
     "reference_closure(ring, steps, every, references) -> int\n\n"                                                \
     "The frames steps and all their references, in step order, and each one's reference's index; -1 when a\n"     \
     "chain is damaged."},

#endif
