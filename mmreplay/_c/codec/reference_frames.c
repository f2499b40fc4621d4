/* One frame of a reference store compressed against its reference, and applied back: see
 * reference_frames.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <string.h>

#include "codec/reference_frames.h"

/* The most bytes the numbers before a frame's units take: runs and taken, and a pair a run (a run needs
 * a changed unit and, but for the last, an equal one after it), each number at most units / 255 + 1
 * bytes. */
static long long
header_bound(long long units)
{
    return (2 + 2 * ((units + 1) / 2)) * (units / 255 + 1);
}

int
reference_shape_init(ReferenceShape *shape, long long frame_nbytes, long long row_nbytes, long long unit)
{
    if (frame_nbytes <= 0 || row_nbytes <= 0 || unit <= 0 || row_nbytes % unit != 0 || frame_nbytes % row_nbytes != 0
        || frame_nbytes > INT_MAX / 4) {
        return -1;
    }
    long long work = 2 * header_bound(frame_nbytes / unit) + frame_nbytes;
    if (work > INT_MAX / 2) {
        return -1;
    }
    *shape = (ReferenceShape){(int)frame_nbytes, (int)row_nbytes, (int)unit, (int)work};
    return 0;
}

static inline unsigned char *
put_number(unsigned char *o, size_t value)
{
    for (; value >= 255; value -= 255) {
        *o++ = 255;
    }
    *o++ = (unsigned char)value;
    return o;
}

/* Reads a number at *p, never past end: 1 with *value set, 0 when it runs past end. */
static inline int
get_number(const unsigned char **p, const unsigned char *end, size_t *value)
{
    size_t total = 0;
    while (*p < end) {
        unsigned char byte = *(*p)++;
        total += byte;
        if (byte != 255) {
            *value = total;
            return 1;
        }
        if (total > (size_t)INT_MAX) {
            return 0;
        }
    }
    return 0;
}

/* Whether the unit at offset differs between frame and ref: one masked 8-byte compare for units of up to
 * 8 bytes that are not the frame's last 8 (the bytes after the unit are read, never used). */
static inline int
unit_changed(const char *frame, const char *ref, size_t at, size_t unit, size_t frame_nbytes)
{
    if (unit <= 8 && at + 8 <= frame_nbytes) {
        uint64_t a, b;
        memcpy(&a, frame + at, 8);
        memcpy(&b, ref + at, 8);
        uint64_t mask = unit == 8 ? ~(uint64_t)0 : ((uint64_t)1 << (8 * unit)) - 1;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        mask = unit == 8 ? mask : mask << (8 * (8 - unit));
#endif
        return ((a ^ b) & mask) != 0;
    }
    return memcmp(frame + at, ref + at, unit) != 0;
}

int
reference_frame_encode(const ReferenceShape *shape, const char *frame, const char *ref, char *out, int capacity,
                       LZ4_stream_t *stream, char *work)
{
    const size_t unit = (size_t)shape->unit, n = (size_t)shape->frame_nbytes, row = (size_t)shape->row_nbytes;
    const size_t reserve = (size_t)header_bound((long long)(n / unit));
    /* work: [reserve for the numbers][the changed units][the pairs, written as found, then runs and taken] */
    unsigned char *data = (unsigned char *)work + reserve, *pairs = data + n, *p = pairs;
    size_t runs = 0, taken = 0, run_start = 0, run_length = 0, after_last = 0;
    for (size_t row_at = 0; row_at < n; row_at += row) {
        if (memcmp(frame + row_at, ref + row_at, row) == 0) {
            if (run_length > 0) { /* a run ends with the row before */
                p = put_number(put_number(p, run_start - after_last), run_length);
                after_last = run_start + run_length, run_length = 0, runs++;
            }
            continue;
        }
        for (size_t at = row_at; at < row_at + row; at += unit) {
            if (unit_changed(frame, ref, at, unit, n)) {
                if (run_length++ == 0) {
                    run_start = at / unit;
                }
                memcpy(data + taken * unit, frame + at, unit);
                taken++;
            }
            else if (run_length > 0) {
                p = put_number(put_number(p, run_start - after_last), run_length);
                after_last = run_start + run_length, run_length = 0, runs++;
            }
        }
    }
    if (run_length > 0) {
        p = put_number(put_number(p, run_start - after_last), run_length);
        runs++;
    }
    /* runs and taken after the pairs (their room is counted in the reserve), then both moved before the units */
    unsigned char *head = p, *h = put_number(put_number(head, runs), taken);
    size_t head_bytes = (size_t)(h - head), pair_bytes = (size_t)(p - pairs);
    unsigned char *start = data - head_bytes - pair_bytes;
    memcpy(start, head, head_bytes);
    memcpy(start + head_bytes, pairs, pair_bytes);
    int size = (int)(head_bytes + pair_bytes + taken * unit);
    /* LZ4_loadDict resets the stream (liblz4 1.9), and of no bytes loads none: the block is what python-lz4's
     * compress(dict=ref) makes, or its compress() below REFERENCE_DICT_MIN_BYTES */
    LZ4_loadDict(stream, ref, size < REFERENCE_DICT_MIN_BYTES ? 0 : shape->frame_nbytes);
    int length = LZ4_compress_fast_continue(stream, (const char *)start, out, size, capacity, 1);
    return length > 0 ? length : 0;
}

/* Copies n bytes (a few units, mostly) without a call for the short ones. */
static inline void
copy_units(char *dst, const unsigned char *src, size_t n)
{
    if (n >= 8 && n <= 16) {
        uint64_t a, b;
        memcpy(&a, src, 8);
        memcpy(&b, src + n - 8, 8);
        memcpy(dst, &a, 8);
        memcpy(dst + n - 8, &b, 8);
    }
    else if (n >= 4 && n < 8) {
        uint32_t a, b;
        memcpy(&a, src, 4);
        memcpy(&b, src + n - 4, 4);
        memcpy(dst, &a, 4);
        memcpy(dst + n - 4, &b, 4);
    }
    else {
        memcpy(dst, src, n);
    }
}

int
reference_frame_apply(const ReferenceShape *shape, const char *src, int length, char *dst, const char *ref,
                      char *work)
{
    const size_t unit = (size_t)shape->unit, units = (size_t)shape->frame_nbytes / unit;
    int capacity = shape->work_bytes - (int)header_bound((long long)units);
    int got = LZ4_decompress_safe_usingDict(src, work, length, capacity, ref, shape->frame_nbytes);
    if (got <= 0) {
        return 0;
    }
    const unsigned char *p = (const unsigned char *)work, *end = p + got;
    size_t runs, taken;
    if (!get_number(&p, end, &runs) || !get_number(&p, end, &taken) || taken > units || runs > taken
        || (size_t)(end - p) < taken * unit) {
        return 0;
    }
    const unsigned char *data = end - taken * unit, *pairs_end = data;
    if (dst != ref) {
        memcpy(dst, ref, (size_t)shape->frame_nbytes);
    }
    size_t at = 0, copied = 0;
    for (size_t k = 0; k < runs; k++) {
        size_t skip, take;
        if (p + 2 <= pairs_end && p[0] < 255 && p[1] < 255) { /* both numbers one byte: nearly every pair */
            skip = p[0], take = p[1], p += 2;
        }
        else if (!get_number(&p, pairs_end, &skip) || !get_number(&p, pairs_end, &take)) {
            return 0;
        }
        if (take == 0 || skip > units - at || take > units - at - skip || take > taken - copied) {
            return 0;
        }
        at += skip;
        copy_units(dst + at * unit, data, take * unit);
        data += take * unit, at += take, copied += take;
    }
    return p == pairs_end && copied == taken;
}

/* The shape of a call's frame and reference (both n bytes): 0, or -1 with a ValueError. */
static int
shape_of(ReferenceShape *shape, Py_ssize_t n, Py_ssize_t reference_n, long long row_nbytes, long long unit)
{
    if (n != reference_n || reference_shape_init(shape, n, row_nbytes, unit) < 0) {
        PyErr_Format(PyExc_ValueError, "a frame of %zd bytes, its reference of %zd: expected equal sizes that rows "
                     "of %lld bytes divide, and units of %lld bytes dividing the rows", n, reference_n, row_nbytes,
                     unit);
        return -1;
    }
    return 0;
}

PyObject *
py_reference_encode(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer frame, reference;
    long long row_nbytes, unit;
    if (!PyArg_ParseTuple(args, "y*y*LL:reference_encode", &frame, &reference, &row_nbytes, &unit)) {
        return NULL;
    }
    PyObject *result = NULL;
    ReferenceShape shape;
    char *work = NULL;
    LZ4_stream_t *stream = NULL;
    if (shape_of(&shape, frame.len, reference.len, row_nbytes, unit) < 0) {
        goto done;
    }
    int capacity = LZ4_compressBound(shape.work_bytes);
    work = PyMem_Malloc((size_t)shape.work_bytes);
    stream = LZ4_createStream();
    result = work == NULL || stream == NULL ? PyErr_NoMemory() : PyBytes_FromStringAndSize(NULL, capacity);
    if (result == NULL) {
        goto done;
    }
    int length = reference_frame_encode(&shape, frame.buf, reference.buf, PyBytes_AS_STRING(result), capacity, stream,
                                        work);
    if (_PyBytes_Resize(&result, length) < 0) {
        result = NULL;
    }
done:
    PyMem_Free(work);
    if (stream != NULL) {
        LZ4_freeStream(stream);
    }
    PyBuffer_Release(&frame);
    PyBuffer_Release(&reference);
    return result;
}

PyObject *
py_reference_apply(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer block, reference;
    long long row_nbytes, unit;
    if (!PyArg_ParseTuple(args, "y*y*LL:reference_apply", &block, &reference, &row_nbytes, &unit)) {
        return NULL;
    }
    PyObject *result = NULL;
    ReferenceShape shape;
    char *work = NULL;
    if (shape_of(&shape, reference.len, reference.len, row_nbytes, unit) < 0 || block.len > INT_MAX) {
        goto done;
    }
    work = PyMem_Malloc((size_t)shape.work_bytes);
    result = work == NULL ? PyErr_NoMemory() : PyBytes_FromStringAndSize(NULL, reference.len);
    if (result != NULL && !reference_frame_apply(&shape, block.buf, (int)block.len, PyBytes_AS_STRING(result),
                                                 reference.buf, work)) {
        Py_SETREF(result, Py_NewRef(Py_None));
    }
done:
    PyMem_Free(work);
    PyBuffer_Release(&block);
    PyBuffer_Release(&reference);
    return result;
}
