/* mmreplay._lz4ref: lz4 blocks compressed against a reference frame (mmreplay/reference_codec.py).
 *
 * A dependent frame is one lz4 block whose matches may reach back into its reference frame, as if the
 * reference lay just before it (lz4's "dictionary"); any lz4 decoder given the reference as dictionary
 * decodes it (LZ4_decompress_safe_usingDict, python-lz4's ``dict=``). A key frame is a plain block.
 *
 * decode(views, segments, offsets, lengths, checksums, seeds, refs, rows, out, scratch, frame_nbytes) -> int
 *   views, segments, offsets, lengths, checksums, seeds: as in mmreplay._lz4batch.decode, for m entries
 *   refs:    int64[m]: the entry whose frame is entry i's reference (refs[i] < i), or -1 for a key frame
 *   rows:    int64[m]: where entry i's frame goes: rows[i] < n_out is out's row, else scratch's row
 *            rows[i] - n_out, where n_out = len(out) / frame_nbytes
 *   out, scratch: writable C-contiguous buffers of whole frames
 * Entries decode in order, the GIL released once, so a reference is decoded before the frames that
 * use it. Returns -1 when every entry's range lies inside its view, its CRC matches and it decodes to
 * exactly frame_nbytes bytes; else the smallest i that fails (later entries are left undecoded).
 * Raises ValueError for a segment outside views, a row outside out and scratch, or refs[i] >= i.
 *
 * plan(chain, width, entries) -> int
 *   chain:   int64[width][n]: chain[0] the requested frame steps, chain[k + 1][i] the reference of
 *            chain[k][i], a key frame being its own reference; chain[width - 1] == chain[width - 2]
 *   entries: int64[3][n * (width - 1)] output: steps, refs, rows as decode() takes them
 * Lists each requested frame (repeats included) and each reference not requested (once), ordered by
 * level (how many references lie between the frame and its key frame: key frames first) and then by
 * first appearance: the order decode() needs. Returns the number of entries m; rows[i] is the requested
 * row i for a requested frame and n, n + 1, ... for the references added, in order of first appearance.
 * Raises ValueError when chain is not such a table.
 *
 * encode(frame, reference, row_nbytes) -> bytes
 *   A greedy lz4 block (one step of lazy matching) of ``frame`` against ``reference`` (same length;
 *   row_nbytes: bytes per image row, for the offsets that mean "one row away"). Atari frames change in
 *   a few small places between nearby frames, so nearly every match is one of a few known offsets or
 *   lines up the end of a run of one colour (see "encoding" below). Trying only those is ~5-10x faster
 *   than lz4's HC mode and within a few percent of HC 9's size (benchmarks/bench_dense.py measures
 *   both). Every block is decoded again and compared before it is returned: a block that would not
 *   round-trip raises RuntimeError instead of being stored. Keeps the GIL (it uses one work area).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "_frames_common.h"

/* The lz4 block format's rules (lz4_Block_format.md): a match is at least 4 bytes and reaches back at
 * most 65,535 bytes; the last 5 bytes are literals and the last match starts at least 12 bytes before
 * the end. */
#define MIN_MATCH 4
#define MAX_OFFSET 65535
#define LAST_LITERALS 5
#define MATCH_START_LIMIT 12

/* -- decoding ------------------------------------------------------------------------------------ */

typedef struct {
    const char *const *sources; /* sources[i]: entry i's compressed bytes, NULL when out of range */
    const int64_t *lengths, *refs, *rows;
    const uint32_t *checksums, *seeds;
    char *out, *scratch;
    Py_ssize_t n_out;
    int frame_nbytes;
    Py_ssize_t m;
} Plan;

static char *
row_pointer(const Plan *p, int64_t row)
{
    return row < p->n_out ? p->out + (size_t)row * (size_t)p->frame_nbytes
                          : p->scratch + (size_t)(row - p->n_out) * (size_t)p->frame_nbytes;
}

static Py_ssize_t
decode_plan(const Plan *p)
{
    for (Py_ssize_t i = 0; i < p->m; i++) {
        const char *src = p->sources[i];
        int length = (int)p->lengths[i]; /* range-checked when sources[i] was set */
        if (src == NULL || (uint32_t)crc32(p->seeds[i], (const Bytef *)src, (uInt)length) != p->checksums[i]) {
            return i;
        }
        char *dst = row_pointer(p, p->rows[i]);
        int decoded = p->refs[i] < 0
                          ? LZ4_decompress_safe(src, dst, length, p->frame_nbytes)
                          : LZ4_decompress_safe_usingDict(src, dst, length, p->frame_nbytes,
                                                          row_pointer(p, p->rows[p->refs[i]]), p->frame_nbytes);
        if (decoded != p->frame_nbytes) {
            return i;
        }
    }
    return -1;
}

/* refs must point backwards and rows inside out and scratch, each row written once, so that a
 * frame's reference is never overwritten before its dependents are decoded. */
static int
check_plan(const int64_t *refs, const int64_t *rows, Py_ssize_t m, Py_ssize_t total_rows)
{
    unsigned char *written = PyMem_Calloc((size_t)(total_rows > 0 ? total_rows : 1), 1);
    if (written == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int status = 0;
    for (Py_ssize_t i = 0; i < m && status == 0; i++) {
        if (refs[i] < -1 || refs[i] >= i) {
            PyErr_Format(PyExc_ValueError, "refs[%zd] is %lld; expected -1 or an earlier entry (0 to %zd)", i,
                         (long long)refs[i], i - 1);
            status = -1;
        }
        else if (rows[i] < 0 || rows[i] >= total_rows || written[rows[i]]) {
            PyErr_Format(PyExc_ValueError,
                         "rows[%zd] is %lld; expected a row not used before, 0 <= row < %zd (out and scratch rows)",
                         i, (long long)rows[i], total_rows);
            status = -1;
        }
        else {
            written[rows[i]] = 1;
        }
    }
    PyMem_Free(written);
    return status;
}

static PyObject *
lz4ref_decode(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *views_arg;
    Py_buffer segments, offsets, lengths, checksums, seeds, refs, rows, out, scratch;
    Py_ssize_t frame_nbytes;
    if (!PyArg_ParseTuple(args, "Oy*y*y*y*y*y*y*w*w*n:decode", &views_arg, &segments, &offsets, &lengths,
                          &checksums, &seeds, &refs, &rows, &out, &scratch, &frame_nbytes)) {
        return NULL;
    }
    PyObject *result = NULL, *views = NULL;
    const char **sources = NULL;
    Py_buffer *buffers = NULL;
    Py_ssize_t acquired = 0;
    Py_ssize_t m = segments.len / 8;

    if (frame_nbytes <= 0 || frame_nbytes > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "frame_nbytes is %zd; expected 1 to %d", frame_nbytes, INT_MAX);
        goto done;
    }
    if (check_array(&segments, "segments", m, 8) < 0 || check_array(&offsets, "offsets", m, 8) < 0
        || check_array(&lengths, "lengths", m, 8) < 0 || check_array(&checksums, "checksums", m, 4) < 0
        || check_array(&seeds, "seeds", m, 4) < 0 || check_array(&refs, "refs", m, 8) < 0
        || check_array(&rows, "rows", m, 8) < 0) {
        goto done;
    }
    if (out.len % frame_nbytes != 0 || scratch.len % frame_nbytes != 0) {
        PyErr_Format(PyExc_ValueError, "out has %zd bytes and scratch %zd; expected whole frames of %zd bytes",
                     out.len, scratch.len, frame_nbytes);
        goto done;
    }
    Py_ssize_t n_out = out.len / frame_nbytes;
    if (check_plan((const int64_t *)refs.buf, (const int64_t *)rows.buf, m, n_out + scratch.len / frame_nbytes)
        < 0) {
        goto done;
    }
    views = PySequence_Fast(views_arg, "views must be a sequence of buffers");
    if (views == NULL) {
        goto done;
    }
    Py_ssize_t buffer_count = PySequence_Fast_GET_SIZE(views) < m ? PySequence_Fast_GET_SIZE(views) : m;
    sources = PyMem_Malloc((size_t)(m > 0 ? m : 1) * sizeof(*sources));
    buffers = PyMem_Malloc((size_t)(buffer_count > 0 ? buffer_count : 1) * sizeof(*buffers));
    if (sources == NULL || buffers == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (locate_frames(views, (const int64_t *)segments.buf, (const int64_t *)offsets.buf,
                      (const int64_t *)lengths.buf, m, sources, buffers, &acquired) < 0) {
        goto done;
    }
    Plan plan = {sources, (const int64_t *)lengths.buf, (const int64_t *)refs.buf, (const int64_t *)rows.buf,
                 (const uint32_t *)checksums.buf, (const uint32_t *)seeds.buf, (char *)out.buf, (char *)scratch.buf,
                 n_out, (int)frame_nbytes, m};
    Py_ssize_t bad;
    Py_BEGIN_ALLOW_THREADS
    bad = decode_plan(&plan);
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(bad);

done:
    for (Py_ssize_t k = 0; k < acquired; k++) {
        PyBuffer_Release(&buffers[k]);
    }
    PyMem_Free(buffers);
    PyMem_Free(sources);
    Py_XDECREF(views);
    PyBuffer_Release(&segments);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&checksums);
    PyBuffer_Release(&seeds);
    PyBuffer_Release(&refs);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&out);
    PyBuffer_Release(&scratch);
    return result;
}

/* -- planning ------------------------------------------------------------------------------------ */

typedef struct {
    int64_t *steps; /* -1: an empty slot (frame steps are never negative) */
    Py_ssize_t *entries;
    size_t mask;
} StepMap;

/* The entry that holds step, or -1 after recording it as ``entry`` (open addressing, linear probing). */
static Py_ssize_t
find_or_add(StepMap *map, int64_t step, Py_ssize_t entry)
{
    size_t slot = (size_t)(((uint64_t)step * 0x9E3779B97F4A7C15ull) >> 32) & map->mask;
    while (map->steps[slot] != -1) {
        if (map->steps[slot] == step) {
            return map->entries[slot];
        }
        slot = (slot + 1) & map->mask;
    }
    map->steps[slot] = step;
    map->entries[slot] = entry;
    return -1;
}

/* Entries in order of first appearance (requested frames, then references row by row), then sorted by
 * level, stably. Returns m; -1 when out of memory, -2 on an internal error. */
static Py_ssize_t
plan_entries(const int64_t *chain, Py_ssize_t n, Py_ssize_t width, int64_t *steps, int64_t *refs, int64_t *rows)
#define LINK(i, k) chain[(k) * n + (i)]
{
    Py_ssize_t capacity = n * (width - 1) > 0 ? n * (width - 1) : 1;
    size_t size = 16;
    while (size < 2 * (size_t)capacity) {
        size *= 2;
    }
    StepMap map = {PyMem_Malloc(size * sizeof(int64_t)), PyMem_Malloc(size * sizeof(Py_ssize_t)), size - 1};
    int64_t *entry = PyMem_Malloc((size_t)capacity * 4 * sizeof(int64_t)); /* step, ref step, level, row */
    Py_ssize_t *position = PyMem_Malloc(((size_t)capacity + (size_t)width) * sizeof(Py_ssize_t));
    Py_ssize_t m = -1;
    if (map.steps == NULL || map.entries == NULL || entry == NULL || position == NULL) {
        goto done;
    }
    int64_t *ref_step = entry + capacity, *level = ref_step + capacity, *row = level + capacity;
    Py_ssize_t *level_start = position + capacity;
    memset(map.steps, 0xFF, size * sizeof(int64_t));
    m = 0;
    for (Py_ssize_t i = 0; i < n; i++) { /* a repeated requested frame: the first one is referenced */
        int64_t depth = 0;
        while (depth < width - 1 && LINK(i, depth) != LINK(i, depth + 1)) {
            depth++;
        }
        find_or_add(&map, LINK(i, 0), m);
        entry[m] = LINK(i, 0), ref_step[m] = LINK(i, 1), level[m] = depth, row[m] = i;
        m++;
    }
    Py_ssize_t added = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        for (int64_t k = 1; k <= level[i]; k++) {
            if (find_or_add(&map, LINK(i, k), m) >= 0) {
                break; /* listed already, and so are its references */
            }
            entry[m] = LINK(i, k), ref_step[m] = LINK(i, k + 1), level[m] = level[i] - k, row[m] = n + added++;
            m++;
        }
    }
#undef LINK
    for (Py_ssize_t l = 0; l < width; l++) {
        level_start[l] = 0;
    }
    for (Py_ssize_t e = 0; e < m; e++) {
        level_start[level[e] + 1 < width ? level[e] + 1 : width - 1]++;
    }
    for (Py_ssize_t l = 1; l < width; l++) {
        level_start[l] += level_start[l - 1];
    }
    for (Py_ssize_t e = 0; e < m; e++) {
        position[e] = level_start[level[e]]++;
    }
    for (Py_ssize_t e = 0; e < m; e++) {
        Py_ssize_t p = position[e];
        steps[p] = entry[e];
        rows[p] = row[e];
        Py_ssize_t reference = level[e] == 0 ? -1 : find_or_add(&map, ref_step[e], -1);
        if (level[e] != 0 && reference < 0) { /* cannot happen: every reference was listed above */
            m = -2;
            goto done;
        }
        refs[p] = reference < 0 ? -1 : position[reference];
    }
done:
    PyMem_Free(map.steps);
    PyMem_Free(map.entries);
    PyMem_Free(entry);
    PyMem_Free(position);
    return m;
}

static PyObject *
lz4ref_plan(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer chain, entries;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "y*nw*:plan", &chain, &width, &entries)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = width >= 2 ? chain.len / 8 / width : 0;
    if (width < 2 || check_array(&chain, "chain", n * width, 8) < 0
        || check_array(&entries, "entries", 3 * n * (width - 1), 8) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "width is %zd; expected at least 2", width);
        }
        goto done;
    }
    const int64_t *links = chain.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        for (Py_ssize_t k = 0; k + 1 < width; k++) {
            int64_t step = links[k * n + i], next = links[(k + 1) * n + i];
            if (step < 0 || next < 0 || next > step) {
                PyErr_Format(PyExc_ValueError, "chain column %zd is not a descending run of frame steps", i);
                goto done;
            }
        }
        if (links[(width - 1) * n + i] != links[(width - 2) * n + i]) {
            PyErr_Format(PyExc_ValueError, "chain column %zd does not end at a key frame (two equal steps)", i);
            goto done;
        }
    }
    int64_t *out = entries.buf;
    Py_ssize_t capacity = n * (width - 1);
    Py_ssize_t m = plan_entries(links, n, width, out, out + capacity, out + 2 * capacity);
    if (m == -2) {
        PyErr_SetString(PyExc_SystemError, "mmreplay._lz4ref.plan lost a reference; this is a bug");
    }
    result = m == -1 ? PyErr_NoMemory() : m < 0 ? NULL : PyLong_FromSsize_t(m);
done:
    PyBuffer_Release(&chain);
    PyBuffer_Release(&entries);
    return result;
}

/* -- encoding ------------------------------------------------------------------------------------ */

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

static PyObject *
lz4ref_encode(PyObject *module, PyObject *args)
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

static PyMethodDef lz4ref_methods[] = {
    {"decode", lz4ref_decode, METH_VARARGS,
     "decode(views, segments, offsets, lengths, checksums, seeds, refs, rows, out, scratch, frame_nbytes) -> int\n\n"
     "Decode m lz4 blocks in order, each against the entry refs[i] (or alone when -1), into out or scratch\n"
     "(rows[i]), with the GIL released; -1 when all are good, else the first bad entry."},
    {"plan", lz4ref_plan, METH_VARARGS,
     "plan(chain, width, entries) -> int\n\n"
     "List requested frames and their references in decode order (see the module's comment)."},
    {"encode", lz4ref_encode, METH_VARARGS,
     "encode(frame, reference, row_nbytes) -> bytes\n\n"
     "One lz4 block of frame with reference as its dictionary, checked to decode back to frame."},
    {NULL, NULL, 0, NULL},
};

/* The interface of this module's functions, as mmreplay/extensions.py's INTERFACES expects it: bump
 * both when a function is added or its arguments change, so that a build from older sources is
 * refused (and its pure-Python fallback used) rather than failing mid-call. */
#define INTERFACE 1

static struct PyModuleDef lz4ref_module = {
    PyModuleDef_HEAD_INIT, "mmreplay._lz4ref", "lz4 against a reference frame, for mmreplay.reference_codec.", -1,
    lz4ref_methods,
};

PyMODINIT_FUNC
PyInit__lz4ref(void)
{
    PyObject *module = PyModule_Create(&lz4ref_module);
    if (module != NULL && PyModule_AddIntConstant(module, "INTERFACE", INTERFACE) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
