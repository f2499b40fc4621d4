/* A sampled batch of transitions read in one call: see transition_read.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <string.h>

#include "argument_arrays.h"
#include "frame_entries.h"
#include "frame_sources.h"
#include "link_follow.h"
#include "lz4_decode.h"
#include "reference_table.h"
#include "ring_slots.h"
#include "row_checksum.h"
#include "row_gather.h"
#include "transition_read.h"
#include "work_pool.h"

/* The frame steps of a batch's stacks and their table slots, (n, stack_size + 1) each, newest last. */
typedef struct {
    int64_t *frames, *slots;
    Py_ssize_t stack_size;
    const unsigned char *entries; /* the frame table */
    const EntryLayout *entry;
    long long frame_slots;
    int64_t anchor; /* a multiple of frame_slots near the batch's frames (ring_slot_near) */
} Stacks;

/* The rows of steps: checked copies, unpacked into the batch's arrays (as gather_fields), discount 0
 * where one terminated, and each next_obs frame step and slot as its stack's newest. 1, or 0 when a row
 * fails its checksum or is DETACHED (the caller's general path reads the batch). n > 0. */
static int
read_rows(const RowLayout *layout, const unsigned char *rows, long long row_slots, const int64_t *step, Py_ssize_t n,
          int version_3, const RowArrays *arrays, float *discount, int64_t *row_slot, Stacks *stacks)
{
    Py_ssize_t row_size = layout->size, columns = stacks->stack_size + 1;
    int64_t row_anchor = step[0] - ring_slot(step[0], row_slots);
    for (Py_ssize_t i = 0; i < n; i++) { /* sampled rows lie far apart: overlap their cache misses */
        row_slot[i] = ring_slot_near(step[i], row_anchor, row_slots);
        __builtin_prefetch(rows + row_slot[i] * row_size, 0, 0);
    }
    unsigned char copy[ROW_COPY_BYTES];
    for (Py_ssize_t i = 0; i < n; i++) {
        copy_row(copy, rows + row_slot[i] * row_size, row_size);
        if (!row_matches(copy, row_size, step[i], version_3, layout->unchecked)
            || (copy[layout->flags] & layout->detached) != 0) {
            return 0;
        }
        int64_t next_frame = row_next_frame(layout, copy, step[i]);
        if (i == 0) {
            stacks->anchor = next_frame - ring_slot(next_frame, stacks->frame_slots);
        }
        Py_ssize_t newest = i * columns + stacks->stack_size;
        stacks->frames[newest] = next_frame;
        stacks->slots[newest] = ring_slot_near(next_frame, stacks->anchor, stacks->frame_slots);
        __builtin_prefetch(stacks->entries + stacks->slots[newest] * stacks->entry->size, 0, 0);
        if (unpack_row(layout, copy, i, arrays) & layout->terminated) {
            discount[i] = 0.0f;
        }
    }
    return 1;
}

/* The stacks, back from each next_obs frame through the entries' links (as follow_links). */
static void
follow_stacks(const Stacks *stacks, Py_ssize_t n)
{
    Py_ssize_t stack_size = stacks->stack_size, columns = stack_size + 1;
    const EntryLayout *entry = stacks->entry;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t *stack = stacks->frames + i * columns, *stack_slots = stacks->slots + i * columns;
        int64_t frame = stack[stack_size];
        for (Py_ssize_t c = stack_size - 1; c >= 0; c--) {
            frame -= entry_prev(entry, stacks->entries + stack_slots[c + 1] * entry->size);
            stack[c] = frame;
            stack_slots[c] = ring_slot_near(frame, stacks->anchor, stacks->frame_slots);
        }
    }
}

/* Zeroes each padding frame of the decoded stacks: column c < stack_size holding the frame step of
 * column c + 1 (stacking.padding_columns). */
static void
zero_padding_frames(const int64_t *frames, Py_ssize_t n, Py_ssize_t stack_size, char *pixels, size_t frame_nbytes)
{
    Py_ssize_t columns = stack_size + 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *stack = frames + i * columns;
        for (Py_ssize_t c = 0; c < stack_size; c++) {
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
    Py_buffer rows_buf, table, steps_buf, pixels, action, reward, terminated, truncated, env_index, discount;
    long long row_slots;
    int version_3, zero_padding, threads;
    FrameTable frame_table = {.table = &table};
    unsigned long seed_multiplier;
    Py_ssize_t stack_size, depth, row_nbytes;
    PyObject *views_arg, *row_layout_arg, *keys_arg;
    if (!PyArg_ParseTuple(args, "y*LOpy*L" ENTRY_LAYOUT_FORMAT "kLLOL(nnO)y*npw*w*w*w*w*w*w*i:read_transitions", &rows_buf,
                          &row_slots, &row_layout_arg, &version_3, &table, &frame_table.frame_slots,
                          ENTRY_LAYOUT_FIELDS(frame_table.layout), &seed_multiplier, &frame_table.segment_bytes,
                          &frame_table.bytes_written, &views_arg, &frame_table.base, &depth, &row_nbytes, &keys_arg, &steps_buf,
                          &stack_size,
                          &zero_padding, &pixels, &action, &reward, &terminated, &truncated, &env_index, &discount,
                          &threads)) {
        return NULL;
    }
    frame_table.seed_multiplier = (uint32_t)seed_multiplier;
    PyObject *result = NULL, *views = NULL;
    char *scratch = NULL;
    Py_buffer *buffers = NULL;
    Py_ssize_t acquired = 0;
    Py_ssize_t n = steps_buf.len / 8, columns = stack_size + 1, m = n * columns;
    Py_ssize_t frame_nbytes = m > 0 ? pixels.len / m : 0;
    const RowLayout *layout = row_layout_from(row_layout_arg, "row_layout");
    int keys_error;
    KeyFrames *keys = key_frames_from(keys_arg, &keys_error);
    if (layout == NULL || keys_error || frame_table_check(&frame_table, "read_transitions") < 0) {
        goto done;
    }
    Py_ssize_t row_size = layout->size;
    if (row_slots <= 0 || rows_buf.len != row_slots * row_size || row_size > ROW_COPY_BYTES
        || action.len != n * layout->action_bytes || stack_size < 1 || stack_size > 1024
        || (m > 0 && (frame_nbytes <= 0 || frame_nbytes > INT_MAX)) || pixels.len != m * frame_nbytes || threads < 1
        || threads > POOL_MAX_THREADS) {
        PyErr_SetString(PyExc_ValueError, "read_transitions: rows, stack_size, pixels, action or threads out of range");
        goto done;
    }
    if (depth != -1 && reference_arguments_check(depth, row_nbytes, frame_nbytes > 0 ? frame_nbytes : 1,
                                                 "read_transitions") < 0) {
        goto done;
    }
    if (check_array(&steps_buf, "steps", n, 8) < 0 || check_array(&reward, "reward", n, 4) < 0
        || check_array(&terminated, "terminated", n, 1) < 0 || check_array(&truncated, "truncated", n, 1) < 0
        || check_array(&env_index, "env_index", n, 8) < 0 || check_array(&discount, "discount", n, 4) < 0) {
        goto done;
    }
    if (views_prepare(views_arg, depth < 0 ? m : m * (depth + 1), &views, &buffers) < 0) {
        goto done;
    }
    if (n == 0) {
        result = Py_NewRef(Py_True);
        goto done;
    }
    /* frames, their table slots and lengths int64[m], sources[m], checksums and seeds uint32[m], row slots
     * int64[n] */
    size_t count = (size_t)m;
    scratch = PyMem_Malloc(count * (3 * sizeof(int64_t) + sizeof(const char *) + 2 * sizeof(uint32_t))
                           + (size_t)n * sizeof(int64_t));
    if (scratch == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *frames = (int64_t *)scratch;
    int64_t *frame_slot = frames + count, *lengths = frame_slot + count, *row_slot = lengths + count;
    const char **sources = (const char **)(row_slot + n);
    uint32_t *checksums = (uint32_t *)(sources + count), *seeds = checksums + count;

    RowArrays arrays = {(int64_t *)env_index.buf, (char *)reward.buf, (unsigned char *)terminated.buf,
                        (unsigned char *)truncated.buf, (char *)action.buf};
    Stacks stacks = {frames, frame_slot, stack_size, (const unsigned char *)table.buf, &frame_table.layout,
                     frame_table.frame_slots, 0};
    if (!read_rows(layout, (const unsigned char *)rows_buf.buf, row_slots, (const int64_t *)steps_buf.buf, n,
                   version_3, &arrays, (float *)discount.buf, row_slot, &stacks)) {
        result = Py_NewRef(Py_False);
        goto done;
    }
    follow_stacks(&stacks, n);
    if (depth >= 0) {
        int status = reference_decode_table(&frame_table, views, frames, m, depth, row_nbytes, keys,
                                            (char *)pixels.buf, frame_nbytes, threads, buffers, &acquired);
        if (status == 0 && zero_padding) {
            zero_padding_frames(frames, n, stack_size, (char *)pixels.buf, (size_t)frame_nbytes);
        }
        result = status < 0 ? NULL : Py_NewRef(status == 0 ? Py_True : Py_False);
        goto done;
    }
    int located = locate_entries(&frame_table, views, frames, frame_slot, m, sources, lengths, checksums, seeds,
                                 buffers, &acquired);
    if (located != 0) {
        result = located < 0 ? NULL : Py_NewRef(Py_False);
        goto done;
    }
    FrameBatch batch = {sources, lengths, checksums, seeds, (char *)pixels.buf, (int)frame_nbytes, m};
    Py_ssize_t bad;
    Py_BEGIN_ALLOW_THREADS
    bad = decode_frames(&batch, threads);
    Py_END_ALLOW_THREADS
    if (bad == -1 && zero_padding) {
        zero_padding_frames(frames, n, stack_size, (char *)pixels.buf, (size_t)frame_nbytes);
    }
    result = Py_NewRef(bad == -1 ? Py_True : Py_False);
done:
    views_release(views, buffers, acquired);
    PyMem_Free(scratch);
    PyBuffer_Release(&rows_buf);
    PyBuffer_Release(&table);
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
