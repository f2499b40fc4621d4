/* An add's frames (one env's, or a vector add's, a helper task each) encoded ahead on helpers of the pool
 * while the add is checked (a writer's reference groups, reference_groups.h), and taken back from a
 * helper that has not finished one (preempted) rather than waited for: the add then encodes that frame
 * itself, apart from the reference the helper writes beside (reference_encode_apart), and the frames
 * stay the groups' until a later settle finds their helper done. */
#ifndef MMREPLAY_REFERENCE_AHEAD_H
#define MMREPLAY_REFERENCE_AHEAD_H

#include <Python.h>

#include <stdint.h>

#include "reference_groups.h"

struct Anchor; /* reference_anchors.h */

/* The frame encoded ahead of a capsule that encode_ahead() made; NULL for None, or with a TypeError for
 * any other object. */
AheadFrame *ahead_frame_of(PyObject *capsule);

/* Settles the groups' frame encoded ahead, if any: its helper joined where it is done (waiting for it
 * with `wait`, else for at most 20 us: about a frame's encode). Whether none is left running (0: the caller encodes
 * apart, reference_encode_apart). Every function that reads or changes the groups settles first. Call
 * with the GIL. */
int groups_settle(ReferenceGroups *g, int wait);

/* Whether the groups' frames encoded ahead and not yet settled (a helper may still be encoding against it)
 * hold this reference: a frame encoded against it meanwhile is encoded apart (reference_encode_apart);
 * against any other, as usual. */
int ahead_uses(const ReferenceGroups *g, const struct Anchor *reference);

/* The block encoded ahead for env's frame at step, when it is this frame's against the reference it was
 * just assigned (NULL: a key frame) and settled: its length, the block copied to dst; -1 otherwise. */
Py_ssize_t ahead_block(AheadFrame *a, Py_ssize_t env, int64_t step, const char *frame,
                       const struct Anchor *reference, char *dst);

/* Where env's frame at step, encoded ahead and done, will be an anchor: the copy of it its helper made,
 * for the anchor to take as its bytes (2n bytes), `bytes` (the anchor's room before, or NULL) given in
 * exchange and freed with the frame; NULL otherwise (the caller copies the frame itself). The anchor's
 * bytes are then written by the thread that encoded the frame, and read by the helper that encodes the
 * frames against it next, without crossing cores (~250 ns a cache line on the development VM). */
uint8_t *ahead_take_copy(AheadFrame *a, Py_ssize_t env, int64_t step, const char *frame, uint8_t *bytes);

/* encode_ahead(groups, env, frame_step, frames, frame_tail, threads, count=1, offset=0, stride=0)
 *     -> capsule | None
 *   Starts encoding the frames of envs env to env + count - 1 (env + k's at frame step frame_step + k, its
 *   bytes at frames + offset + k * stride: one env's frame, a vector add's, or each env's stack's newest)
 *   on awake helpers of the pool (up to threads - 1 of them), each against the reference its group gives
 *   it if its add continues the group, and returns at once: append_reference_frames given the capsule
 *   takes each block where the frame and its reference turn out the same (the bytes it would encode), and
 *   encodes a frame itself otherwise (an episode start, another frame, no helper awake, or a helper that
 *   has not finished within 20 us: preempted, it is not waited for; "taken back"). None where
 *   a frame step is not after its env's last frame, while frames taken back are still being encoded, and
 *   for the next 64 calls after some were. */
PyObject *py_encode_ahead(PyObject *module, PyObject *args);

/* encode_ahead for a caller that parsed its arguments (one_env_add's continue_one_env): takes the frame's
 * buffer, which the capsule then holds (released here where it returns None or fails). */
PyObject *encode_ahead_start(PyObject *capsule, Py_ssize_t env, long long step, Py_buffer *frame_view,
                             long long frame_tail, int threads, Py_ssize_t count, Py_ssize_t offset,
                             Py_ssize_t stride);

/* groups_taken_back(groups, helper_delay_ns=-1) -> int
 *   How many frames encoded ahead the adds took back from a helper that had not finished them; with
 *   helper_delay_ns >= 0, from now on each frame posted ahead is, where a helper runs it, held up that
 *   long first, and never run by an add (as if a helper had just taken it) while it is posted (0: as
 *   usual): what the tests exercise the taken-back path with. */
PyObject *py_groups_taken_back(PyObject *module, PyObject *args);

/* groups_ahead_counts(groups) -> dict
 *   What encode_ahead did so far, to see where a machine's helpers help: frames asked for ("asked"),
 *   posted to a helper ("posted"; not where every helper slept, or while taken-back frames paused it), run
 *   on a helper ("on_helper"; the others the add ran itself at its join), whose block an add took ("used"),
 *   taken back ("taken_back"), and the nanoseconds adds spent waiting for helpers that had taken their
 *   frames ("wait_ns": where it is most of the encode, the helper hides little of it). */
PyObject *py_groups_ahead_counts(PyObject *module, PyObject *capsule);

#define REFERENCE_AHEAD_METHODS                                                                                    \
    {"encode_ahead", py_encode_ahead, METH_VARARGS,                                                                \
     "encode_ahead(groups, env, frame_step, frame, frame_tail, threads) -> capsule | None\n\n"                     \
     "Start encoding env's frame on a helper against the reference its group gives it next; append_reference_\n"   \
     "frames takes the block where it turns out the frame's."},                                                    \
    {"groups_taken_back", py_groups_taken_back, METH_VARARGS,                                                      \
     "groups_taken_back(groups, helper_delay_ns=-1) -> int\n\n"                                                    \
     "Frames encoded ahead that adds took back from an unfinished helper; a delay >= 0 holds helpers up."},     \
    {"groups_ahead_counts", py_groups_ahead_counts, METH_O,                                                       \
     "groups_ahead_counts(groups) -> dict\n\n"                                                                    \
     "Frames encode_ahead was asked for, posted to a helper, ran on one, whose block an add took, taken back;\n" \
     "the nanoseconds adds waited for helpers."},

#endif
