/* Frames located through a frame ring's table: entry steps[i] % frame_slots gives frame i's ring
 * position, length, checksum and link, the frame's bytes lie in the segment view of that position, and
 * its CRC seed is steps[i] * seed_multiplier + link (mod 2**32). What decode_entries and
 * read_transitions decode, and what gather_entries returns still compressed. */
#ifndef MMREPLAY_FRAME_ENTRIES_H
#define MMREPLAY_FRAME_ENTRIES_H

#include <Python.h>

#include <stdint.h>

/* A table entry's fields, little-endian (the frame ring's layout, passed in: frames/ring.py's
 * _entry_layout): the entry's size, the byte offsets of position (u64), length, checksum (u32) and link
 * (u32), and the width of length (2 or 4 bytes). Parsed by "(nnnnnn)" from ENTRY_LAYOUT_FIELDS. */
typedef struct {
    Py_ssize_t size, position, length, checksum, link, length_bytes;
} EntryLayout;

#define ENTRY_LAYOUT_FIELDS(layout)                                                                                \
    &(layout).size, &(layout).position, &(layout).length, &(layout).checksum, &(layout).link, &(layout).length_bytes

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

/* gather_entries(views, base, table, frame_slots, layout, steps, seed_multiplier, segment_bytes,
 *                bytes_written, lengths, checksums, seeds, verify) -> bytes | int | None
 *   The stored blocks of frames, still compressed, located as decode_entries locates them: their bytes
 *   back to back, and each one's length (int64), checksum and CRC seed (uint32) into the arrays given.
 *   With verify, each block is checked against its checksum: the index of the first that fails. None
 *   when a frame lies outside the bytes written or the views (the caller's general path finds it). */
PyObject *py_gather_entries(PyObject *module, PyObject *args);

#define FRAME_ENTRIES_METHODS                                                                                      \
    {"gather_entries", py_gather_entries, METH_VARARGS,                                                            \
     "gather_entries(views, base, table, frame_slots, layout, steps, seed_multiplier, segment_bytes,\n"            \
     "               bytes_written, lengths, checksums, seeds, verify) -> bytes | int | None\n\n"                  \
     "The stored blocks of frames back to back, their lengths, checksums and seeds into the arrays given;\n"       \
     "with verify, the first block that fails its checksum (an int); None when a frame lies outside."},

#endif
