/* add's transition rows written in one call (rows/transitions.py's TransitionTable.write_continuations):
 * each env's row at its step, checksummed, and the link to it from the row of its episode's transition
 * before. The general path (TransitionTable.write and link) writes the same bytes. */
#ifndef MMREPLAY_ROW_WRITES_H
#define MMREPLAY_ROW_WRITES_H

#include <Python.h>

/* write_rows(rows, first_step, frame_lead, rewards, flags, actions, previous_steps) -> None
 *   rows: (table, row_slots, layout, False) as row_layout.h's rows_parse takes it, the table writable.
 *   The rows of envs 0, 1, ... at steps first_step + env: each gets next_delta 0, frame_lead, its env,
 *   rewards[env] (a float, stored as float32), flags[env] (a byte) and its equal part of actions
 *   (bytes), then its checksum. Then the row of previous_steps[env], the env's transition before, gets
 *   its next_delta link to the new row. */
PyObject *py_write_rows(PyObject *module, PyObject *args);

#define ROW_WRITES_METHODS                                                                                         \
    {"write_rows", py_write_rows, METH_VARARGS,                                                                    \
     "write_rows(rows, first_step, frame_lead, rewards, flags, actions, previous_steps) -> None\n\n"               \
     "Write the transition rows of envs 0, 1, ... with their checksums, and link each env's previous row."},

#endif
