/* A sampled batch of transitions read in one call: rows gathered and unpacked (row_gather.h), stacks
 * followed through the frame table's links (link_follow.h), frames located (frame_entries.h) and
 * decoded (lz4_decode.h), or, for a reference ring, decoded with the references they need
 * (reference_table.h). Compiled as one call because for small frames (CartPole's 16 bytes) the numpy
 * and Python steps between those compiled parts cost as much as the compiled work itself. */
#ifndef MMREPLAY_TRANSITION_READ_H
#define MMREPLAY_TRANSITION_READ_H

#include <Python.h>

/* read_transitions(rows, row_slots, row_layout, version_3, table, frame_slots, entry_layout,
 *                  seed_multiplier, segment_bytes, bytes_written, views, base, reference, steps,
 *                  stack_size, zero_padding, pixels, action, reward, terminated, truncated, env_index,
 *                  discount, threads) -> bool
 *   TransitionReader.transitions' fast path: gather_fields over the rows of steps (rows, row_slots,
 *   row_layout, version_3 as gather_fields takes them), follow_links from each next_obs frame back
 *   stack_size frames, decode_entries of those stack_size + 1 frames into pixels (n rows of
 *   stack_size + 1 frames; table, frame_slots, entry_layout, seed_multiplier, segment_bytes,
 *   bytes_written, views and base as decode_entries takes them; reference: (-1, 0) for a plain ring,
 *   else (depth, row_nbytes) as reference_decode_entries takes them), and, with zero_padding, zeroes
 *   each padding frame (column c < stack_size holding the same frame step as column c + 1:
 *   stacking.padding_columns). discount[i] (float32) is set to 0 where transition i terminated.
 *   True when every row matches its checksum and none is DETACHED, and every frame (and reference)
 *   lies in the bytes written and in a view, matches its CRC and decodes; False otherwise, the arrays
 *   then unspecified: the caller's general path reads the batch again, and names what failed. */
PyObject *py_read_transitions(PyObject *module, PyObject *args);

#define TRANSITION_READ_METHODS                                                                                    \
    {"read_transitions", py_read_transitions, METH_VARARGS,                                                        \
     "read_transitions(rows, row_slots, row_layout, version_3, table, frame_slots, entry_layout,\n"                \
     "                 seed_multiplier, segment_bytes, bytes_written, views, base, reference, steps,\n"            \
     "                 stack_size, zero_padding, pixels, action, reward, terminated, truncated, env_index,\n"      \
     "                 discount, threads) -> bool\n\n"                                                             \
     "A batch of transitions in one call: rows checked and unpacked, stacks followed, frames decoded; False\n"     \
     "(the arrays unspecified) when a row or frame fails or a row is DETACHED."},

#endif
