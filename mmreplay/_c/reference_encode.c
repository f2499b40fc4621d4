/* A frame compressed against its reference frame: see reference_encode.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "lz4_api.h"
#include "reference_encode.h"

/* The lz4 block format's rules (lz4_Block_format.md): a match is at least 4 bytes and reaches back at
 * most 65,535 bytes; the last 5 bytes are literals and the last match starts at least 12 bytes before
 * the end. */
#define MIN_MATCH 4
#define MAX_OFFSET 65535
#define LAST_LITERALS 5
#define MATCH_START_LIMIT 12

/* The encoder works on one buffer: the reference (n bytes) then the frame (n bytes), so that a match
 * may start in the reference and run on into the frame, as the decoder allows. Positions are indices
 * into that buffer; the frame occupies [n, 2n).
 *
 * Candidates come from two places. Fixed offsets: the same position in the reference, one pixel or row
 * away from it, the previous match's offset, the previous pixel or row of the frame. And, in sparse
 * frames, a run index: Atari frames are mostly long runs of one colour, where every offset matches
 * the first bytes and only the offset that lines up the run's end matches far; so the index keys each
 * *change point* p (buf[p] != buf[p - 1]) by the colour before it and the 4 bytes from it, and a
 * search at v looks up the end of v's run. The index costs a few ns per change point, so it is built
 * only when the reference has at most n / SPARSE_DIVISOR of them (Pong: ~165 of 7,056, where it saves
 * ~10% of the bytes; MsPacman: ~2,250, where it would triple the time for ~4%). */
#define INDEX_BITS 12
#define INDEX_DEPTH 8      /* change points tried per search */
#define SPARSE_DIVISOR 32
#define GOOD_ENOUGH 64     /* without the index, a fixed-offset match this long is taken at once */

typedef struct {
    const uint8_t *buf;
    size_t n, row;
    uint8_t *dst, *dst_end;
    int indexed;
    int32_t *head;           /* [1 << INDEX_BITS]: the latest change point of each key, -1: none */
    int32_t *next, *run;     /* [2n]: the previous change point of the same key; the run's length */
    size_t indexed_to, run_start, cached_v, cached_end;
} Encoder;

static size_t
match_length(const uint8_t *a, const uint8_t *b, const uint8_t *end)
{
    const uint8_t *start = b;
    while (b + 8 <= end) {
        uint64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y) {
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            return (size_t)(b - start) + (size_t)(__builtin_ctzll(x ^ y) >> 3);
#else
            break; /* the byte loop below finds the first difference */
#endif
        }
        a += 8;
        b += 8;
    }
    while (b < end && *a == *b) {
        a++;
        b++;
    }
    return (size_t)(b - start);
}

static uint32_t
index_key(uint8_t colour, const uint8_t *p)
{
    uint32_t next4;
    memcpy(&next4, p, 4);
    return ((next4 ^ (colour * 0x01000193u)) * 2654435761u) >> (32 - INDEX_BITS);
}

static void
add_change_point(Encoder *e, size_t p)
{
    size_t length = p - e->run_start;
    e->run_start = p;
    e->run[p] = (int32_t)(length < INT32_MAX ? length : INT32_MAX);
    uint32_t key = index_key(e->buf[p - 1], e->buf + p);
    e->next[p] = e->head[key];
    e->head[key] = (int32_t)p;
}

/* Index the change points in [indexed_to, stop): 16 bytes at a time where SSE2 exists. */
static void
index_to(Encoder *e, size_t stop)
{
    const uint8_t *b = e->buf;
    size_t p = e->indexed_to, limit = 2 * e->n - 4; /* a key reads 4 bytes */
    stop = stop < limit ? stop : limit;
#if defined(__SSE2__)
    for (; p + 16 <= stop; p += 16) {
        __m128i here = _mm_loadu_si128((const __m128i *)(b + p)), before = _mm_loadu_si128((const __m128i *)(b + p - 1));
        unsigned changed = ~(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(here, before)) & 0xFFFFu;
        while (changed) {
            add_change_point(e, p + (size_t)__builtin_ctz(changed));
            changed &= changed - 1;
        }
    }
#endif
    for (; p < stop; p++) {
        if (b[p] != b[p - 1]) {
            add_change_point(e, p);
        }
    }
    e->indexed_to = p > e->indexed_to ? p : e->indexed_to;
}

static size_t
count_change_points(const uint8_t *b, size_t n)
{
    size_t count = 0, p = 1;
#if defined(__SSE2__)
    for (; p + 16 <= n; p += 16) {
        __m128i here = _mm_loadu_si128((const __m128i *)(b + p)), before = _mm_loadu_si128((const __m128i *)(b + p - 1));
        unsigned same = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(here, before)); /* popcount, without POPCNT */
        same = same - ((same >> 1) & 0x5555u);
        same = (same & 0x3333u) + ((same >> 2) & 0x3333u);
        same = (same + (same >> 4)) & 0x0F0Fu;
        count += 16 - (size_t)((same + (same >> 8)) & 0x1Fu);
    }
#endif
    for (; p < n; p++) {
        count += b[p] != b[p - 1];
    }
    return count;
}

/* Where the run of equal bytes that contains v ends (remembered: v only grows). */
static size_t
run_end(Encoder *e, size_t v, size_t limit)
{
    const uint8_t *b = e->buf;
    if (v >= e->cached_v && v < e->cached_end && b[v] == b[e->cached_v]) {
        return e->cached_end;
    }
    size_t q = v + 1;
    uint64_t colour = b[v] * 0x0101010101010101ull;
    while (q + 8 <= limit) {
        uint64_t x;
        memcpy(&x, b + q, 8);
        if (x != colour) {
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            q += (size_t)(__builtin_ctzll(x ^ colour) >> 3);
            goto found;
#else
            break;
#endif
        }
        q += 8;
    }
    while (q < limit && b[q] == b[v]) {
        q++;
    }
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
found:
#endif
    e->cached_v = v;
    e->cached_end = q;
    return q;
}

/* The longest match at position v among the candidates; 0 when none reaches MIN_MATCH. */
static size_t
best_match(Encoder *e, size_t v, size_t last_offset, size_t *offset)
{
    const uint8_t *b = e->buf, *here = b + v, *end = b + 2 * e->n - LAST_LITERALS;
    size_t n = e->n, row = e->row, best = 0;
    size_t candidates[14] = {n, last_offset, 1, n - 1, n + 1, row, row - 1, row + 1,
                             n - row, n + row, n - row - 1, n - row + 1, n + row - 1, n + row + 1};
    size_t count = row > 1 && row < n ? 14 : 5; /* a frame of one row has no rows to move between */
    for (size_t c = 0; c < count; c++) {
        size_t o = candidates[c];
        if (o == 0 || o > v || o > MAX_OFFSET || (c == 1 && o == n)) {
            continue;
        }
        const uint8_t *there = here - o;
        if (memcmp(there, here, MIN_MATCH) != 0 || (best > 0 && there[best] != here[best])) {
            continue;
        }
        size_t length = match_length(there, here, end);
        if (length > best) {
            best = length;
            *offset = o;
            if (!e->indexed && c < 2 && best >= GOOD_ENOUGH) {
                return best;
            }
        }
    }
    if (e->indexed) {
        size_t run_stop = run_end(e, v, (size_t)(end - b)), run = run_stop - v;
        if (run_stop + 4 <= (size_t)(end - b)) {
            index_to(e, run_stop);
            int32_t point = e->head[index_key(*here, b + run_stop)];
            for (int tried = 0; tried < INDEX_DEPTH && point >= 0; tried++, point = e->next[point]) {
                size_t p = (size_t)point, o = run_stop - p;
                if ((size_t)e->run[p] < run || b[p - 1] != *here || o > MAX_OFFSET
                    || (best > run && b[p + best - run] != b[run_stop + best - run])) {
                    continue;
                }
                size_t length = run + match_length(b + p, b + run_stop, end);
                if (length > best) {
                    best = length;
                    *offset = o;
                }
            }
        }
    }
    return best >= MIN_MATCH ? best : 0;
}

static uint8_t *
put_length(uint8_t *o, size_t value)
{
    for (; value >= 255; value -= 255) {
        *o++ = 255;
    }
    *o++ = (uint8_t)value;
    return o;
}

/* One sequence: literals, then a match (none when match == 0: the block's last sequence). */
static int
emit(Encoder *e, const uint8_t *literals, size_t literal_count, size_t offset, size_t match)
{
    size_t worst = 1 + literal_count / 255 + 1 + literal_count + 2 + match / 255 + 1;
    if ((size_t)(e->dst_end - e->dst) < worst) {
        return -1;
    }
    uint8_t *token = e->dst++;
    size_t low = literal_count >= 15 ? 15 : literal_count;
    if (literal_count >= 15) {
        e->dst = put_length(e->dst, literal_count - 15);
    }
    memcpy(e->dst, literals, literal_count);
    e->dst += literal_count;
    if (match == 0) {
        *token = (uint8_t)(low << 4);
        return 0;
    }
    *e->dst++ = (uint8_t)(offset & 0xFF);
    *e->dst++ = (uint8_t)(offset >> 8);
    size_t high = match - MIN_MATCH >= 15 ? 15 : match - MIN_MATCH;
    *token = (uint8_t)((low << 4) | high);
    if (match - MIN_MATCH >= 15) {
        e->dst = put_length(e->dst, match - MIN_MATCH - 15);
    }
    return 0;
}

/* Greedy parse with one step of lazy matching; returns the block's size, or -1 when dst is too small. */
static Py_ssize_t
encode_block(Encoder *e)
{
    uint8_t *dst_start = e->dst;
    size_t n = e->n, v = n, anchor = n, last_offset = n;
    size_t limit = n >= MATCH_START_LIMIT ? 2 * n - MATCH_START_LIMIT : n; /* no match starts here */
    while (v < limit) {
        size_t offset = 0, length = best_match(e, v, last_offset, &offset);
        if (length == 0) {
            v++;
            continue;
        }
        if (v + 1 < limit && length < GOOD_ENOUGH) {
            size_t next_offset = 0, next = best_match(e, v + 1, last_offset, &next_offset);
            if (next > length + 1) { /* worth one more literal */
                v++;
                length = next;
                offset = next_offset;
            }
        }
        while (v > anchor && v > offset && e->buf[v - 1] == e->buf[v - 1 - offset]) { /* take back literals */
            v--;
            length++;
        }
        if (emit(e, e->buf + anchor, v - anchor, offset, length) < 0) {
            return -1;
        }
        last_offset = offset;
        v += length;
        anchor = v;
    }
    if (emit(e, e->buf + anchor, 2 * n - anchor, 0, 0) < 0) {
        return -1;
    }
    return (Py_ssize_t)(e->dst - dst_start);
}

/* One work area for every call, grown as needed and guarded by the GIL, which encode() keeps: freeing
 * ~150 KB after each frame would make glibc return it to the system and fault it in again each time,
 * which costs more than the encoding (~10 us of page faults per 84x84 frame). */
static uint8_t *work_area = NULL;
static size_t work_area_bytes = 0;

PyObject *
py_encode(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer frame, reference;
    Py_ssize_t row_nbytes;
    if (!PyArg_ParseTuple(args, "y*y*n:encode", &frame, &reference, &row_nbytes)) {
        return NULL;
    }
    PyObject *result = NULL;
    size_t n = (size_t)frame.len;
    if (reference.len != frame.len || frame.len <= 0 || frame.len > INT_MAX / 8) {
        PyErr_Format(PyExc_ValueError, "frame has %zd bytes and reference %zd; expected the same size, 1 to %d",
                     frame.len, reference.len, INT_MAX / 8);
        goto done;
    }
    if (row_nbytes <= 0 || (size_t)row_nbytes > n || n % (size_t)row_nbytes != 0) {
        PyErr_Format(PyExc_ValueError, "row_nbytes is %zd; expected a divisor of the frame's %zd bytes", row_nbytes,
                     frame.len);
        goto done;
    }
    size_t capacity = n + n / 255 + 16; /* LZ4_compressBound */
    size_t head_bytes = ((size_t)1 << INDEX_BITS) * sizeof(int32_t);
    size_t needed = 2 * n + capacity + n + 4 + head_bytes + 2 * (2 * n) * sizeof(int32_t); /* 4: alignment */
    if (needed > work_area_bytes) {
        uint8_t *grown = PyMem_Realloc(work_area, needed);
        if (grown == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        work_area = grown, work_area_bytes = needed;
    }
    uint8_t *block = work_area + 2 * n, *check = block + capacity;
    int32_t *index = (int32_t *)(check + n + (4 - (uintptr_t)(check + n) % 4) % 4);
    memcpy(work_area, reference.buf, n);
    memcpy(work_area + n, frame.buf, n);
    Encoder e = {work_area, n, (size_t)row_nbytes, block, block + capacity, 0, index, index + (1 << INDEX_BITS),
                 index + (1 << INDEX_BITS) + 2 * n, 1, 0, 0, 0};
    e.indexed = n >= 64 && count_change_points(work_area, n) * SPARSE_DIVISOR <= n;
    if (e.indexed) {
        memset(e.head, 0xFF, head_bytes);
    }
    Py_ssize_t size = encode_block(&e);
    int round_trips = size >= 0
                      && LZ4_decompress_safe_usingDict((const char *)block, (char *)check, (int)size, (int)n,
                                                       (const char *)work_area, (int)n) == (int)n
                      && memcmp(check, work_area + n, n) == 0;
    if (!round_trips) {
        PyErr_Format(PyExc_RuntimeError, "mmreplay._lz4ref produced a block (%zd bytes) that does not decode to "
                     "the frame; this is a bug in the encoder", size);
        goto done;
    }
    result = PyBytes_FromStringAndSize((const char *)block, size);

done:
    PyBuffer_Release(&frame);
    PyBuffer_Release(&reference);
    return result;
}
