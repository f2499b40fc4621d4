/* Frames located through a frame ring's table: see frame_entries.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "argument_arrays.h"
#include "crc32.h"
#include "frame_entries.h"
#include "frame_sources.h"
#include "little_endian.h"

#define ENTRY_LAYOUT_CAPSULE "mmreplay._lz4batch.entry_layout"
#define ENTRY_LAYOUT_TUPLE "nnnnnnnnnnnnn"
#define ENTRY_LAYOUT_POINTERS(layout)                                                                              \
    &(layout)->size, &(layout)->position, &(layout)->length, &(layout)->checksum, &(layout)->link,                \
        &(layout)->length_bytes, &(layout)->position_bytes, &(layout)->link_bytes, &(layout)->prev_bits,           \
        &(layout)->ref, &(layout)->ref_bytes, &(layout)->ref_shift, &(layout)->ref_bits

static void
entry_layout_free(PyObject *capsule)
{
    PyMem_Free(PyCapsule_GetPointer(capsule, ENTRY_LAYOUT_CAPSULE));
}

int
entry_layout_converter(PyObject *object, void *address)
{
    EntryLayout *layout = address;
    if (PyCapsule_CheckExact(object)) {
        const EntryLayout *held = PyCapsule_GetPointer(object, ENTRY_LAYOUT_CAPSULE);
        if (held == NULL) {
            return 0;
        }
        *layout = *held;
        return 1;
    }
    if (!PyTuple_Check(object)) {
        PyErr_Format(PyExc_TypeError, "layout must be entry_layout()'s capsule or a tuple of 13 ints; got %s",
                     Py_TYPE(object)->tp_name);
        return 0;
    }
    return PyArg_ParseTuple(object, ENTRY_LAYOUT_TUPLE ";layout must hold 13 ints", ENTRY_LAYOUT_POINTERS(layout));
}

PyObject *
py_entry_layout(PyObject *module, PyObject *args)
{
    (void)module;
    EntryLayout parsed;
    if (!PyArg_ParseTuple(args, ENTRY_LAYOUT_TUPLE ":entry_layout", ENTRY_LAYOUT_POINTERS(&parsed))) {
        return NULL;
    }
    EntryLayout *held = PyMem_Malloc(sizeof(EntryLayout));
    if (held == NULL) {
        return PyErr_NoMemory();
    }
    *held = parsed;
    PyObject *capsule = PyCapsule_New(held, ENTRY_LAYOUT_CAPSULE, entry_layout_free);
    if (capsule == NULL) {
        PyMem_Free(held);
    }
    return capsule;
}

/* Whether a field of `bytes` bytes (1 to 8) at offset lies inside an entry of size bytes. */
static int
field_fits(Py_ssize_t offset, Py_ssize_t bytes, Py_ssize_t size)
{
    return bytes >= 1 && bytes <= 8 && offset >= 0 && offset + bytes <= size;
}

/* Whether every field lies inside the entry, length is 2 or 4 bytes wide, position 4 or 8, and the links'
 * bits lie inside their fields. */
static int
layout_fits(const EntryLayout *layout)
{
    Py_ssize_t size = layout->size;
    return size > 0 && (layout->position_bytes == 4 || layout->position_bytes == 8)
           && field_fits(layout->position, layout->position_bytes, size)
           && (layout->length_bytes == 2 || layout->length_bytes == 4)
           && field_fits(layout->length, layout->length_bytes, size) && field_fits(layout->checksum, 4, size)
           && field_fits(layout->link, layout->link_bytes, size) && layout->prev_bits >= 1
           && layout->prev_bits <= 8 * layout->link_bytes
           && (layout->ref_bytes == 0
               || (field_fits(layout->ref, layout->ref_bytes, size) && layout->ref_shift >= 0 && layout->ref_bits >= 1
                   && layout->ref_shift + layout->ref_bits <= 8 * layout->ref_bytes));
}

int
frame_table_check(const FrameTable *frames, const char *function)
{
    if (frames->frame_slots <= 0 || frames->segment_bytes <= 0 || frames->bytes_written < 0
        || !layout_fits(&frames->layout)) {
        PyErr_Format(PyExc_ValueError, "%s: frame_slots, segment_bytes, bytes_written or entry layout out of range",
                     function);
        return -1;
    }
    if (frames->table->len != frames->frame_slots * frames->layout.size) {
        PyErr_Format(PyExc_ValueError, "%s: table has %zd bytes; expected %lld entries of %zd bytes", function,
                     frames->table->len, frames->frame_slots, frames->layout.size);
        return -1;
    }
    return 0;
}

int
locate_entries(const FrameTable *frames, PyObject *views, const int64_t *steps, const int64_t *slots,
               Py_ssize_t n, const char **sources, int64_t *lengths, uint32_t *checksums, uint32_t *seeds,
               Py_buffer *buffers, Py_ssize_t *acquired)
{
    BatchViews batch;
    if (batch_views_open(&batch, views, buffers, acquired) < 0) {
        return -1;
    }
    int status = locate_in_views(frames, &batch, 1, steps, slots, n, sources, lengths, checksums, seeds);
    batch_views_close(&batch);
    return status;
}

int
locate_in_views(const FrameTable *frames, BatchViews *batch, int acquire, const int64_t *steps,
                const int64_t *slots, Py_ssize_t n, const char **sources, int64_t *lengths, uint32_t *checksums,
                uint32_t *seeds)
{
    const EntryLayout *layout = &frames->layout;
    const unsigned char *entries = (const unsigned char *)frames->table->buf;
    uint64_t segment_bytes = (uint64_t)frames->segment_bytes, bytes_written = (uint64_t)frames->bytes_written;
    /* The segment of the last frame, [segment_start, segment_start + segment_bytes): most frames of a
     * batch lie in the same one as the frame before, and need no division to find it. */
    uint64_t segment_start = 1, segment_end = 0;
    const Py_buffer *buffer = NULL;
    int status = 0;
    for (Py_ssize_t i = 0; i < n && status == 0; i++) {
        if (steps[i] < 0) {
            status = 1;
            break;
        }
        int64_t slot = slots != NULL ? slots[i] : steps[i] % frames->frame_slots;
        const unsigned char *entry = entries + (size_t)slot * (size_t)layout->size;
        uint64_t position = entry_position(layout, entry, bytes_written);
        uint64_t length = read_le(entry + layout->length, (int)layout->length_bytes);
        if (position > bytes_written || length > bytes_written - position) {
            status = 1;
            break;
        }
        if (position < segment_start || position >= segment_end) {
            long long view = (long long)(position / segment_bytes) - frames->base;
            if (view < 0 || view >= batch->count) {
                status = 1;
                break;
            }
            buffer = acquire ? batch_views_get(batch, (Py_ssize_t)view) : batch_views_peek(batch, (Py_ssize_t)view);
            if (buffer == NULL) {
                status = acquire ? -1 : 2;
                break;
            }
            segment_start = position - position % segment_bytes;
            segment_end = segment_start + segment_bytes;
        }
        uint64_t offset = position - segment_start;
        if (offset > (uint64_t)buffer->len || length > (uint64_t)buffer->len - offset) {
            status = 1;
            break;
        }
        sources[i] = (const char *)buffer->buf + offset;
        __builtin_prefetch(sources[i], 0, 0); /* the frame's first bytes: their misses overlap the next lookups */
        lengths[i] = (int64_t)length;
        checksums[i] = (uint32_t)read_le(entry + layout->checksum, 4);
        seeds[i] = entry_seed(layout, entry, steps[i], frames->seed_multiplier);
    }
    return status;
}

int
views_acquire_near(const FrameTable *frames, BatchViews *batch, const int64_t *steps, Py_ssize_t n)
{
    uint64_t segment_bytes = (uint64_t)frames->segment_bytes, bytes_written = (uint64_t)frames->bytes_written;
    long long last = -2;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (steps[i] < 0) {
            continue; /* the plan refuses it */
        }
        uint64_t position = entry_position(&frames->layout, table_entry(frames, steps[i]), bytes_written);
        long long view = position > bytes_written ? -1 : (long long)(position / segment_bytes) - frames->base;
        if (view == last || view < 0 || view >= batch->count) {
            continue; /* out of range: the frame's locate says so */
        }
        last = view;
        for (long long v = view > 0 ? view - 1 : view; v <= view; v++) {
            if (batch_views_get(batch, (Py_ssize_t)v) == NULL) {
                return -1;
            }
        }
    }
    return 0;
}

PyObject *
py_gather_entries(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *views_arg;
    Py_buffer table, steps, lengths, checksums, seeds;
    FrameTable frames = {.table = &table};
    unsigned long seed_multiplier;
    int verify;
    if (!PyArg_ParseTuple(args, "OLy*L" ENTRY_LAYOUT_FORMAT "y*kLLw*w*w*p:gather_entries", &views_arg, &frames.base, &table,
                          &frames.frame_slots, ENTRY_LAYOUT_FIELDS(frames.layout), &steps, &seed_multiplier,
                          &frames.segment_bytes, &frames.bytes_written, &lengths, &checksums, &seeds, &verify)) {
        return NULL;
    }
    frames.seed_multiplier = (uint32_t)seed_multiplier;
    PyObject *result = NULL, *views = NULL;
    const char **sources = NULL;
    Py_buffer *buffers = NULL;
    Py_ssize_t acquired = 0;
    Py_ssize_t n = steps.len / 8;
    if (frame_table_check(&frames, "gather_entries") < 0) {
        goto done;
    }
    if (check_array(&steps, "steps", n, 8) < 0 || check_array(&lengths, "lengths", n, 8) < 0
        || check_array(&checksums, "checksums", n, 4) < 0 || check_array(&seeds, "seeds", n, 4) < 0) {
        goto done;
    }
    if (views_prepare(views_arg, n, &views, &buffers) < 0) {
        goto done;
    }
    sources = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(*sources));
    if (sources == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *length = (int64_t *)lengths.buf;
    uint32_t *checksum = (uint32_t *)checksums.buf, *seed = (uint32_t *)seeds.buf;
    int located = locate_entries(&frames, views, (const int64_t *)steps.buf, NULL, n, sources, length, checksum,
                                 seed, buffers, &acquired);
    if (located != 0) {
        result = located < 0 ? NULL : Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        total += (Py_ssize_t)length[i]; /* each within bytes_written: no overflow */
    }
    for (Py_ssize_t i = 0; verify && i < n; i++) {
        if (frame_crc32(seed[i], (const unsigned char *)sources[i], (size_t)length[i]) != checksum[i]) {
            result = PyLong_FromSsize_t(i);
            goto done;
        }
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) {
        goto done;
    }
    char *data = PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; data += length[i], i++) {
        memcpy(data, sources[i], (size_t)length[i]);
    }
done:
    views_release(views, buffers, acquired);
    PyMem_Free(sources);
    PyBuffer_Release(&table);
    PyBuffer_Release(&steps);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&checksums);
    PyBuffer_Release(&seeds);
    return result;
}
