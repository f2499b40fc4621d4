/* A writer's reference groups (mmreplay/frames/reference_scheme.py's EnvReferences, compiled): which
 * earlier frame of its env each frame a writer adds is compressed against, and copies of the few frames
 * later ones of the group may reference (the group's anchors, `depth` at most per env), so that
 * encoding never reads the disk.
 *
 * Each env's frames go through groups_assign in frame step order. A group restarts (its next frame is a
 * key frame) at an episode start (restart), once it holds group_size frames, where its key frame lies
 * more than max_distance frame steps back, or before the store's frame tail (the oldest frame a commit
 * keeps). An add that fails after its frames were assigned restarts their envs (groups_restart): a
 * frame is never compressed against one that was not written, and a key frame needs nothing. */
#ifndef MMREPLAY_REFERENCE_GROUPS_H
#define MMREPLAY_REFERENCE_GROUPS_H

#include <Python.h>

#include <stdint.h>

#include "codec/reference_frames.h"

typedef struct ReferenceGroups ReferenceGroups;

/* The groups in a capsule that reference_groups() made; NULL with a TypeError for any other object. */
ReferenceGroups *reference_groups_from(PyObject *capsule);

/* The bytes of each of the groups' frames. */
int reference_groups_frame_nbytes(const ReferenceGroups *groups);

/* Assigns env's frame at frame_step (the GIL held): its reference's bytes, valid until env's next
 * assignment (NULL: a key frame), and its ref_delta (0 for a key frame) into *ref_delta. -1 into
 * *ref_delta, with a ValueError, when frame_step is not after env's last. */
const char *groups_assign(ReferenceGroups *groups, Py_ssize_t env, int64_t frame_step, const char *frame,
                          int64_t frame_tail, int restart, int64_t *ref_delta);

/* The next frame of env is a key frame. */
void groups_restart(ReferenceGroups *groups, Py_ssize_t env);

/* Frame i of n (env i's next frame, of frame step first_step + i, continuing its group) assigned and
 * compressed on up to `threads` threads: each block into blocks + i * bound (bound: room for the
 * largest block, reference_block_bound), its length into lengths[i] and its ref_delta into refs[i].
 * 0, or -1 with a Python error (memory, or a frame step out of order; every env restarted). */
int groups_encode_envs(ReferenceGroups *groups, const char *frames, Py_ssize_t n, int64_t first_step,
                       int64_t frame_tail, int threads, char *blocks, int bound, int *lengths, int64_t *refs);

/* The room for one stored frame of the groups' shape: a key frame's or a dependent frame's block. */
int reference_block_bound(const ReferenceShape *shape);

/* reference_groups(*, num_envs, group_size, branching, max_distance, frame_nbytes, row_nbytes, unit) -> capsule
 * groups_encode(groups, env, frame_step, frame, restart, frame_tail) -> (bytes, int)
 *   env's frame assigned (restart: it starts a group) and compressed: its block and ref_delta.
 * groups_restart(groups, envs) -> None
 *   The next frame of each env of envs (a sequence of ints) is a key frame. */
PyObject *py_reference_groups(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *py_groups_encode(PyObject *module, PyObject *args);
PyObject *py_groups_restart(PyObject *module, PyObject *args);

#define REFERENCE_GROUPS_METHODS                                                                                   \
    {"reference_groups", (PyCFunction)(void (*)(void))py_reference_groups, METH_VARARGS | METH_KEYWORDS,           \
     "reference_groups(*, num_envs, group_size, branching, max_distance, frame_nbytes, row_nbytes, unit)\n"        \
     "    -> capsule\n\nA writer's reference groups: each env's place in its group and the frames later ones\n"    \
     "may reference."},                                                                                            \
    {"groups_encode", py_groups_encode, METH_VARARGS,                                                              \
     "groups_encode(groups, env, frame_step, frame, restart, frame_tail) -> (bytes, int)\n\n"                      \
     "Assign env's frame its reference and compress it: the block and its ref_delta."},                            \
    {"groups_restart", py_groups_restart, METH_VARARGS,                                                            \
     "groups_restart(groups, envs) -> None\n\nThe next frame of each of these envs is a key frame."},

#endif
