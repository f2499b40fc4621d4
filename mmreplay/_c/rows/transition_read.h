/* A sampled batch of transitions read in one call: rows gathered and unpacked (row_gather.h), stacks
 * followed through the frame table's links, frames decoded (ring/frame_reads.h), for a reference ring
 * with the references they need. Compiled as one call because for small frames (CartPole's 16 bytes) the numpy
 * and Python steps between those compiled parts cost as much as the compiled work itself. */
#ifndef MMREPLAY_TRANSITION_READ_H
#define MMREPLAY_TRANSITION_READ_H

#include <Python.h>

/* read_transitions(rows, ring, steps, stack, out, threads) -> bool
 *   TransitionReader.transitions' fast path: gather_fields over the rows of steps (rows as row_layout.h's
 *   rows_parse takes it), follow_links from each next_obs frame back stack_size frames, ring_decode of
 *   those stack_size + 1 frames into pixels (n rows of stack_size + 1 frames; ring as frame_table.h's
 *   ring_parse takes it), and, with zero_padding, zeroes each padding frame (column c < stack_size
 *   holding the same frame step as column c + 1: stacking.padding_columns). stack: (stack_size,
 *   zero_padding); out: (pixels, action, reward, terminated, truncated, env_index, discount), where
 *   discount[i] (float32) is set to 0 where transition i terminated. True when every row matches its
 *   checksum and none is DETACHED, and every frame (and reference) lies in the bytes written and in a
 *   view, matches its CRC and decodes; False otherwise, the arrays then unspecified: the caller's
 *   general path reads the batch again, and names what failed. */
PyObject *py_read_transitions(PyObject *module, PyObject *args);

#define TRANSITION_READ_METHODS                                                                                    \
    {"read_transitions", py_read_transitions, METH_VARARGS,                                                        \
     "read_transitions(rows, ring, steps, stack, out, threads) -> bool\n\n"                                        \
     "A batch of transitions in one call: rows checked and unpacked, stacks followed, frames decoded; False\n"     \
     "(the arrays unspecified) when a row or frame fails or a row is DETACHED."},

#endif
