/* A sampled batch of transitions read in one call: see transition_read.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <string.h>

#include "argument_arrays.h"
#include "pool/work_pool.h"
#include "ring/frame_reads.h"
#include "ring_slots.h"
#include "rows/row_checksum.h"
#include "rows/row_gather.h"
#include "rows/transition_read.h"

/* The rows of steps: checked copies, unpacked into the batch's arrays (as gather_fields), discount 0
 * where one terminated, and each next_obs frame step as its stack's newest. 1, or 0 when a row fails its
 * checksum, names an env beyond num_envs or is DETACHED (the caller's general path reads the batch). n > 0. */
static int
read_rows(const RowsArgument *table, const int64_t *step, Py_ssize_t n, const RowArrays *arrays, float *discount,
          int64_t *frames, Py_ssize_t columns, const FrameTable *ring)
{
    const RowLayout *layout = table->layout;
    const unsigned char *rows = (const unsigned char *)table->table.buf;
    Py_ssize_t row_size = layout->size;
    long long row_slots = table->row_slots;
    int64_t row_anchor = step[0] - ring_slot(step[0], row_slots);
    for (Py_ssize_t i = 0; i < n; i++) { /* sampled rows lie far apart: overlap their cache misses */
        __builtin_prefetch(rows + ring_slot_near(step[i], row_anchor, row_slots) * row_size, 0, 0);
    }
    unsigned char copy[ROW_COPY_BYTES];
    for (Py_ssize_t i = 0; i < n; i++) {
        copy_row(copy, rows + ring_slot_near(step[i], row_anchor, row_slots) * row_size, row_size);
        if (!row_matches(copy, row_size, step[i], table->version_3, layout->unchecked) || !row_env_ok(layout, copy)
            || (copy[layout->flags] & layout->detached) != 0) {
            return 0;
        }
        int64_t next_frame = row_next_frame(layout, copy, step[i]);
        frames[i * columns + columns - 1] = next_frame;
        __builtin_prefetch(table_entry(ring, next_frame), 0, 0);
        if (unpack_row(layout, copy, i, arrays) & layout->terminated) {
            discount[i] = 0.0f;
        }
    }
    return 1;
}

/* The stacks, back from each next_obs frame through the entries' links (as follow_links). */
static void
follow_stacks(const FrameTable *ring, int64_t *frames, Py_ssize_t n, Py_ssize_t columns)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t *stack = frames + i * columns;
        int64_t frame = stack[columns - 1];
        for (Py_ssize_t c = columns - 2; c >= 0; c--) {
            frame -= entry_prev(ring->layout, table_entry(ring, frame));
            stack[c] = frame;
        }
    }
}

/* Zeroes each padding frame of the decoded stacks: column c < stack_size holding the frame step of
 * column c + 1 (stacking.padding_columns). */
static void
zero_padding_frames(const int64_t *frames, Py_ssize_t n, Py_ssize_t columns, char *pixels, size_t frame_nbytes)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *stack = frames + i * columns;
        for (Py_ssize_t c = 0; c + 1 < columns; c++) {
            if (stack[c] == stack[c + 1]) {
                memset(pixels + (size_t)(i * columns + c) * frame_nbytes, 0, frame_nbytes);
            }
        }
    }
}

PyObject *
py_read_transitions(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *rows_arg, *ring_arg;
    Py_buffer steps_buf, pixels, action, reward, terminated, truncated, env_index, discount;
    Py_ssize_t stack_size;
    int zero_padding, threads;
    if (!PyArg_ParseTuple(args, "OOy*(np)(w*w*w*w*w*w*w*)i:read_transitions", &rows_arg, &ring_arg, &steps_buf,
                          &stack_size, &zero_padding, &pixels, &action, &reward, &terminated, &truncated, &env_index,
                          &discount, &threads)) {
        return NULL;
    }
    PyObject *result = NULL;
    int64_t *frames = NULL;
    RowsArgument table;
    RingArgument ring;
    int rows_parsed = rows_parse(rows_arg, &table, 0, "read_transitions") == 0;
    int ring_parsed = rows_parsed && ring_parse(ring_arg, &ring, 0, "read_transitions") == 0;
    Py_ssize_t n = steps_buf.len / 8, columns = stack_size + 1, m = n * columns;
    if (!ring_parsed) {
        goto done;
    }
    size_t frame_nbytes = (size_t)ring.frames.geometry->frame_nbytes;
    if (table.layout->size > ROW_COPY_BYTES || action.len != n * table.layout->action_bytes || stack_size < 1
        || stack_size > 1024 || pixels.len != m * (Py_ssize_t)frame_nbytes || threads < 1
        || threads > POOL_MAX_THREADS) {
        PyErr_SetString(PyExc_ValueError, "read_transitions: rows, stack_size, pixels, action or threads out of range");
        goto done;
    }
    if (check_array(&steps_buf, "steps", n, 8) < 0 || check_array(&reward, "reward", n, 4) < 0
        || check_array(&terminated, "terminated", n, 1) < 0 || check_array(&truncated, "truncated", n, 1) < 0
        || check_array(&env_index, "env_index", n, 8) < 0 || check_array(&discount, "discount", n, 4) < 0) {
        goto done;
    }
    if (n == 0) {
        result = Py_NewRef(Py_True);
        goto done;
    }
    frames = PyMem_Malloc((size_t)m * sizeof(int64_t));
    if (frames == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    RowArrays arrays = {(int64_t *)env_index.buf, (char *)reward.buf, (unsigned char *)terminated.buf,
                        (unsigned char *)truncated.buf, (char *)action.buf};
    if (!read_rows(&table, (const int64_t *)steps_buf.buf, n, &arrays, (float *)discount.buf, frames, columns,
                   &ring.frames)) {
        result = Py_NewRef(Py_False);
        goto done;
    }
    follow_stacks(&ring.frames, frames, n, columns);
    int status = ring_decode(&ring, frames, m, columns, (char *)pixels.buf, threads);
    if (status == 0 && zero_padding) {
        zero_padding_frames(frames, n, columns, (char *)pixels.buf, frame_nbytes);
    }
    result = status < 0 ? NULL : Py_NewRef(status == 0 ? Py_True : Py_False);
done:
    PyMem_Free(frames);
    if (ring_parsed) {
        ring_release(&ring);
    }
    if (rows_parsed) {
        rows_release(&table);
    }
    PyBuffer_Release(&steps_buf);
    PyBuffer_Release(&pixels);
    PyBuffer_Release(&action);
    PyBuffer_Release(&reward);
    PyBuffer_Release(&terminated);
    PyBuffer_Release(&truncated);
    PyBuffer_Release(&env_index);
    PyBuffer_Release(&discount);
    return result;
}
