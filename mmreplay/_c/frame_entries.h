/* Frames located through a frame ring's table: entry steps[i] % frame_slots gives frame i's ring
 * position, length, checksum and link, the frame's bytes lie in the segment view of that position, and
 * its CRC seed is steps[i] * seed_multiplier + link (mod 2**32). What decode_entries and
 * read_transitions decode, and what gather_entries returns still compressed. */
#ifndef MMREPLAY_FRAME_ENTRIES_H
#define MMREPLAY_FRAME_ENTRIES_H

#include <Python.h>

#include <stdint.h>

#include "frame_sources.h"
#include "little_endian.h"

/* A table entry's fields, little-endian (the frame ring's layout, passed in: frames/frame_entries.py's
 * _entry_layout): the entry's size; the byte offsets of position, length, checksum (u32) and link; the
 * width of length (2 or 4 bytes); the width of position (8, or 4: its low 32 bits, format version 5,
 * where every frame a reader may read lies less than 2**32 bytes below bytes_written); the width of the
 * link field and how many of its low bits hold prev_delta (the rest, ref_delta's, in version 5); and
 * where ref_delta lies: its field's offset, width, shift and bits (width 0: a plain ring's entries,
 * ref_delta 0). Parsed by ENTRY_LAYOUT_FORMAT from ENTRY_LAYOUT_FIELDS. */
typedef struct {
    Py_ssize_t size, position, length, checksum, link, length_bytes;
    Py_ssize_t position_bytes, link_bytes, prev_bits;
    Py_ssize_t ref, ref_bytes, ref_shift, ref_bits;
} EntryLayout;

/* The layout argument of the functions that read or write entries: entry_layout()'s capsule (made once per
 * table: a tuple of 13 ints parsed at every call cost ~2k instructions of an add), or that tuple. */
#define ENTRY_LAYOUT_FORMAT "O&"
#define ENTRY_LAYOUT_FIELDS(layout) entry_layout_converter, &(layout)

/* PyArg "O&" converter into an EntryLayout (address): 1, or 0 with a TypeError. */
int entry_layout_converter(PyObject *object, void *address);

/* entry_layout(size, position, length, checksum, link, length_bytes, position_bytes, link_bytes, prev_bits,
 *              ref, ref_bytes, ref_shift, ref_bits) -> capsule
 *   frames/frame_entries.py's _entry_layout tuple, held for the entry functions' layout argument. */
PyObject *py_entry_layout(PyObject *module, PyObject *args);

/* xxHash's PRIME32_2: a frame's CRC seed is step * seed_multiplier + prev_delta + ref_delta * this, mod
 * 2**32 (frames/frame_entries.py's REF_SEED_MULTIPLIER). */
#define REF_SEED_MULTIPLIER 2246822519u

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

/* The table and segments that frames are located through. */
typedef struct {
    const Py_buffer *table; /* frame_slots entries of layout.size bytes */
    long long frame_slots;
    EntryLayout layout;
    uint32_t seed_multiplier;
    long long segment_bytes;
    long long bytes_written; /* a frame must lie below this ring position */
    long long base;          /* views[k] holds segment base + k */
} FrameTable;

/* The table entry of the frame at step (slot step mod frame_slots). */
static inline const unsigned char *
table_entry(const FrameTable *frames, int64_t step)
{
    return (const unsigned char *)frames->table->buf
           + (size_t)(step % frames->frame_slots) * (size_t)frames->layout.size;
}

/* 0 when the sizes are positive, the layout fits its entry and the table holds frame_slots entries;
 * else -1 with a ValueError that starts with `function`. */
int frame_table_check(const FrameTable *frames, const char *function);

/* Fills sources, lengths, checksums and seeds of the n frames at steps (table entry slots[i], or
 * steps[i] mod frame_slots where slots is NULL): 0 when every frame lies in the bytes written and in a
 * view, 1 when one does not (the caller takes its general path), -1 with a Python error. views is a
 * PySequence_Fast; each view's buffer is acquired once, into buffers[0..*acquired). */
int locate_entries(const FrameTable *frames, PyObject *views, const int64_t *steps, const int64_t *slots,
                   Py_ssize_t n, const char **sources, int64_t *lengths, uint32_t *checksums, uint32_t *seeds,
                   Py_buffer *buffers, Py_ssize_t *acquired);

/* locate_entries on views the caller opened (frame_sources.h); with acquire 0 only views already acquired
 * are read, without a Python call (any thread, without the GIL): 2 where a frame lies in another. */
int locate_in_views(const FrameTable *frames, BatchViews *batch, int acquire, const int64_t *steps,
                    const int64_t *slots, Py_ssize_t n, const char **sources, int64_t *lengths, uint32_t *checksums,
                    uint32_t *seeds);

/* Acquires the views that hold the frames at steps, and each one's view before (where their references
 * lie, but for chains that reach further back): 0, or -1 with a Python error. Frames outside the bytes
 * written or the views are passed over (locating them says so). */
int views_acquire_near(const FrameTable *frames, BatchViews *batch, const int64_t *steps, Py_ssize_t n);

/* gather_entries(views, base, table, frame_slots, layout, steps, seed_multiplier, segment_bytes,
 *                bytes_written, lengths, checksums, seeds, verify) -> bytes | int | None
 *   The stored blocks of frames, still compressed, located as decode_entries locates them: their bytes
 *   back to back, and each one's length (int64), checksum and CRC seed (uint32) into the arrays given.
 *   With verify, each block is checked against its checksum: the index of the first that fails. None
 *   when a frame lies outside the bytes written or the views (the caller's general path finds it). */
PyObject *py_gather_entries(PyObject *module, PyObject *args);

#define FRAME_ENTRIES_METHODS                                                                                      \
    {"entry_layout", py_entry_layout, METH_VARARGS,                                                                \
     "entry_layout(size, position, length, checksum, link, length_bytes, position_bytes, link_bytes, prev_bits,\n" \
     "             ref, ref_bytes, ref_shift, ref_bits) -> capsule\n\n"                                          \
     "A frame table's entry layout, held for the functions that take one (parsed once, not at every call)."},    \
    {"gather_entries", py_gather_entries, METH_VARARGS,                                                            \
     "gather_entries(views, base, table, frame_slots, layout, steps, seed_multiplier, segment_bytes,\n"            \
     "               bytes_written, lengths, checksums, seeds, verify) -> bytes | int | None\n\n"                  \
     "The stored blocks of frames back to back, their lengths, checksums and seeds into the arrays given;\n"       \
     "with verify, the first block that fails its checksum (an int); None when a frame lies outside."},

#endif
