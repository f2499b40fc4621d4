/* CRC-32 with zlib's polynomial (so frame_crc32(seed, data) == zlib.crc32(data, seed)): the checksum of
 * every stored frame block and, with the step mixed in, of every transition row (row_checksum.h).
 *
 * frame_crc32_init() must run once, at module import, before any other function here. */
#ifndef MMREPLAY_CRC32_H
#define MMREPLAY_CRC32_H

#include <Python.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

void frame_crc32_init(void);

/* The CRC-32 of len bytes at buf, continuing crc (0 to start), as zlib.crc32(buf, crc) gives it. */
uint32_t frame_crc32(uint32_t crc, const unsigned char *buf, size_t len);

/* crc32(data, seed) -> int: zlib.crc32(data, seed & 0xFFFFFFFF), through frame_crc32. */
PyObject *py_crc32(PyObject *module, PyObject *args);

#define CRC32_METHODS                                                                                              \
    {"crc32", py_crc32, METH_VARARGS,                                                                        \
     "crc32(data, seed) -> int\n\nzlib.crc32(data, seed & 0xFFFFFFFF), folded 16 bytes at a time where the CPU can."},

/* Inputs under 64 bytes (a transition row, a small frame such as CartPole's 18-byte block, the tail
 * after folding): slicing-by-8 over tables of zlib's polynomial, 8 independent lookups per 8 bytes.
 * zlib 1.2.13 steps byte by byte below 64 bytes, each step waiting on the last: 20.7 against 5.9 ns
 * for 18 bytes, 32.5 against 8.7 ns for 26 (-O2, the AMD development VM). Little-endian hosts only.
 * Inlined into the row checksums of a batch's rows. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define MMREPLAY_HAVE_SLICE8 1
extern uint32_t frame_crc32_tables[8][256]; /* filled by frame_crc32_init */

static inline uint32_t
crc32_short(uint32_t crc, const unsigned char *buf, size_t len)
{
    const uint32_t(*t)[256] = (const uint32_t(*)[256])frame_crc32_tables;
    crc = ~crc;
    for (; len >= 8; buf += 8, len -= 8) {
        uint32_t low, high;
        memcpy(&low, buf, 4);
        memcpy(&high, buf + 4, 4);
        low ^= crc;
        crc = t[7][low & 0xFF] ^ t[6][(low >> 8) & 0xFF] ^ t[5][(low >> 16) & 0xFF] ^ t[4][low >> 24]
              ^ t[3][high & 0xFF] ^ t[2][(high >> 8) & 0xFF] ^ t[1][(high >> 16) & 0xFF] ^ t[0][high >> 24];
    }
    for (; len > 0; buf++, len--) {
        crc = t[0][(crc ^ *buf) & 0xFF] ^ (crc >> 8);
    }
    return ~crc;
}
#endif

#endif
