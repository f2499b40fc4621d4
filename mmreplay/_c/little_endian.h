/* The little-endian integer fields of mmreplay's files (frame-table entries, transition rows), read and
 * written at any alignment. Inlined where they are used: rows and entries are read a field at a time. */
#ifndef MMREPLAY_LITTLE_ENDIAN_H
#define MMREPLAY_LITTLE_ENDIAN_H

#include <stdint.h>
#include <string.h>

/* The unsigned value of the `bytes` bytes at p (1 to 8). */
static inline uint64_t
read_le(const unsigned char *p, int bytes)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* one load, where the byte loop below costs one per byte */
    if (bytes == 8) {
        uint64_t value;
        memcpy(&value, p, 8);
        return value;
    }
    if (bytes == 4) {
        uint32_t value;
        memcpy(&value, p, 4);
        return value;
    }
    if (bytes == 2) {
        uint16_t value;
        memcpy(&value, p, 2);
        return value;
    }
#endif
    uint64_t value = 0;
    for (int k = bytes - 1; k >= 0; k--) {
        value = (value << 8) | p[k];
    }
    return value;
}

/* Writes the low `bytes` bytes of value at p. */
static inline void
write_le(unsigned char *p, uint64_t value, int bytes)
{
    for (int k = 0; k < bytes; k++, value >>= 8) {
        p[k] = (unsigned char)value;
    }
}

#endif
