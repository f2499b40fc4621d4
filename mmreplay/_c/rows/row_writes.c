/* add's transition rows written in one call: see row_writes.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "little_endian.h"
#include "ring_slots.h"
#include "rows/row_checksum.h"
#include "rows/row_layout.h"
#include "rows/row_writes.h"

/* One row: env's transition at step, and the link to it from the row of step before. */
static void
write_row(unsigned char *rows, long long row_slots, const RowLayout *layout, int64_t step, uint32_t frame_lead,
          Py_ssize_t env, double reward, long flag, const char *action, long long before)
{
    Py_ssize_t row_size = layout->size;
    unsigned char *row = rows + ring_slot(step, row_slots) * row_size;
    float single = (float)reward;
    uint32_t bits;
    memcpy(&bits, &single, 4);
    write_le(row + layout->next_delta, 0, layout->next_delta_bytes);
    write_le(row + layout->frame_lead, frame_lead, 4);
    if (layout->env_shift != 0) { /* env and flags share a word */
        write_le(row + layout->env, (uint64_t)flag | (uint64_t)env << layout->env_shift, layout->env_bytes);
    }
    else {
        write_le(row + layout->env, (uint64_t)env, layout->env_bytes);
        row[layout->flags] = (unsigned char)flag;
    }
    write_le(row + layout->reward, bits, 4);
    memcpy(row + layout->action, action, (size_t)layout->action_bytes);
    write_le(row + layout->checksum, row_crc(row, row_size, step, layout->unchecked), 4);
    write_le(rows + ring_slot(before, row_slots) * row_size + layout->next_delta, (uint64_t)(step - before),
             layout->next_delta_bytes);
}

PyObject *
py_write_rows(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *rows_arg, *rewards_arg, *flags_arg, *previous_arg;
    long long first_step;
    unsigned long frame_lead;
    Py_buffer actions;
    if (!PyArg_ParseTuple(args, "OLkOOy*O:write_rows", &rows_arg, &first_step, &frame_lead, &rewards_arg, &flags_arg,
                          &actions, &previous_arg)) {
        return NULL;
    }
    PyObject *result = NULL, *rewards = NULL, *flags = NULL, *previous = NULL;
    RowsArgument table;
    int parsed = rows_parse(rows_arg, &table, 1, "write_rows") == 0;
    if (!parsed) {
        goto done;
    }
    const RowLayout *layout = table.layout;
    rewards = PySequence_Fast(rewards_arg, "rewards must be a sequence of floats");
    flags = rewards == NULL ? NULL : PySequence_Fast(flags_arg, "flags must be a sequence of ints");
    previous = flags == NULL ? NULL : PySequence_Fast(previous_arg, "previous_steps must be a sequence of ints");
    if (previous == NULL) {
        goto done;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rewards), action_bytes = layout->action_bytes;
    if (n <= 0 || first_step < 0 || table.version_3 || actions.len != n * action_bytes
        || PySequence_Fast_GET_SIZE(flags) != n || PySequence_Fast_GET_SIZE(previous) != n
        || (n - 1) >> (8 * layout->env_bytes - layout->env_shift) != 0) {
        PyErr_SetString(PyExc_ValueError, "write_rows: row layout or argument lengths out of range");
        goto done;
    }
    unsigned char *rows = (unsigned char *)table.table.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        double reward = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(rewards, i));
        long flag = PyLong_AsLong(PySequence_Fast_GET_ITEM(flags, i));
        long long before = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(previous, i));
        if (PyErr_Occurred()) {
            goto done;
        }
        write_row(rows, table.row_slots, layout, first_step + i, (uint32_t)frame_lead, i, reward, flag,
                  (const char *)actions.buf + i * action_bytes, before);
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(rewards);
    Py_XDECREF(flags);
    Py_XDECREF(previous);
    if (parsed) {
        rows_release(&table);
    }
    PyBuffer_Release(&actions);
    return result;
}
