/* CRC-32 with zlib's polynomial: see crc32.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <zlib.h>

#include "crc32.h"

/* Inputs of 16 bytes or more (a frame's compressed bytes): zlib takes ~250 ns for a 265-byte Pong frame,
 * a fifth of its decode; folding 16 bytes at a time with carry-less multiplication (PCLMULQDQ, x86-64
 * CPUs since 2010) takes ~55 ns. The folding and its constants are those of Chromium's zlib
 * (crc32_simd.c, after Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
 * Instruction"); other CPUs use zlib, and the tail under 16 bytes crc32_short (crc32.h). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MMREPLAY_HAVE_FOLD 1

/* CRC of len bytes (len >= 16, a multiple of 16) with crc the pre-inverted running value: 64 bytes a
 * step while 64 remain, then 16. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_fold(const unsigned char *buf, size_t len, uint32_t crc)
{
    static const uint64_t __attribute__((aligned(16))) k1k2[] = {0x0154442bd4, 0x01c6e41596};
    static const uint64_t __attribute__((aligned(16))) k3k4[] = {0x01751997d0, 0x00ccaa009e};
    static const uint64_t __attribute__((aligned(16))) k5k0[] = {0x0163cd6124, 0x0000000000};
    static const uint64_t __attribute__((aligned(16))) poly[] = {0x01db710641, 0x01f7011641};
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;
    x1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)buf), _mm_cvtsi32_si128((int)crc));
    if (len < 64) { /* a dependent frame's few dozen bytes: 16 a step from the first */
        x0 = _mm_load_si128((const __m128i *)k3k4);
        buf += 16; len -= 16;
    }
    else {
        x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x0 = _mm_load_si128((const __m128i *)k1k2);
        buf += 64; len -= 64;
        while (len >= 64) {
            x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
            x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
            x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
            x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
            x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
            x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
            x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
            x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
            y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
            y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
            y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
            y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
            x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
            x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
            x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
            x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
            buf += 64; len -= 64;
        }
        x0 = _mm_load_si128((const __m128i *)k3k4);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    }
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16; len -= 16;
    }
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_loadl_epi64((const __m128i *)k5k0);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_load_si128((const __m128i *)poly);
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

/* From 16 bytes the folding pays: a reference frame's changed rows store a few dozen bytes (Pong ~59),
 * which it checks in ~11 ns against ~21 for slicing-by-8 (crc32_short); 18 bytes take ~6 ns either way. */
#define FOLD_MIN_BYTES 16
static int use_fold; /* set by frame_crc32_init when the CPU has PCLMULQDQ and SSE4.1 */

#ifdef MMREPLAY_HAVE_SLICE8
uint32_t frame_crc32_tables[8][256];
#endif

void
frame_crc32_init(void)
{
#ifdef MMREPLAY_HAVE_FOLD
    __builtin_cpu_init();
    use_fold = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
#ifdef MMREPLAY_HAVE_SLICE8
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        }
        frame_crc32_tables[0][i] = c;
    }
    for (int t = 1; t < 8; t++) {
        for (int i = 0; i < 256; i++) {
            uint32_t previous = frame_crc32_tables[t - 1][i];
            frame_crc32_tables[t][i] = (previous >> 8) ^ frame_crc32_tables[0][previous & 0xFF];
        }
    }
#endif
}

uint32_t
frame_crc32(uint32_t crc, const unsigned char *buf, size_t len)
{
#ifdef MMREPLAY_HAVE_FOLD
    if (use_fold && len >= FOLD_MIN_BYTES) {
        size_t chunk = len & ~(size_t)15;
        crc = ~crc32_fold(buf, chunk, ~crc);
        buf += chunk;
        len -= chunk;
    }
#endif
#ifdef MMREPLAY_HAVE_SLICE8
    if (len < 64) {
        return crc32_short(crc, buf, len);
    }
#endif
    return len ? (uint32_t)crc32(crc, (const Bytef *)buf, (uInt)len) : crc;
}

PyObject *
py_crc32(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer data;
    unsigned long seed;
    if (!PyArg_ParseTuple(args, "y*k:crc32", &data, &seed)) {
        return NULL;
    }
    uint32_t crc = frame_crc32((uint32_t)seed, (const unsigned char *)data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}
