/* A writer's reference groups (mmreplay/frames/reference_codec.py's EnvReferences, compiled): for each env
 * its place in its current group and the frames later ones of the group may reference, and each frame of
 * an add compressed against its reference (reference_encode.h) or alone. What add's general path encodes
 * its frames with (encode_frame), and what its fast path writes them with (append_reference_frames,
 * fast_add.h): both assign and compress alike, so they write the same bytes. */
#ifndef MMREPLAY_REFERENCE_GROUPS_H
#define MMREPLAY_REFERENCE_GROUPS_H

#include <Python.h>

#include <stdint.h>

#include "frame_entries.h"

typedef struct ReferenceGroups ReferenceGroups;
typedef struct AheadFrame AheadFrame;

/* The groups of a capsule that reference_groups() made; NULL with a TypeError for any other object. */
ReferenceGroups *reference_groups_from(PyObject *capsule);

/* The frames of one add, one per env (envs 0, 1, ...: frames + env * frame_nbytes), each continuing its
 * env's group at frame step first_step + env: assigned (their references and ref_deltas), compressed on up
 * to `threads` threads, and packed back to back into a new buffer (*blocks, to PyMem_Free), each block's
 * length into lengths and ref_delta into refs. frame_tail: the oldest frame step the store keeps. ahead
 * (or NULL): a one-env frame encode_ahead() started, whose block is taken where it is this frame's
 * against the reference just assigned (the same bytes), else left. Returns the bytes of all, or -1 with
 * a Python error (the groups then as they were). Call with the GIL held. */
long long reference_groups_encode(ReferenceGroups *groups, const char *frames, Py_ssize_t n, Py_ssize_t frame_nbytes,
                                  long long first_step, long long frame_tail, int threads, AheadFrame *ahead,
                                  char **blocks, int *lengths, int64_t *refs);

/* Undoes every assignment since the last reference_groups_encode: its groups as they were before it. */
void reference_groups_undo(ReferenceGroups *groups);

/* reference_groups(num_envs, group_size, branching, max_distance, frame_nbytes, row_nbytes) -> capsule
 *   Every env at the start of a group (a writer that opens a store starts each env with a key frame). */
PyObject *py_reference_groups(PyObject *module, PyObject *args);

/* encode_frame(groups, env, frame_step, frame, restart, frame_tail) -> (bytes, int)
 *   One frame of env at frame_step (after its env's last one): its stored bytes (alone, as
 *   lz4_codec.compress; or its changed rows against its reference) and its ref_delta. restart: the frame
 *   starts an episode, and a group. */
PyObject *py_encode_frame(PyObject *module, PyObject *args);

/* groups_checkpoint(groups) / groups_rollback(groups)
 *   Remember the groups as they are; return to them (an add that failed before it wrote its frames). */
PyObject *py_groups_checkpoint(PyObject *module, PyObject *arg);
PyObject *py_groups_rollback(PyObject *module, PyObject *arg);

#define REFERENCE_GROUPS_METHODS                                                                                   \
    {"reference_groups", py_reference_groups, METH_VARARGS,                                                        \
     "reference_groups(num_envs, group_size, branching, max_distance, frame_nbytes, row_nbytes) -> capsule\n\n"   \
     "A writer's reference groups: each env's place in its group and the frames it may reference."},              \
    {"encode_frame", py_encode_frame, METH_VARARGS,                                                                \
     "encode_frame(groups, env, frame_step, frame, restart, frame_tail) -> (bytes, int)\n\n"                       \
     "One frame of env: its stored bytes and ref_delta."},                                                          \
    {"groups_checkpoint", py_groups_checkpoint, METH_O,                                                            \
     "groups_checkpoint(groups): remember the groups as they are."},                                               \
    {"groups_rollback", py_groups_rollback, METH_O,                                                                \
     "groups_rollback(groups): return to the groups as the last checkpoint left them."},

#endif
