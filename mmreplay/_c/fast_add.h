/* add's fast path (ReplayStore._add_single_frames), its writes in one call each: the frames compressed
 * and written with their frame-table entries (FrameRing.append_frames), and the transition rows written
 * with their links (TransitionTable.write_continuations). The general path writes the same bytes
 * (tests/test_fast_add.py). */
#ifndef MMREPLAY_FAST_ADD_H
#define MMREPLAY_FAST_ADD_H

#include <Python.h>

#include <stdint.h>

#include "frame_entries.h"
#include "reference_ahead.h"
#include "reference_groups.h"
#include "row_layout.h"

/* append_frames(frames, prev_deltas, first_step, table, frame_slots, layout, seed_multiplier, descriptor,
 *               segment_start, offset, segment_bytes, threads[, ahead]) -> int
 *   FrameRing.append of frames compressed alone, given uncompressed (a Python loop over the frames costs
 *   as much as compressing them). frames holds len(prev_deltas) contiguous frames; each is compressed
 *   with lz4 (the bytes of lz4_codec.compress, python-lz4's), on up to `threads` threads of the pool
 *   (frame_compress.h, apart from the writes; or taken from `ahead`, a compress_ahead capsule of these
 *   frames, once compressed), and all are written back to back at offset
 *   of the segment file open as descriptor, whose first byte is ring position segment_start. Then entry
 *   (first_step + i) mod frame_slots gets the frame's ring position, length, checksum (CRC-32 seeded
 *   with step * seed_multiplier + prev delta) and prev_deltas[i]; layout as decode_entries takes it,
 *   link = prev_delta. The bytes go out before the entries that point at them. Returns the bytes
 *   written; -1 with nothing written when they would run past the segment's end (the caller's general
 *   path then starts the next segment). */
PyObject *py_append_frames(PyObject *module, PyObject *args);

/* append_reference_frames(groups, frames, prev_deltas, first_step, frame_tail, table, frame_slots, layout,
 *                         seed_multiplier, descriptor, segment_start, offset, segment_bytes, threads[,
 *                         ahead]) -> int
 *   append_frames for a reference ring (ReferenceFrameRing.append_reference_frames): one frame per env of
 *   the reference groups (reference_groups.h), each continuing its env's group, assigned its reference and
 *   compressed (on up to `threads` threads) as encode_frame would, written back to back at offset, then
 *   each entry gets ref_delta too (its seed: step * seed_multiplier + prev_delta + ref_delta *
 *   REF_SEED_MULTIPLIER). ahead: None, or encode_ahead()'s capsule for a one-env frame, whose block is
 *   written where it is the frame's against its assigned reference. Returns the bytes written; -1 with
 *   nothing written and the groups as they were when they would run past the segment's end. */
PyObject *py_append_reference_frames(PyObject *module, PyObject *args);

/* write_rows(table, row_slots, first_step, frame_lead, layout, rewards, flags, actions, previous_steps)
 *   TransitionTable.write of the rows of envs 0, 1, ... at steps first_step + env: each row gets
 *   next_delta 0, frame_lead, its env, rewards[env] (a float, stored as float32), flags[env] (a byte) and
 *   its equal part of actions (bytes), then its checksum. Then the row of previous_steps[env], the env's
 *   transition before, gets its next_delta link to the new row. Table slots are steps mod row_slots;
 *   layout: row_layout(). */
PyObject *py_write_rows(PyObject *module, PyObject *args);

/* append_reference_frames after its arguments are parsed and checked (one_env_add's continue_one_env
 * too): the bytes written, -1 (nothing written, the groups as they were) where they would run past the
 * segment's end, -2 with a Python error. */
long long append_reference_core(ReferenceGroups *groups, const char *frames, Py_ssize_t n, Py_ssize_t frame_nbytes,
                                const uint32_t *prev, long long first_step, long long frame_tail,
                                unsigned char *table, long long frame_slots, const EntryLayout *layout,
                                uint32_t seed_multiplier, int descriptor, long long segment_start, long long offset,
                                long long segment_bytes, int threads, AheadFrame *ahead);

/* One row of write_rows: env's transition at step, and the link to it from the row of step before. */
void write_row(unsigned char *rows, long long row_slots, const RowLayout *layout, int64_t step, uint32_t frame_lead,
               Py_ssize_t env, double reward, long flag, const char *action, long long before);

#define FAST_ADD_METHODS                                                                                           \
    {"append_frames", py_append_frames, METH_VARARGS,                                                              \
     "append_frames(frames, prev_deltas, first_step, table, frame_slots, layout, seed_multiplier, descriptor,\n"   \
     "              segment_start, offset, segment_bytes, threads) -> int\n\n"                                     \
     "Compress frames, write them at offset of a segment file and fill their frame-table entries: the bytes\n"     \
     "written, or -1 (nothing written) when they would run past the segment's end."},                              \
    {"append_reference_frames", py_append_reference_frames, METH_VARARGS,                                          \
     "append_reference_frames(groups, frames, prev_deltas, first_step, frame_tail, table, frame_slots, layout,\n"  \
     "                        seed_multiplier, descriptor, segment_start, offset, segment_bytes, threads[,\n"   \
     "                        ahead]) -> int\n\n"                                                                   \
     "Assign, compress and write one frame per env of a reference ring with their frame-table entries: the\n"     \
     "bytes written, or -1 (nothing written, the groups unchanged) when they would run past the segment's end."}, \
    {"write_rows", py_write_rows, METH_VARARGS,                                                                    \
     "write_rows(table, row_slots, first_step, frame_lead, layout, rewards, flags, actions, previous_steps)\n\n"   \
     "Write the transition rows of envs 0, 1, ... with their checksums, and link each env's previous row."},

#endif
