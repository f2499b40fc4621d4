/* add's fast path, its writes: see fast_add.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "crc32.h"
#include "fast_add.h"
#include "frame_compress.h"
#include "frame_entries.h"
#include "little_endian.h"
#include "lz4_api.h"
#include "reference_ahead.h"
#include "reference_groups.h"
#include "ring_slots.h"
#include "row_checksum.h"
#include "row_layout.h"
#include "work_pool.h"

/* Writes all of data at offset of descriptor (pwrite may write less than asked); 0, or -1 with errno. */
static int
write_all(int descriptor, const char *data, size_t length, off_t offset)
{
    while (length > 0) {
        ssize_t written = pwrite(descriptor, data, length, offset);
        if (written < 0 && errno == EINTR) {
            continue;
        }
        if (written <= 0) {
            if (written == 0) {
                errno = ENOSPC;
            }
            return -1;
        }
        data += written;
        length -= (size_t)written;
        offset += written;
    }
    return 0;
}

/* The frame-table entries of frames first_step, first_step + 1, ...: each block's ring position (the
 * first at `position`, the others after it), length, CRC-32 (seeded with step * seed_multiplier + its
 * link) and link prev[i]. */
static void
write_entries(unsigned char *entries, long long frame_slots, const EntryLayout *layout, long long first_step,
              Py_ssize_t n, long long position, const char *blocks, const int *lengths, const uint32_t *prev,
              const int64_t *refs, uint32_t seed_multiplier)
{
    const char *block = blocks;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t step = first_step + i;
        uint64_t ref = refs == NULL ? 0 : (uint64_t)refs[i];
        unsigned char *entry = entries + ring_slot(step, frame_slots) * layout->size;
        uint32_t seed = (uint32_t)((uint64_t)step * seed_multiplier + prev[i] + ref * REF_SEED_MULTIPLIER);
        entry_write(layout, entry, (uint64_t)position, (uint64_t)lengths[i],
                    frame_crc32(seed, (const unsigned char *)block, (size_t)lengths[i]), prev[i], ref);
        position += lengths[i];
        block += lengths[i];
    }
}

PyObject *
py_append_frames(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer frames, table;
    PyObject *deltas_arg;
    long long first_step, frame_slots, offset, segment_bytes, segment_start;
    EntryLayout layout;
    unsigned long seed_multiplier;
    int descriptor, threads;
    PyObject *ahead = Py_None;
    if (!PyArg_ParseTuple(args, "y*OLw*L" ENTRY_LAYOUT_FORMAT "kiLLLi|O:append_frames", &frames, &deltas_arg, &first_step, &table,
                          &frame_slots, ENTRY_LAYOUT_FIELDS(layout), &seed_multiplier, &descriptor, &segment_start,
                          &offset, &segment_bytes, &threads, &ahead)) {
        return NULL;
    }
    PyObject *result = NULL, *deltas = NULL;
    char *blocks = NULL;
    int *lengths = NULL;
    uint32_t *prev = NULL;
    PendingFrames *pending = NULL;
    deltas = PySequence_Fast(deltas_arg, "prev_deltas must be a sequence of ints");
    if (deltas == NULL) {
        goto done;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(deltas);
    Py_ssize_t frame_nbytes = n > 0 ? frames.len / n : 0;
    /* the table's geometry, checked as for reading (segment_bytes and bytes_written: positive) */
    FrameTable ring = {.table = &table, .frame_slots = frame_slots, .layout = layout, .segment_bytes = segment_bytes,
                       .bytes_written = 0};
    if (frame_table_check(&ring, "append_frames") < 0) {
        goto done;
    }
    if (n <= 0 || frame_nbytes <= 0 || frame_nbytes > INT_MAX / 2 || frames.len != n * frame_nbytes
        || first_step < 0 || offset < 0 || offset > segment_bytes || segment_start < 0 || threads < 1
        || threads > POOL_MAX_THREADS) {
        PyErr_SetString(PyExc_ValueError,
                        "append_frames: frames, first_step, segment_start, offset or threads out of range");
        goto done;
    }
    if (ahead != Py_None && (pending = pending_frames_of(ahead, n, frame_nbytes)) == NULL) {
        goto done;
    }
    int bound = LZ4_compressBound((int)frame_nbytes);
    prev = PyMem_Malloc((size_t)n * sizeof(uint32_t));
    if (pending == NULL) { /* else the capsule's */
        lengths = PyMem_Malloc((size_t)n * sizeof(int));
        blocks = PyMem_Malloc((size_t)n * (size_t)bound);
    }
    if (prev == NULL || (pending == NULL && (lengths == NULL || blocks == NULL))) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long delta = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(deltas, i));
        if (delta == (unsigned long)-1 && PyErr_Occurred()) {
            goto done;
        }
        prev[i] = (uint32_t)delta;
    }
    /* a block must fit its entry's length field */
    int max_length = layout.length_bytes == 2 ? 0xFFFF : INT_MAX;
    long long total;
    int failed = 0;
    char *written = blocks;
    int *sizes = lengths;
    Py_BEGIN_ALLOW_THREADS
    if (pending != NULL) { /* compressed ahead (the caller runs it now if no helper took it) */
        total = pending_frames_take(pending, &written, &sizes);
        for (Py_ssize_t i = 0; total >= 0 && i < n; i++) {
            total = sizes[i] > max_length ? -1 : total;
        }
    }
    else {
        total = compress_frames((const char *)frames.buf, n, (int)frame_nbytes, blocks, lengths, max_length, NULL,
                                NULL, threads);
    }
    if (total >= 0 && offset + total <= segment_bytes) {
        failed = write_all(descriptor, written, (size_t)total, (off_t)offset) < 0;
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    if (total < 0 || offset + total > segment_bytes) {
        result = PyLong_FromLong(-1);
        goto done;
    }
    write_entries((unsigned char *)table.buf, frame_slots, &layout, first_step, n, segment_start + offset, written,
                  sizes, prev, NULL, (uint32_t)seed_multiplier);
    result = PyLong_FromLongLong(total);
done:
    PyMem_Free(blocks);
    PyMem_Free(lengths);
    PyMem_Free(prev);
    Py_XDECREF(deltas);
    PyBuffer_Release(&frames);
    PyBuffer_Release(&table);
    return result;
}

/* The prev_deltas of n frames, as u32. NULL with a Python error. */
static uint32_t *
prev_deltas_of(PyObject *deltas, Py_ssize_t n)
{
    uint32_t *prev = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(uint32_t));
    if (prev == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long delta = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(deltas, i));
        if (delta == (unsigned long)-1 && PyErr_Occurred()) {
            PyMem_Free(prev);
            return NULL;
        }
        prev[i] = (uint32_t)delta;
    }
    return prev;
}

long long
append_reference_core(ReferenceGroups *groups, const char *frames, Py_ssize_t n, Py_ssize_t frame_nbytes,
                      const uint32_t *prev, long long first_step, long long frame_tail, unsigned char *table,
                      long long frame_slots, const EntryLayout *layout, uint32_t seed_multiplier, int descriptor,
                      long long segment_start, long long offset, long long segment_bytes, int threads,
                      AheadFrame *ahead)
{
    long long result = -2;
    char *blocks = NULL;
    int *lengths = PyMem_Malloc((size_t)n * sizeof(int));
    int64_t *refs = PyMem_Malloc((size_t)n * sizeof(int64_t));
    if (lengths == NULL || refs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    long long total = reference_groups_encode(groups, frames, n, frame_nbytes, first_step, frame_tail, threads, ahead,
                                              &blocks, lengths, refs);
    if (total < 0) {
        goto done;
    }
    int max_length = layout->length_bytes == 2 ? 0xFFFF : INT_MAX, fits = offset + total <= segment_bytes;
    for (Py_ssize_t i = 0; i < n; i++) {
        fits = fits && lengths[i] <= max_length;
    }
    if (!fits) { /* the caller's general path starts the next segment (it assigns the frames again) */
        reference_groups_undo(groups);
        result = -1;
        goto done;
    }
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = write_all(descriptor, blocks, (size_t)total, (off_t)offset) < 0;
    Py_END_ALLOW_THREADS
    if (failed) {
        reference_groups_undo(groups);
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    write_entries(table, frame_slots, layout, first_step, n, segment_start + offset, blocks, lengths, prev, refs,
                  seed_multiplier);
    result = total;
done:
    PyMem_Free(blocks);
    PyMem_Free(lengths);
    PyMem_Free(refs);
    return result;
}

PyObject *
py_append_reference_frames(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer frames, table;
    PyObject *groups_arg, *deltas_arg, *ahead_arg = Py_None;
    long long first_step, frame_tail, frame_slots, offset, segment_bytes, segment_start;
    EntryLayout layout;
    unsigned long seed_multiplier;
    int descriptor, threads;
    if (!PyArg_ParseTuple(args, "Oy*OLLw*L" ENTRY_LAYOUT_FORMAT "kiLLLi|O:append_reference_frames", &groups_arg,
                          &frames, &deltas_arg, &first_step, &frame_tail, &table, &frame_slots,
                          ENTRY_LAYOUT_FIELDS(layout), &seed_multiplier, &descriptor, &segment_start, &offset,
                          &segment_bytes, &threads, &ahead_arg)) {
        return NULL;
    }
    PyObject *result = NULL, *deltas = NULL;
    uint32_t *prev = NULL;
    ReferenceGroups *groups = reference_groups_from(groups_arg);
    AheadFrame *ahead = groups == NULL ? NULL : ahead_frame_of(ahead_arg);
    deltas = groups == NULL || PyErr_Occurred() ? NULL
                                                : PySequence_Fast(deltas_arg, "prev_deltas must be a sequence of ints");
    if (deltas == NULL) {
        goto done;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(deltas);
    Py_ssize_t frame_nbytes = n > 0 ? frames.len / n : 0;
    FrameTable ring = {.table = &table, .frame_slots = frame_slots, .layout = layout, .segment_bytes = segment_bytes,
                       .bytes_written = 0};
    if (frame_table_check(&ring, "append_reference_frames") < 0) {
        goto done;
    }
    if (n <= 0 || frames.len != n * frame_nbytes || first_step < 0 || offset < 0 || offset > segment_bytes
        || segment_start < 0 || threads < 1 || threads > POOL_MAX_THREADS || layout.ref_bytes == 0) {
        PyErr_SetString(PyExc_ValueError, "append_reference_frames: frames, first_step, segment_start, offset, "
                        "threads or entry layout out of range");
        goto done;
    }
    prev = prev_deltas_of(deltas, n);
    if (prev == NULL) {
        goto done;
    }
    long long total = append_reference_core(groups, frames.buf, n, frame_nbytes, prev, first_step, frame_tail,
                                            (unsigned char *)table.buf, frame_slots, &layout,
                                            (uint32_t)seed_multiplier, descriptor, segment_start, offset,
                                            segment_bytes, threads, ahead);
    result = total == -2 ? NULL : PyLong_FromLongLong(total);
done:
    PyMem_Free(prev);
    Py_XDECREF(deltas);
    PyBuffer_Release(&frames);
    PyBuffer_Release(&table);
    return result;
}

void
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
    Py_buffer table, actions;
    long long row_slots, first_step;
    unsigned long frame_lead;
    PyObject *layout_arg, *rewards_arg, *flags_arg, *previous_arg;
    if (!PyArg_ParseTuple(args, "w*LLkOOOy*O:write_rows", &table, &row_slots, &first_step, &frame_lead, &layout_arg,
                          &rewards_arg, &flags_arg, &actions, &previous_arg)) {
        return NULL;
    }
    PyObject *result = NULL, *rewards = NULL, *flags = NULL, *previous = NULL;
    const RowLayout *layout = row_layout_from(layout_arg, "layout");
    if (layout == NULL) {
        goto done;
    }
    rewards = PySequence_Fast(rewards_arg, "rewards must be a sequence of floats");
    flags = rewards == NULL ? NULL : PySequence_Fast(flags_arg, "flags must be a sequence of ints");
    previous = flags == NULL ? NULL : PySequence_Fast(previous_arg, "previous_steps must be a sequence of ints");
    if (previous == NULL) {
        goto done;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rewards);
    Py_ssize_t row_size = layout->size, action_bytes = layout->action_bytes;
    if (n <= 0 || row_slots <= 0 || first_step < 0 || table.len != row_slots * row_size
        || actions.len != n * action_bytes || PySequence_Fast_GET_SIZE(flags) != n
        || PySequence_Fast_GET_SIZE(previous) != n || (n - 1) >> (8 * layout->env_bytes - layout->env_shift) != 0) {
        PyErr_SetString(PyExc_ValueError, "write_rows: table, row layout or argument lengths out of range");
        goto done;
    }
    unsigned char *rows = (unsigned char *)table.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        double reward = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(rewards, i));
        long flag = PyLong_AsLong(PySequence_Fast_GET_ITEM(flags, i));
        long long before = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(previous, i));
        if (PyErr_Occurred()) {
            goto done;
        }
        write_row(rows, row_slots, layout, first_step + i, (uint32_t)frame_lead, i, reward, flag,
                  (const char *)actions.buf + i * action_bytes, before);
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(rewards);
    Py_XDECREF(flags);
    Py_XDECREF(previous);
    PyBuffer_Release(&table);
    PyBuffer_Release(&actions);
    return result;
}
