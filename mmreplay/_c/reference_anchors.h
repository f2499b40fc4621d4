/* The state of a writer's reference groups (reference_groups.h), shared by the two files that work on it:
 * reference_groups.c (assignment, checkpoints, an add's frames encoded) and reference_ahead.c (one env's
 * frame encoded ahead on a helper). Nothing else includes it. */
#ifndef MMREPLAY_REFERENCE_ANCHORS_H
#define MMREPLAY_REFERENCE_ANCHORS_H

#include <Python.h>

#include <stdint.h>

#include "reference_encode.h"
#include "reference_groups.h"

#define MAX_DEPTH 64 /* branching >= 2: a group of up to 2**64 frames */

/* A frame that later frames of its group may reference, shared by the places that do (counted). */
typedef struct Anchor {
    long refs;
    int64_t step;
    ReferenceIndex frame;
    struct Anchor *next_free;
} Anchor;

/* One env's group: its next place, its key frame's step, its last frame's step, and the frame that the
 * next place whose lowest nonzero base-branching digit is digit m references (anchors[m]). */
typedef struct {
    int64_t place, key_step, last_step;
    Anchor *anchors[MAX_DEPTH];
} EnvGroup;

struct ReferenceGroups {
    Py_ssize_t num_envs;
    int64_t group_size, branching, max_distance;
    int depth;
    size_t n, row;
    EnvGroup *envs, *saved; /* saved[env]: env's group at the last checkpoint, where touched[env] */
    unsigned char *touched;
    Anchor *free_anchors; /* released anchors, their memory kept for the next ones */
    /* A frame encoded ahead and not yet settled (encode_ahead), or NULL; while its helper still runs (taken
     * back: ahead_settle), frames are encoded apart from their references (reference_encode_apart). */
    struct AheadFrame *ahead;
    int ahead_pause; /* encode_aheads left to decline after a frame was taken back */
    int untaken;     /* frames encoded ahead in a row that no helper took (the add encoded them itself) */
    long long taken_back;    /* frames taken back so far (groups_taken_back) */
    /* what encode_ahead did (groups_ahead_counts): frames asked for, posted to a helper, run on one (a
     * helper adds to it: atomic), and whose block an add took; nanoseconds adds waited for helpers */
    long long ahead_asked, ahead_posted, ahead_on_helper, ahead_used, ahead_wait_ns;
    long long helper_delay_ns; /* a test's delay of each helper's frame (groups_taken_back) */
};

/* Holds an anchor (NULL: nothing) for a place, a checkpoint or a frame encoded ahead. */
void anchor_hold(Anchor *anchor);

/* Drops a hold; the last puts the anchor's memory on the groups' free list. */
void anchor_release(ReferenceGroups *g, Anchor *anchor);

/* Whether env's frame at step starts a new group for lack of room in its group (see reference_groups.c). */
int group_ends(const ReferenceGroups *g, const EnvGroup *e, int64_t step, int64_t frame_tail);

/* The digit m of the anchor (anchors[m]) that the frame at place (> 0) of a group references. */
int reference_digit(const ReferenceGroups *g, int64_t place);

/* One frame compressed alone (reference NULL) or against its reference, apart from the reference's own
 * room for changed rows where `apart` (reference_encode_apart): the block's bytes, or -1. */
Py_ssize_t encode_one(const char *frame, size_t n, Anchor *reference, char *dst, size_t room, int apart);

/* The most bytes one frame's block takes. */
size_t block_room(const ReferenceGroups *g);

/* The pointer of a capsule named name; NULL with a TypeError saying what was expected otherwise. */
void *capsule_pointer(PyObject *capsule, const char *name, const char *expected);

#endif
