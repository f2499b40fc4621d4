/* A frame ring as the compiled calls see it (mmreplay/frames/ring.py): its geometry, made once per
 * frame table (ring_geometry: the entries' layout, the table's slots, the CRC seed's multiplier, the
 * segments' size, the frames' size and, for a reference ring, its chains and units), and the one
 * argument through which a call reads frames, `ring`:
 *
 *     (geometry, table, bytes_written, views, base)
 *
 * Entry step % frame_slots of table gives frame step's ring position, length, checksum and links; its
 * bytes lie in the view of segment position // segment_bytes (views[segment - base]); its CRC seed is
 * step * seed_multiplier + prev_delta + ref_delta * REF_SEED_MULTIPLIER (mod 2**32). */
#ifndef MMREPLAY_FRAME_TABLE_H
#define MMREPLAY_FRAME_TABLE_H

#include <Python.h>

#include <stdint.h>

#include "codec/reference_frames.h"
#include "little_endian.h"
#include "ring/frame_sources.h"
#include "ring_slots.h"

/* A table entry's fields, little-endian (frames/frame_entries.py's EntryFormat.layout): the entry's size;
 * the byte offsets of position, length, checksum (u32) and link; the width of length (2 or 4 bytes); of
 * position (8, or 4: its low 32 bits, where every frame a reader may read lies less than 2**32 bytes
 * below bytes_written); of the link field and how many of its low bits hold prev_delta; and where
 * ref_delta lies: its field's offset, width, shift and bits (width 0: a plain ring, ref_delta 0). */
typedef struct {
    Py_ssize_t size, position, length, checksum, link, length_bytes;
    Py_ssize_t position_bytes, link_bytes, prev_bits;
    Py_ssize_t ref, ref_bytes, ref_shift, ref_bits;
} EntryLayout;

/* What a ring's table and frames are, for as long as the table is (ring_geometry's capsule). depth: the
 * longest chain of references a frame may have (-1: a plain ring); shape: a reference ring's frames. */
typedef struct {
    EntryLayout layout;
    long long frame_slots, segment_bytes;
    uint32_t seed_multiplier;
    int frame_nbytes, depth;
    ReferenceShape shape;
} RingGeometry;

/* xxHash's PRIME32_2: the multiplier of ref_delta in a frame's CRC seed (frames/frame_entries.py). */
#define REF_SEED_MULTIPLIER 2246822519u

/* The table and segments a call locates frames through (a parsed `ring` argument). */
typedef struct {
    const RingGeometry *geometry;
    const EntryLayout *layout;
    const Py_buffer *table;
    long long bytes_written; /* a frame must lie below this ring position */
    long long base;          /* views[k] holds segment base + k */
} FrameTable;

/* A parsed `ring` argument: the table's buffer and the views (each view's buffer acquired on first
 * use), held until ring_release. */
typedef struct {
    FrameTable frames;
    Py_buffer table;
    PyObject *views; /* a PySequence_Fast */
    Py_buffer *buffers;
    Py_ssize_t acquired;
    BatchViews batch;
} RingArgument;

/* Parses `ring` (see above; the table writable when `writable`): 0, or -1 with a Python error naming
 * function. ring_release must run after a 0, and only then. */
int ring_parse(PyObject *ring, RingArgument *parsed, int writable, const char *function);
void ring_release(RingArgument *parsed);

/* The geometry in a capsule that ring_geometry() made; NULL with a TypeError for any other object. */
const RingGeometry *ring_geometry_from(PyObject *capsule);

static inline uint64_t
low_bits(uint64_t value, Py_ssize_t bits)
{
    return bits >= 64 ? value : value & (((uint64_t)1 << bits) - 1);
}

/* The ring position of the frame an entry holds: stored whole, or as its low 32 bits, below
 * bytes_written by less than 2**32 (a damaged entry may then give more than bytes_written, which the
 * caller refuses). */
static inline uint64_t
entry_position(const EntryLayout *layout, const unsigned char *entry, uint64_t bytes_written)
{
    uint64_t stored = read_le(entry + layout->position, (int)layout->position_bytes);
    if (layout->position_bytes >= 8) {
        return stored;
    }
    return bytes_written - low_bits(bytes_written - stored, 8 * layout->position_bytes);
}

/* prev_delta: frame steps back to the previous frame of the same episode (0: an episode's first). */
static inline int64_t
entry_prev(const EntryLayout *layout, const unsigned char *entry)
{
    return (int64_t)low_bits(read_le(entry + layout->link, (int)layout->link_bytes), layout->prev_bits);
}

/* ref_delta: frame steps back to the frame this one is compressed against (0: alone). */
static inline int64_t
entry_ref(const EntryLayout *layout, const unsigned char *entry)
{
    if (layout->ref_bytes == 0) {
        return 0;
    }
    return (int64_t)low_bits(read_le(entry + layout->ref, (int)layout->ref_bytes) >> layout->ref_shift,
                             layout->ref_bits);
}

/* The CRC seed of the frame at step with this entry. */
static inline uint32_t
entry_seed(const EntryLayout *layout, const unsigned char *entry, int64_t step, uint32_t seed_multiplier)
{
    return (uint32_t)((uint64_t)step * seed_multiplier + (uint64_t)entry_prev(layout, entry)
                      + (uint64_t)entry_ref(layout, entry) * REF_SEED_MULTIPLIER);
}

/* Writes an entry's position, length, checksum and links (prev_delta, and ref_delta where it has one). */
static inline void
entry_write(const EntryLayout *layout, unsigned char *entry, uint64_t position, uint64_t length, uint32_t checksum,
            uint64_t prev, uint64_t ref)
{
    write_le(entry + layout->position, position, (int)layout->position_bytes);
    write_le(entry + layout->length, length, (int)layout->length_bytes);
    write_le(entry + layout->checksum, checksum, 4);
    if (layout->ref_bytes != 0 && layout->ref == layout->link) {
        write_le(entry + layout->link, prev | ref << layout->ref_shift, (int)layout->link_bytes);
        return;
    }
    write_le(entry + layout->link, prev, (int)layout->link_bytes);
    if (layout->ref_bytes != 0) {
        write_le(entry + layout->ref, ref << layout->ref_shift, (int)layout->ref_bytes);
    }
}

/* The table entry of the frame at step (slot step mod frame_slots). */
static inline const unsigned char *
table_entry(const FrameTable *frames, int64_t step)
{
    return (const unsigned char *)frames->table->buf
           + (size_t)ring_slot(step, frames->geometry->frame_slots) * (size_t)frames->layout->size;
}

/* One frame located: its compressed bytes, their length, checksum and CRC seed, and its ref_delta. */
typedef struct {
    const char *source;
    int64_t length, ref_delta;
    uint32_t checksum, seed;
} LocatedFrame;

/* Locates the frame at step in views already acquired (any thread, without the GIL; acquire 1: with
 * the GIL, acquiring its view on first use): 0, 1 when it lies outside the bytes written or the views
 * or its step is negative, 2 when its view was not acquired (acquire 0), -1 with a Python error. */
int locate_frame(const FrameTable *frames, BatchViews *views, int acquire, int64_t step, LocatedFrame *located);

/* Fills sources, lengths, checksums and seeds of the n frames at steps: 0 when every frame lies in the
 * bytes written and in a view, 1 when one does not (the caller takes its general path), -1 with a
 * Python error. Views are acquired on first use. */
int locate_frames(const FrameTable *frames, BatchViews *views, const int64_t *steps, Py_ssize_t n,
                  const char **sources, int64_t *lengths, uint32_t *checksums, uint32_t *seeds);

/* Acquires the views that hold the frames at steps, and each one's view before (where their references
 * lie, but for chains that reach further back): 0, or -1 with a Python error. Frames outside the bytes
 * written or the views are passed over (locating them says so). */
int views_acquire_near(const FrameTable *frames, BatchViews *views, const int64_t *steps, Py_ssize_t n);

/* ring_geometry(entry, frame_slots, seed_multiplier, segment_bytes, frame_nbytes, *, depth=-1, row_nbytes=0,
 *               unit=0) -> capsule
 *   entry: EntryFormat.layout's 13 ints; depth, row_nbytes and unit: a reference ring's (depth >= 0).
 *   ValueError when a field lies outside the entry, a width is not one an entry may hold, or a size is
 *   out of range. */
PyObject *py_ring_geometry(PyObject *module, PyObject *args, PyObject *kwargs);

#define FRAME_TABLE_METHODS                                                                                        \
    {"ring_geometry", (PyCFunction)(void (*)(void))py_ring_geometry, METH_VARARGS | METH_KEYWORDS,                 \
     "ring_geometry(entry, frame_slots, seed_multiplier, segment_bytes, frame_nbytes, *, depth=-1, row_nbytes=0,\n" \
     "              unit=0) -> capsule\n\n"                                                                        \
     "A frame ring's geometry (entries, slots, seeds, segments, frames), checked, for the calls that take a ring."},

#endif
