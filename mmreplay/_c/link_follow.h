/* Following the frame table's episode links: the frame stacks of a sampled batch
 * (mmreplay.rows.stacking.transition_frames over a frame ring's table). Each frame's entry holds its
 * link, prev_delta (frame_entries.h): how many frame steps back the frame before it in its episode lies. */
#ifndef MMREPLAY_LINK_FOLLOW_H
#define MMREPLAY_LINK_FOLLOW_H

#include <Python.h>

#include <stdint.h>

/* follow_links(table, frame_slots, layout, next_frames, out) -> None
 *   out is (n, columns) int64: out[i, columns - 1] = next_frames[i], and each column before it is the
 *   one after it minus that frame's link (its entry at slot frame step mod frame_slots, as Python's %
 *   gives it). */
PyObject *py_follow_links(PyObject *module, PyObject *args);

#define LINK_FOLLOW_METHODS                                                                                        \
    {"follow_links", py_follow_links, METH_VARARGS,                                                                \
     "follow_links(table, frame_slots, layout, next_frames, out) -> None\n\n"                     \
     "Frame stacks: each row of out (int64, n x columns) ends with next_frames[i] and steps back by links."},

#endif
