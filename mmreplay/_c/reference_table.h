/* A reference ring's frames located through its frame table and decoded in one call: each frame's chain
 * of references read from the table's ref_delta links (frame_entries.h), the plan that decodes each
 * frame and reference once, references first (reference_plan.h), every entry located (locate_entries)
 * and decoded with the GIL released, one tree of references a task (reference_threads.h). The compiled
 * counterpart of frames/reference_ring.py's decode_into, for read_transitions and decode_into's fast
 * path: the ~10 numpy steps around the plan and the decode cost as much as decoding the batch itself.
 *
 * On several threads a batch (of changed-rows frames, from SPLIT_MIN_FRAMES) is split into parts, each
 * planned, located and decoded by one thread in memory of its own: one plan written by the caller and
 * read by the helpers crossed cores a cache line at a time. Pong, sample(32) on the 2-core development
 * VM, 2 threads: 0.83x-0.89x of plain lz4's rate unsplit, 0.96x-1.17x split (the higher where its two
 * vCPUs share no cache, ~500 ns a round trip between them). */
#ifndef MMREPLAY_REFERENCE_TABLE_H
#define MMREPLAY_REFERENCE_TABLE_H

#include <Python.h>

#include <stdint.h>

#include "frame_entries.h"
#include "reference_decode.h"
#include "reference_plan.h"

/* The deepest reference chain the compiled read follows (ReferenceScheme.depth: 8 for the default). */
#define REFERENCE_MAX_DEPTH REFERENCE_PLAN_MAX_DEPTH

/* Decodes a located plan into its out rows (and scratch rows where the references cannot live in out's):
 * with the GIL held, released to decode. -1 when every entry decodes, else the first entry that fails
 * (reference_decode.h); -3 with a Python error when memory ran out. */
Py_ssize_t reference_plan_decode(ReferencePlan *plan, int threads);

/* Decodes the n frames at steps of a reference ring whose chains are at most depth references long into
 * out (n frames of frame_nbytes bytes), on up to threads threads; row_nbytes: 0 for dependent frames
 * compressed whole (format version 4), else the bytes of a changed-rows frame's row (version 5). views
 * is a PySequence_Fast with room for the buffers of up to min(len(views), n * (depth + 1)) of them
 * (views_prepare). 0 when every frame and every reference lies in the bytes written and in a view,
 * matches its CRC and decodes; 1 when one does not, or a chain is longer than depth or leads before
 * frame step 0 (out then unspecified: the caller's general path names what failed); -1 with a Python
 * error. Called with the GIL held; releases it to decode. */
int reference_decode_table(const FrameTable *frames, PyObject *views, const int64_t *steps, Py_ssize_t n,
                           Py_ssize_t depth, Py_ssize_t row_nbytes, KeyFrames *keys, char *out,
                           Py_ssize_t frame_nbytes, int threads, Py_buffer *buffers, Py_ssize_t *acquired);

/* 0 when depth and row_nbytes suit frames of frame_nbytes bytes, else -1 with a ValueError naming
 * function. */
int reference_arguments_check(Py_ssize_t depth, Py_ssize_t row_nbytes, Py_ssize_t frame_nbytes, const char *function);

/* reference_decode_entries(views, base, table, frame_slots, layout, steps, seed_multiplier, segment_bytes,
 *                          bytes_written, depth, row_nbytes, out, frame_nbytes, threads) -> bool
 *   decode_entries (lz4_decode.h) for a reference ring (reference_ring.py's decode_into fast path):
 *   depth, its scheme's; row_nbytes, 0 or a changed-rows frame's row bytes. True when every frame and
 *   every reference it needs is good; False otherwise (out unspecified), with nothing said about which
 *   frame: the caller's general path finds it. */
PyObject *py_reference_decode_entries(PyObject *module, PyObject *args);

/* reference_closure(table, frame_slots, layout, steps, depth, closure, references) -> int
 *   The n distinct frames at steps (no repeats) and every frame their chains reach, read through the
 *   table's links (reference_plan_follow): m frames written to closure's first m items in ascending
 *   step order (a reference before the frames that need it), references[i] the index of closure[i]'s
 *   reference there or -1. closure, references: int64[n * (depth + 1)]. Returns m, or -1 when a chain
 *   leads before step 0 or is deeper than depth (the caller's general path names the frame). An encoded
 *   batch's frames (mmreplay/store/encoded_batches.py). */
PyObject *py_reference_closure(PyObject *module, PyObject *args);

/* reference_split_counts() -> (split, unsplit): batches decoded in parts on several threads since the module
 * loaded, and those of them decoded again unsplit (a part's chain reached a view its caller had not
 * acquired, or a plan that needs scratch rows). The tests' view of which path a read took. */
PyObject *py_reference_split_counts(PyObject *module, PyObject *unused);

#define REFERENCE_TABLE_METHODS                                                                                    \
    {"reference_decode_entries", py_reference_decode_entries, METH_VARARGS,                                        \
     "reference_decode_entries(views, base, table, frame_slots, layout, steps, seed_multiplier, segment_bytes,\n"  \
     "                         bytes_written, depth, row_nbytes, out, frame_nbytes, threads) -> bool\n\n"          \
     "decode_entries for a reference ring: each frame with the references it needs, each decoded once, with\n"     \
     "the GIL released; True when all are good, else False (out is then unspecified)."},                           \
    {"reference_closure", py_reference_closure, METH_VARARGS,                                                      \
     "reference_closure(table, frame_slots, layout, steps, depth, closure, references) -> int\n\n"                \
     "The frames steps' chains reach through the table, in step order, each with its reference's index; -1\n"     \
     "when a chain is damaged."},                                                                               \
    {"reference_split_counts", py_reference_split_counts, METH_NOARGS,                                             \
     "reference_split_counts() -> (split, unsplit)\n\nBatches decoded in parts on several threads, and those\n"     \
     "of them decoded again unsplit."},

#endif
