/* A dependent frame of format version 5 (mmreplay/frames/reference_codec.py, "changed rows"): which rows
 * of the frame differ from its reference, then one lz4 block of just those rows, back to back, with the
 * reference as lz4's dictionary. A frame of R-byte rows (R: reference_codec.mask_row_nbytes) is
 *
 *     count, then count pairs (skip, take), then the block
 *
 * where each number is written as lz4 writes a length (bytes of 255 add 255 and go on; the first byte
 * below 255 ends it): after `skip` rows equal to the reference's come `take` changed rows, and rows past
 * the last pair are equal too. A frame equal to its reference is one byte, 0. Version 4's dependent
 * frames were one lz4 block of the whole frame against its reference: an 84x84 frame then paid one
 * length byte per 255 unchanged bytes (~28 bytes of Pong's ~82), which the rows left out no longer cost. */
#ifndef MMREPLAY_CHANGED_ROWS_H
#define MMREPLAY_CHANGED_ROWS_H

#include <stddef.h>
#include <stdint.h>

/* The most bytes the header (count and pairs) of a frame of `rows` rows takes. */
static inline size_t
changed_rows_header_bound(size_t rows)
{
    return 3 * rows + 8;
}

static inline uint8_t *
changed_rows_put(uint8_t *o, size_t value)
{
    for (; value >= 255; value -= 255) {
        *o++ = 255;
    }
    *o++ = (uint8_t)value;
    return o;
}

/* Reads a number at *p, never past end; 0 with *value set, -1 when it runs past end or beyond limit. */
static inline int
changed_rows_get(const uint8_t **p, const uint8_t *end, size_t limit, size_t *value)
{
    size_t total = 0;
    for (;;) {
        if (*p >= end) {
            return -1;
        }
        uint8_t byte = *(*p)++;
        total += byte;
        if (total > limit) {
            return -1;
        }
        if (byte != 255) {
            *value = total;
            return 0;
        }
    }
}

#endif
