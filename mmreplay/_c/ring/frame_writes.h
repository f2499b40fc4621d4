/* add's frames written in one call (frames/ring.py's FrameRing.append_frames): each env's new frame
 * compressed (alone, or against its reference: a writer's reference groups), the blocks written back
 * to back with one pwrite at the ring's next byte, then their frame table entries. The general path
 * (FrameRing.append, with payloads compressed one by one) writes the same bytes. */
#ifndef MMREPLAY_FRAME_WRITES_H
#define MMREPLAY_FRAME_WRITES_H

#include <Python.h>

/* append_frames(target, frames, prev_deltas, first_step, groups=None, frame_tail=0, threads=1) -> int
 *   target: (geometry, table, descriptor, segment_start, offset): the ring (ring_geometry's capsule),
 *   its writable table, the descriptor of the segment file the next byte goes to, that segment's first
 *   ring position and the offset of the next byte in it. frames holds len(prev_deltas) contiguous
 *   frames, frame i env i's (a writer's groups assign each its reference: see reference_groups.h),
 *   written as frame steps first_step, first_step + 1, ...; on up to `threads` threads. Returns the
 *   bytes written; where they would run past the segment's end, nothing is written and the blocks come
 *   back, as (payloads, ref_deltas): lists of bytes and ints, for the caller's general path to write
 *   (it starts the next segment). OSError (ENOSPC on a full disk) with nothing counted (each env's group
 *   restarted). */
PyObject *py_append_frames(PyObject *module, PyObject *args, PyObject *kwargs);

#define FRAME_WRITES_METHODS                                                                                       \
    {"append_frames", (PyCFunction)(void (*)(void))py_append_frames, METH_VARARGS | METH_KEYWORDS,                 \
     "append_frames(target, frames, prev_deltas, first_step, groups=None, frame_tail=0, threads=1) -> int\n\n"     \
     "Compress frames, write them at the ring's next byte and fill their frame-table entries: the bytes\n"         \
     "written, or (payloads, ref_deltas), nothing written, when they would run past the segment's end."},

#endif
