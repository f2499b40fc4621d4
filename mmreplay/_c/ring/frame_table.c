/* A frame ring as the compiled calls see it: see frame_table.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>

#include "ring/frame_table.h"

#define GEOMETRY_CAPSULE "mmreplay._lz4batch.ring_geometry"

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

static void
geometry_free(PyObject *capsule)
{
    PyMem_Free(PyCapsule_GetPointer(capsule, GEOMETRY_CAPSULE));
}

PyObject *
py_ring_geometry(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    static char *keywords[] = {"entry", "frame_slots", "seed_multiplier", "segment_bytes", "frame_nbytes",
                               "depth", "row_nbytes", "unit", NULL};
    RingGeometry g = {0};
    EntryLayout *e = &g.layout;
    unsigned long seed_multiplier;
    long long frame_nbytes, row_nbytes = 0, unit = 0;
    int depth = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "(nnnnnnnnnnnnn)LkLL|$iLL:ring_geometry", keywords, &e->size,
                                     &e->position, &e->length, &e->checksum, &e->link, &e->length_bytes,
                                     &e->position_bytes, &e->link_bytes, &e->prev_bits, &e->ref, &e->ref_bytes,
                                     &e->ref_shift, &e->ref_bits, &g.frame_slots, &seed_multiplier, &g.segment_bytes,
                                     &frame_nbytes, &depth, &row_nbytes, &unit)) {
        return NULL;
    }
    if (!layout_fits(e)) {
        PyErr_SetString(PyExc_ValueError, "ring_geometry: the entry layout has a field outside the entry, or a "
                                          "width an entry cannot hold");
        return NULL;
    }
    if (g.frame_slots <= 0 || g.segment_bytes <= 0 || frame_nbytes <= 0 || frame_nbytes > INT_MAX / 4
        || depth < -1 || depth > REFERENCE_MAX_DEPTH || (depth >= 0) != (e->ref_bytes != 0)) {
        PyErr_Format(PyExc_ValueError, "ring_geometry: frame_slots %lld, segment_bytes %lld, frame_nbytes %lld or "
                     "depth %d out of range (depth >= 0 exactly where the entries hold ref_delta)", g.frame_slots,
                     g.segment_bytes, frame_nbytes, depth);
        return NULL;
    }
    if (depth >= 0 && reference_shape_init(&g.shape, frame_nbytes, row_nbytes, unit) < 0) {
        PyErr_Format(PyExc_ValueError, "ring_geometry: unit %lld must divide row_nbytes %lld, which must divide "
                     "frame_nbytes %lld", unit, row_nbytes, frame_nbytes);
        return NULL;
    }
    g.seed_multiplier = (uint32_t)seed_multiplier;
    g.frame_nbytes = (int)frame_nbytes;
    g.depth = depth;
    RingGeometry *held = PyMem_Malloc(sizeof(RingGeometry));
    if (held == NULL) {
        return PyErr_NoMemory();
    }
    *held = g;
    PyObject *capsule = PyCapsule_New(held, GEOMETRY_CAPSULE, geometry_free);
    if (capsule == NULL) {
        PyMem_Free(held);
    }
    return capsule;
}

const RingGeometry *
ring_geometry_from(PyObject *capsule)
{
    if (!PyCapsule_IsValid(capsule, GEOMETRY_CAPSULE)) {
        PyErr_Format(PyExc_TypeError, "expected ring_geometry()'s capsule; got %s", Py_TYPE(capsule)->tp_name);
        return NULL;
    }
    return PyCapsule_GetPointer(capsule, GEOMETRY_CAPSULE);
}

int
ring_parse(PyObject *ring, RingArgument *parsed, int writable, const char *function)
{
    PyObject *geometry, *views;
    *parsed = (RingArgument){0};
    if (!PyTuple_Check(ring)) {
        PyErr_Format(PyExc_TypeError, "%s: ring must be (geometry, table, bytes_written, views, base)", function);
        return -1;
    }
    if (!PyArg_ParseTuple(ring, writable ? "Ow*LOL" : "Oy*LOL", &geometry, &parsed->table,
                          &parsed->frames.bytes_written, &views, &parsed->frames.base)) {
        return -1;
    }
    const RingGeometry *g = ring_geometry_from(geometry);
    if (g == NULL || (parsed->views = PySequence_Fast(views, "views must be a sequence of buffers")) == NULL) {
        PyBuffer_Release(&parsed->table);
        return -1;
    }
    parsed->frames.geometry = g;
    parsed->frames.layout = &g->layout;
    parsed->frames.table = &parsed->table;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(parsed->views);
    parsed->buffers = PyMem_Malloc((size_t)(count > 0 ? count : 1) * sizeof(Py_buffer));
    if (parsed->buffers == NULL || batch_views_open(&parsed->batch, parsed->views, parsed->buffers,
                                                    &parsed->acquired) < 0) {
        PyMem_Free(parsed->buffers);
        Py_CLEAR(parsed->views);
        PyBuffer_Release(&parsed->table);
        return parsed->buffers == NULL ? (PyErr_NoMemory(), -1) : -1;
    }
    if (parsed->table.len != g->frame_slots * g->layout.size || parsed->frames.bytes_written < 0) {
        PyErr_Format(PyExc_ValueError, "%s: the table has %zd bytes; expected %lld entries of %zd bytes (and "
                     "bytes_written >= 0)", function, parsed->table.len, g->frame_slots, g->layout.size);
        ring_release(parsed);
        return -1;
    }
    return 0;
}

void
ring_release(RingArgument *parsed)
{
    batch_views_close(&parsed->batch);
    for (Py_ssize_t k = 0; k < parsed->acquired; k++) {
        PyBuffer_Release(&parsed->buffers[k]);
    }
    PyMem_Free(parsed->buffers);
    Py_CLEAR(parsed->views);
    PyBuffer_Release(&parsed->table);
}

/* The view of segment `segment`, acquired on first use with `acquire`; NULL with status set (1: no such
 * view, 2: not acquired, -1: a Python error). */
static const Py_buffer *
view_of(const FrameTable *frames, BatchViews *views, int acquire, long long segment, int *status)
{
    long long view = segment - frames->base;
    if (view < 0 || view >= views->count) {
        *status = 1;
        return NULL;
    }
    const Py_buffer *buffer = acquire ? batch_views_get(views, (Py_ssize_t)view)
                                      : batch_views_peek(views, (Py_ssize_t)view);
    if (buffer == NULL) {
        *status = acquire ? -1 : 2;
    }
    return buffer;
}

int
locate_frame(const FrameTable *frames, BatchViews *views, int acquire, int64_t step, LocatedFrame *located)
{
    if (step < 0) {
        return 1;
    }
    const EntryLayout *layout = frames->layout;
    const unsigned char *entry = table_entry(frames, step);
    uint64_t bytes_written = (uint64_t)frames->bytes_written, segment_bytes = (uint64_t)frames->geometry->segment_bytes;
    uint64_t position = entry_position(layout, entry, bytes_written);
    uint64_t length = read_le(entry + layout->length, (int)layout->length_bytes);
    if (position > bytes_written || length > bytes_written - position) {
        return 1;
    }
    int status = 0;
    uint64_t segment = position / segment_bytes, offset = position - segment * segment_bytes;
    const Py_buffer *buffer = view_of(frames, views, acquire, (long long)segment, &status);
    if (buffer == NULL) {
        return status;
    }
    if (offset > (uint64_t)buffer->len || length > (uint64_t)buffer->len - offset) {
        return 1;
    }
    located->source = (const char *)buffer->buf + offset;
    located->length = (int64_t)length;
    located->checksum = (uint32_t)read_le(entry + layout->checksum, 4);
    located->seed = entry_seed(layout, entry, step, frames->geometry->seed_multiplier);
    located->ref_delta = entry_ref(layout, entry);
    return 0;
}

int
locate_frames(const FrameTable *frames, BatchViews *views, const int64_t *steps, Py_ssize_t n, const char **sources,
              int64_t *lengths, uint32_t *checksums, uint32_t *seeds)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        LocatedFrame frame;
        int status = locate_frame(frames, views, 1, steps[i], &frame);
        if (status != 0) {
            return status;
        }
        __builtin_prefetch(frame.source, 0, 0); /* the frame's first bytes: their misses overlap the next lookups */
        sources[i] = frame.source, lengths[i] = frame.length, checksums[i] = frame.checksum, seeds[i] = frame.seed;
    }
    return 0;
}

int
views_acquire_near(const FrameTable *frames, BatchViews *views, const int64_t *steps, Py_ssize_t n)
{
    uint64_t segment_bytes = (uint64_t)frames->geometry->segment_bytes, bytes_written = (uint64_t)frames->bytes_written;
    long long last = -2;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (steps[i] < 0) {
            continue; /* locating it says so */
        }
        uint64_t position = entry_position(frames->layout, table_entry(frames, steps[i]), bytes_written);
        long long view = position > bytes_written ? -1 : (long long)(position / segment_bytes) - frames->base;
        if (view == last || view < 0 || view >= views->count) {
            continue;
        }
        last = view;
        for (long long v = view > 0 ? view - 1 : view; v <= view; v++) {
            if (batch_views_get(views, (Py_ssize_t)v) == NULL) {
                return -1;
            }
        }
    }
    return 0;
}
