/* One env's continuing add in one call (frames_ahead.ContinuingFrames.continue_one, a reference ring's):
 * the frame the add before left behind written, this add's new frame posted to a helper, and its row
 * written, where each was three calls with Python around them (~1 us of an add's ~11 on the development
 * VM). The same bytes as append_reference_frames, encode_ahead and write_rows in turn
 * (tests/test_one_env_add.py). */
#ifndef MMREPLAY_ONE_ENV_ADD_H
#define MMREPLAY_ONE_ENV_ADD_H

#include <Python.h>

/* continue_one_env(groups, behind, behind_prev_delta, behind_ahead, frame_tail, threads, frames_written,
 *                  table, frame_slots, layout, seed_multiplier, descriptor, segment_start, offset,
 *                  segment_bytes, frame, post_threads, rows, row_slots, row_layout, step, reward, flags,
 *                  action, previous_step) -> (written, ahead) | None
 *   1. behind (bytes, or None: nothing left behind): the frame left behind, written at frame step
 *      frames_written with behind_prev_delta and its encode_ahead capsule behind_ahead (or None) as
 *      append_reference_frames(groups, behind, [behind_prev_delta], frames_written, ...) writes it;
 *      returns None, with nothing done, where it would run past the segment's end (the caller settles it
 *      the general way); an OSError (a full disk) with nothing written and the groups as they were.
 *   2. frame (bytes): started on a helper as encode_ahead(groups, 0, frame step, frame, frame_tail,
 *      post_threads) starts it, its frame step the next (frames_written, plus one where behind was written).
 *   3. Where it was posted, the row at transition step `step` as write_rows(rows, row_slots, step, frame
 *      step - step, row_layout, [reward], [flags], action, [previous_step]) writes it.
 *   Returns the bytes step 1 wrote (0 without behind) and the capsule of step 2, or None for it where the
 *   frame was not posted (no helper awake, or a memory error): then no row was written, and the caller
 *   writes the frame and the row itself. Every argument is checked before anything is written; after
 *   step 1 wrote, nothing fails. */
PyObject *py_continue_one_env(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#define ONE_ENV_ADD_METHODS                                                                                        \
    {"continue_one_env", (PyCFunction)(void (*)(void))py_continue_one_env, METH_FASTCALL,                         \
     "continue_one_env(groups, behind, behind_prev_delta, behind_ahead, frame_tail, threads, frames_written,\n"    \
     "                 table, frame_slots, layout, seed_multiplier, descriptor, segment_start, offset,\n"         \
     "                 segment_bytes, frame, post_threads, rows, row_slots, row_layout, step, reward, flags,\n"   \
     "                 action, previous_step) -> (written, ahead) | None\n\n"                                    \
     "Write the frame left behind, post the new frame to a helper and write its row, in one call."},

#endif
