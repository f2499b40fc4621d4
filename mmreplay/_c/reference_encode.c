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

#include "changed_rows.h"
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

#define FRAME_INDEX_BITS 8 /* changed rows: the index of the rows encoded (a few hundred bytes) */

typedef struct {
    const uint8_t *buf;
    size_t n, end, row;      /* reference [0, n), the bytes to encode [n, end); bytes per row */
    /* Changed rows only (NULL: the whole frame follows the reference, format version 4): home[k] is the
     * offset from the k-th row of [n, end) back to the same row of the reference. */
    const size_t *home;
    uint8_t *dst, *dst_end;
    int indexed;
    /* [1 << INDEX_BITS]: the latest change point of each key, -1: none. Changed rows: the reference's
     * change points below n - 3 only (the reference's own index, kept while the same reference comes
     * again); frame_head [1 << FRAME_INDEX_BITS] those from there on, whose keys read the rows encoded. */
    int32_t *head, *frame_head;
    /* For each change point p: the previous change point of the same key, and the run's length; those
     * below `split` in next and run (a reference's own, reused), the others in frame_next and frame_run
     * at p - split. */
    int32_t *next, *run, *frame_next, *frame_run;
    size_t split;
    size_t indexed_to, run_start, cached_v, cached_end;
} Encoder;

static inline int32_t *
next_of(Encoder *e, size_t p)
{
    return p < e->split ? e->next + p : e->frame_next + (p - e->split);
}

static inline int32_t *
run_of(Encoder *e, size_t p)
{
    return p < e->split ? e->run + p : e->frame_run + (p - e->split);
}

/* The 4 bytes at p, in one load. */
static inline uint32_t
load4(const uint8_t *p)
{
    uint32_t value;
    memcpy(&value, p, 4);
    return value;
}

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
index_key(uint8_t colour, const uint8_t *p, int bits)
{
    uint32_t next4;
    memcpy(&next4, p, 4);
    return ((next4 ^ (colour * 0x01000193u)) * 2654435761u) >> (32 - bits);
}

/* The head a change point at p goes to, and the key's width there. */
static int32_t *
head_of(Encoder *e, size_t p, int *bits)
{
    if (e->frame_head != NULL && p + 4 > e->n) {
        *bits = FRAME_INDEX_BITS;
        return e->frame_head;
    }
    *bits = INDEX_BITS;
    return e->head;
}

static void
add_change_point(Encoder *e, size_t p)
{
    size_t length = p - e->run_start;
    e->run_start = p;
    *run_of(e, p) = (int32_t)(length < INT32_MAX ? length : INT32_MAX);
    int bits;
    int32_t *head = head_of(e, p, &bits);
    uint32_t key = index_key(e->buf[p - 1], e->buf + p, bits);
    *next_of(e, p) = head[key];
    head[key] = (int32_t)p;
}

/* Index the change points in [indexed_to, stop): 16 bytes at a time where SSE2 exists. */
static void
index_to(Encoder *e, size_t stop)
{
    const uint8_t *b = e->buf;
    size_t p = e->indexed_to, limit = e->end - 4; /* a key reads 4 bytes */
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

/* The change points of [1, n), in order, into at (NULL: counted only) until more than `most` are found:
 * their number, or most + 1 where there are more (a dense frame is told apart within its first bytes). */
static size_t
change_points(const uint8_t *b, size_t n, size_t most, int32_t *at)
{
    size_t count = 0, p = 1;
#if defined(__SSE2__)
    for (; p + 16 <= n; p += 16) {
        __m128i here = _mm_loadu_si128((const __m128i *)(b + p)), before = _mm_loadu_si128((const __m128i *)(b + p - 1));
        unsigned changed = ~(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(here, before)) & 0xFFFFu;
        for (; changed; changed &= changed - 1) {
            if (count == most) {
                return most + 1;
            }
            if (at != NULL) {
                at[count] = (int32_t)(p + (size_t)__builtin_ctz(changed));
            }
            count++;
        }
    }
#endif
    for (; p < n; p++) {
        if (b[p] != b[p - 1]) {
            if (count == most) {
                return most + 1;
            }
            if (at != NULL) {
                at[count] = (int32_t)p;
            }
            count++;
        }
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
    const uint8_t *b = e->buf, *here = b + v, *end = b + e->end - LAST_LITERALS;
    size_t n = e->n, row = e->row, best = 0;
    uint32_t first4 = load4(here);
    size_t h = e->home == NULL ? n : e->home[(v - n) / row]; /* back to the same place in the reference */
    size_t candidates[14] = {h, last_offset, 1, h - 1, h + 1, row, row - 1, row + 1,
                             h - row, h + row, h - row - 1, h - row + 1, h + row - 1, h + row + 1};
    size_t count = row > 1 && row < n ? 14 : 5; /* a frame of one row has no rows to move between */
    int settle = !e->indexed; /* with the index, a longer match may line up a run's end */
    for (size_t c = 0; c < count; c++) {
        size_t o = candidates[c];
        if (o == 0 || o > v || o > MAX_OFFSET || (c == 1 && o == h)) { /* o > v also catches h - row < 0 */
            continue;
        }
        const uint8_t *there = here - o;
        if (load4(there) != first4 || (best > 0 && there[best] != here[best])) {
            continue;
        }
        size_t length = match_length(there, here, end);
        if (length > best) {
            best = length;
            *offset = o;
            if (settle && c < 2 && best >= GOOD_ENOUGH) {
                return best;
            }
        }
    }
    if (e->indexed) {
        size_t run_stop = run_end(e, v, (size_t)(end - b)), run = run_stop - v;
        if (run_stop + 4 <= (size_t)(end - b)) {
            index_to(e, run_stop);
            /* the rows encoded first (the newest change points), then the reference's */
            int tried = 0;
            for (int level = e->frame_head != NULL ? 0 : 1; level < 2; level++) {
                int bits = level == 0 ? FRAME_INDEX_BITS : INDEX_BITS;
                int32_t point = (level == 0 ? e->frame_head : e->head)[index_key(*here, b + run_stop, bits)];
                for (; tried < INDEX_DEPTH && point >= 0; tried++, point = *next_of(e, (size_t)point)) {
                    size_t p = (size_t)point, o = run_stop - p;
                    if ((size_t)*run_of(e, p) < run || b[p - 1] != *here || o > MAX_OFFSET
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
    size_t n = e->n, v = n, anchor = n, last_offset = e->home == NULL ? n : e->home[0];
    size_t limit = e->end - n >= MATCH_START_LIMIT ? e->end - MATCH_START_LIMIT : n; /* no match starts here */
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
    if (emit(e, e->buf + anchor, e->end - anchor, 0, 0) < 0) {
        return -1;
    }
    return (Py_ssize_t)(e->dst - dst_start);
}

/* Each thread's work area, grown as needed and never freed: freeing ~150 KB after each frame would make
 * glibc return it to the system and fault it in again each time, which costs more than the encoding
 * (~10 us of page faults per 84x84 frame). The pool's threads (work_pool.h) and the callers each keep
 * one: the decoded copy of each block (its check), the index of the rows encoded, where each of those
 * rows lies in the reference, and (version 4, and encode_rows) the reference and frame side by side. */
typedef struct {
    uint8_t *bytes;
    size_t size;
    ReferenceIndex kept;  /* encode_rows' last reference, kept while the same one comes again */
    ReferenceIndex apart; /* reference_encode_apart's copy of a reference whose index is not built yet */
} WorkArea;

static _Thread_local WorkArea work = {NULL, 0, {0}, {0}};

typedef struct {
    uint8_t *check, *pair;   /* n bytes each: a block decoded again; (version 4) reference then frame, 2n */
    int32_t *frame_head;     /* 1 << FRAME_INDEX_BITS */
    int32_t *next, *run;     /* 2n each: version 4's whole index, or version 5's from n - 3 on */
    size_t *home;            /* a row count */
} WorkParts;

static int
work_parts(size_t n, size_t row, WorkParts *parts)
{
    size_t ints = ((size_t)1 << FRAME_INDEX_BITS) + 2 * (2 * n);
    size_t needed = 3 * n + 16 + ints * sizeof(int32_t) + 8 + (n / row) * sizeof(size_t);
    if (needed > work.size) {
        uint8_t *grown = realloc(work.bytes, needed); /* not PyMem: helper threads hold no GIL */
        if (grown == NULL) {
            return -1;
        }
        work.bytes = grown, work.size = needed;
    }
    parts->check = work.bytes;
    parts->pair = work.bytes + n;
    uint8_t *ints_start = parts->pair + 2 * n + (8 - (uintptr_t)(parts->pair + 2 * n) % 8) % 8;
    parts->frame_head = (int32_t *)ints_start;
    parts->next = parts->frame_head + ((size_t)1 << FRAME_INDEX_BITS);
    parts->run = parts->next + 2 * n;
    uint8_t *home_start = (uint8_t *)(parts->run + 2 * n);
    parts->home = (size_t *)(home_start + (8 - (uintptr_t)home_start % 8) % 8);
    return 0;
}

size_t
reference_encode_bound(size_t n, size_t row_nbytes, int changed_rows)
{
    size_t block = n + n / 255 + 16; /* LZ4_compressBound */
    return changed_rows ? changed_rows_header_bound(n / row_nbytes) + block : block;
}

/* Whether the `row` bytes at a and b are equal (inline: a library memcmp per row costs more than the
 * comparing, for rows of a few dozen bytes). */
static inline int
rows_equal(const uint8_t *a, const uint8_t *b, size_t row)
{
    size_t i = 0;
#if defined(__SSE2__)
    if (row >= 16) { /* 16 bytes a step, the last one ending at the row's end (overlapping the one before) */
        for (;; i += 16) {
            i = i + 16 <= row ? i : row - 16;
            __m128i x = _mm_loadu_si128((const __m128i *)(a + i)), y = _mm_loadu_si128((const __m128i *)(b + i));
            if (_mm_movemask_epi8(_mm_cmpeq_epi8(x, y)) != 0xFFFF) {
                return 0;
            }
            if (i + 16 == row) {
                return 1;
            }
        }
    }
#endif
    for (; i + 8 <= row; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y) {
            return 0;
        }
    }
    for (; i < row; i++) {
        if (a[i] != b[i]) {
            return 0;
        }
    }
    return 1;
}

/* The rows of frame that differ from the reference's, as changed_rows.h writes them, into dst, and those
 * rows gathered into rows_out (the k-th changed row at k * row), home[k] its offset back to the same row
 * of the reference in a buffer of the reference then rows_out. Returns the header's bytes; *changed, the
 * rows. */
static size_t
changed_rows_header(const uint8_t *frame, const uint8_t *reference, size_t n, size_t row, uint8_t *dst,
                    uint8_t *rows_out, size_t *home, size_t *changed)
{
    size_t rows = n / row, count = 0, k = 0, r = 0;
    uint8_t pairs[16 + 3 * 256], *o = pairs;
    uint8_t *spill = NULL; /* frames of more than 256 rows write their pairs after the count's room */
    if (rows > 256) {
        spill = dst + 8;
        o = spill;
    }
    while (r < rows) {
        size_t skip = 0, take = 0;
        while (r < rows && rows_equal(frame + r * row, reference + r * row, row)) {
            r++, skip++;
        }
        if (r == rows) {
            break;
        }
        while (r < rows && !rows_equal(frame + r * row, reference + r * row, row)) {
            memcpy(rows_out + k * row, frame + r * row, row);
            home[k] = n + k * row - r * row; /* k <= r: at most n */
            r++, k++, take++;
        }
        o = changed_rows_put(changed_rows_put(o, skip), take);
        count++;
    }
    uint8_t *start = spill != NULL ? spill : pairs;
    size_t pairs_bytes = (size_t)(o - start);
    uint8_t *after_count = changed_rows_put(dst, count); /* at most 8 bytes below 256 * 255 * 8 pairs */
    memmove(after_count, start, pairs_bytes);
    *changed = k;
    return (size_t)(after_count - dst) + pairs_bytes;
}

void
reference_index_free(ReferenceIndex *r)
{
    free(r->bytes);
    free(r->ints);
    *r = (ReferenceIndex){0};
}

int
reference_index_init(ReferenceIndex *r, const uint8_t *frame, size_t n, size_t row)
{
    if (r->bytes == NULL || r->n != n) {
        reference_index_free(r);
        r->bytes = malloc(2 * n);
        if (r->bytes == NULL) {
            return -1;
        }
    }
    memcpy(r->bytes, frame, n);
    r->n = n, r->row = row, r->prepared = 0;
    return 0;
}

/* Whether the reference is sparse enough to index (at most n / SPARSE_DIVISOR change points), and its
 * index over the change points below n - 3 (whose keys read the reference alone): once, at its first use.
 * One pass finds the change points, stopping once there are too many (Breakout's, MsPacman's frames: a
 * part of the frame read), into `scratch` (room for n / SPARSE_DIVISOR + 1); the index is built from
 * those, without reading the frame again. */
static int
reference_index_prepare(ReferenceIndex *r, int32_t *scratch)
{
    if (__atomic_load_n(&r->prepared, __ATOMIC_ACQUIRE)) {
        return 0;
    }
    size_t n = r->n, most = n / SPARSE_DIVISOR, count = n >= 64 ? change_points(r->bytes, n, most, scratch) : 0;
    r->indexed = n >= 64 && count <= most;
    r->run_start = 1;
    if (r->indexed) {
        if (r->ints == NULL) {
            r->ints = malloc((((size_t)1 << INDEX_BITS) + 2 * n) * sizeof(int32_t));
            if (r->ints == NULL) {
                return -1;
            }
        }
        int32_t *head = r->ints;
        memset(head, 0xFF, ((size_t)1 << INDEX_BITS) * sizeof(int32_t));
        Encoder e = {.buf = r->bytes, .n = n, .end = n + 1, .row = r->row, .indexed = 1, .head = head,
                     .frame_head = head, .next = head + ((size_t)1 << INDEX_BITS),
                     .run = head + ((size_t)1 << INDEX_BITS) + n, .split = n, .indexed_to = 1, .run_start = 1};
        for (size_t k = 0; k < count && (size_t)scratch[k] < n - 3; k++) { /* a key reads 4 bytes */
            add_change_point(&e, (size_t)scratch[k]);
        }
        r->run_start = e.run_start;
    }
    __atomic_store_n(&r->prepared, 1, __ATOMIC_RELEASE); /* what reference_encode_apart reads from here on */
    return 0;
}

/* Decodes a block again and compares it with what it encodes: whether it round-trips. */
static int
round_trips(const uint8_t *block, Py_ssize_t size, const uint8_t *reference, size_t n, const uint8_t *encoded,
            size_t m, uint8_t *check)
{
    return size >= 0
           && LZ4_decompress_safe_usingDict((const char *)block, (char *)check, (int)size, (int)m,
                                            (const char *)reference, (int)n) == (int)m
           && memcmp(check, encoded, m) == 0;
}

/* The frame's changed rows and their block against a prepared reference index, which is only read; the
 * encoder reads the reference from `buffer`, n bytes with room for the rows after them (the index's own
 * bytes, or a copy of them). */
static Py_ssize_t
encode_prepared(const uint8_t *frame, const ReferenceIndex *reference, uint8_t *buffer, uint8_t *dst,
                const WorkParts *parts)
{
    size_t n = reference->n, row = reference->row, m;
    size_t header = changed_rows_header(frame, buffer, n, row, dst, buffer + n, parts->home, &m);
    m *= row;
    if (m == 0) {
        return (Py_ssize_t)header; /* the frame is its reference: no block */
    }
    uint8_t *block = dst + header;
    size_t capacity = n + n / 255 + 16;
    Encoder e = {.buf = buffer, .n = n, .end = n + m, .row = row, .home = parts->home, .dst = block,
                 .dst_end = block + capacity, .indexed = reference->indexed, .indexed_to = 1, .run_start = 1,
                 .split = SIZE_MAX};
    /* An indexed reference has at least 64 bytes: its own index below n - 3 (read only), the frame's from
     * there on. */
    if (e.indexed) {
        memset(parts->frame_head, 0xFF, ((size_t)1 << FRAME_INDEX_BITS) * sizeof(int32_t));
        e.head = reference->ints;
        e.frame_head = parts->frame_head;
        e.next = reference->ints + ((size_t)1 << INDEX_BITS);
        e.run = e.next + n;
        e.frame_next = parts->next, e.frame_run = parts->run;
        e.split = n - 3, e.indexed_to = n - 3, e.run_start = reference->run_start;
    }
    Py_ssize_t size = encode_block(&e);
    /* Every block is decoded again and compared: one that would not round-trip is never stored. */
    if (!round_trips(block, size, buffer, n, buffer + n, m, parts->check)) {
        return -1;
    }
    return (Py_ssize_t)header + size;
}

Py_ssize_t
reference_encode_indexed(const uint8_t *frame, ReferenceIndex *reference, uint8_t *dst)
{
    size_t n = reference->n, row = reference->row;
    WorkParts parts;
    if (n == 0 || row == 0 || n % row != 0 || work_parts(n, row, &parts) < 0
        || reference_index_prepare(reference, parts.next) < 0) {
        return -1;
    }
    return encode_prepared(frame, reference, reference->bytes, dst, &parts);
}

Py_ssize_t
reference_encode_apart(const uint8_t *frame, const ReferenceIndex *reference, uint8_t *dst)
{
    size_t n = reference->n, row = reference->row;
    WorkParts parts;
    if (n == 0 || row == 0 || n % row != 0 || work_parts(n, row, &parts) < 0) {
        return -1;
    }
    if (__atomic_load_n(&reference->prepared, __ATOMIC_ACQUIRE)) { /* its index, read only, over a copy */
        memcpy(parts.pair, reference->bytes, n);
        return encode_prepared(frame, reference, parts.pair, dst, &parts);
    }
    ReferenceIndex *own = &work.apart; /* its index may be being built: a copy with an index of its own */
    if (reference_index_init(own, reference->bytes, n, row) < 0 || reference_index_prepare(own, parts.next) < 0) {
        return -1;
    }
    return encode_prepared(frame, own, own->bytes, dst, &parts);
}

Py_ssize_t
reference_encode(const uint8_t *frame, const uint8_t *reference, size_t n, size_t row_nbytes, int changed_rows,
                 uint8_t *dst)
{
    WorkParts parts;
    if (n == 0 || row_nbytes == 0 || n % row_nbytes != 0 || work_parts(n, row_nbytes, &parts) < 0) {
        return -1;
    }
    if (changed_rows) { /* the reference kept from the last call when it comes again */
        ReferenceIndex *kept = &work.kept;
        if (!(kept->bytes != NULL && kept->n == n && kept->row == row_nbytes && memcmp(kept->bytes, reference, n) == 0)
            && reference_index_init(kept, reference, n, row_nbytes) < 0) {
            return -1;
        }
        return reference_encode_indexed(frame, kept, dst);
    }
    /* version 4: the whole frame after the reference, its index built from scratch */
    size_t capacity = n + n / 255 + 16;
    memcpy(parts.pair, reference, n);
    memcpy(parts.pair + n, frame, n);
    int32_t head[(size_t)1 << INDEX_BITS];
    Encoder e = {.buf = parts.pair, .n = n, .end = 2 * n, .row = row_nbytes, .dst = dst, .dst_end = dst + capacity,
                 .head = head, .next = parts.next, .run = parts.run, .split = SIZE_MAX, .indexed_to = 1,
                 .run_start = 1};
    e.indexed = n >= 64 && change_points(parts.pair, n, n / SPARSE_DIVISOR, NULL) <= n / SPARSE_DIVISOR;
    if (e.indexed) {
        memset(head, 0xFF, sizeof(head));
    }
    Py_ssize_t size = encode_block(&e);
    if (!round_trips(dst, size, parts.pair, n, parts.pair + n, n, parts.check)) {
        return -1;
    }
    return size;
}

static PyObject *
encode_call(PyObject *args, int changed_rows, const char *format)
{
    Py_buffer frame, reference;
    Py_ssize_t row_nbytes;
    if (!PyArg_ParseTuple(args, format, &frame, &reference, &row_nbytes)) {
        return NULL;
    }
    PyObject *result = NULL;
    size_t n = (size_t)frame.len;
    uint8_t *dst = NULL;
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
    dst = PyMem_Malloc(reference_encode_bound(n, (size_t)row_nbytes, changed_rows));
    if (dst == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t size = reference_encode(frame.buf, reference.buf, n, (size_t)row_nbytes, changed_rows, dst);
    if (size < 0) {
        PyErr_Format(PyExc_RuntimeError, "mmreplay._lz4ref could not encode a frame (out of memory, or a block "
                     "that does not decode to the frame: a bug in the encoder)");
        goto done;
    }
    result = PyBytes_FromStringAndSize((const char *)dst, size);
done:
    PyMem_Free(dst);
    PyBuffer_Release(&frame);
    PyBuffer_Release(&reference);
    return result;
}

PyObject *
py_encode(PyObject *module, PyObject *args)
{
    (void)module;
    return encode_call(args, 0, "y*y*n:encode");
}

PyObject *
py_encode_rows(PyObject *module, PyObject *args)
{
    (void)module;
    return encode_call(args, 1, "y*y*n:encode_rows");
}
