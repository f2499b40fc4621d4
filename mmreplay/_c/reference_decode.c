/* Decoding a batch of reference-compressed frames: see reference_decode.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "argument_arrays.h"
#include "crc32.h"
#include "frame_sources.h"
#include "lz4_api.h"
#include "reference_decode.h"
#include "reference_frame.h"

static char *
row_pointer(const ReferencePlan *p, int64_t row)
{
    return row < p->n_out ? p->out + (size_t)row * (size_t)p->frame_nbytes
                          : p->scratch + (size_t)(row - p->n_out) * (size_t)p->frame_nbytes;
}

int
reference_entry_decode(const ReferencePlan *p, Py_ssize_t i)
{
    const char *src = p->sources[i];
    int length = (int)p->lengths[i]; /* range-checked when sources[i] was set */
    if (src == NULL || frame_crc32(p->seeds[i], (const unsigned char *)src, (size_t)length) != p->checksums[i]) {
        return 0;
    }
    const char *ref = p->refs[i] < 0 ? NULL : row_pointer(p, p->rows[p->refs[i]]);
    return reference_frame_decode(src, length, row_pointer(p, p->rows[i]), ref, p->frame_nbytes, p->row_nbytes,
                                  p->changed_rows);
}

Py_ssize_t
reference_decode_in_order(const ReferencePlan *p, int threads)
{
    (void)threads;
    for (Py_ssize_t i = 0; i < p->m; i++) {
        if (!reference_entry_decode(p, i)) {
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

PyObject *
reference_decode_call(PyObject *args, reference_runner runner)
{
    PyObject *views_arg;
    FrameSources frames;
    Py_buffer refs, rows, out, scratch;
    Py_ssize_t frame_nbytes, row_nbytes = 0, threads = 1;
    if (!PyArg_ParseTuple(args, "Oy*y*y*y*y*y*y*w*w*n|nn:decode", &views_arg, &frames.segments, &frames.offsets,
                          &frames.lengths, &frames.checksums, &frames.seeds, &refs, &rows, &out, &scratch,
                          &frame_nbytes, &row_nbytes, &threads)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t m = frames.segments.len / 8;
    if (frame_sources_check(&frames, frame_nbytes) < 0 || check_array(&refs, "refs", m, 8) < 0
        || check_array(&rows, "rows", m, 8) < 0) {
        goto done;
    }
    if (row_nbytes < 0 || (row_nbytes > 0 && frame_nbytes % row_nbytes != 0)) {
        PyErr_Format(PyExc_ValueError, "row_nbytes is %zd; expected 0 (whole frames) or a divisor of %zd", row_nbytes,
                     frame_nbytes);
        goto done;
    }
    if (threads < 1 || threads > 64) {
        PyErr_Format(PyExc_ValueError, "threads is %zd; expected 1 to 64", threads);
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
    if (frame_sources_locate(&frames, views_arg) < 0) {
        goto done;
    }
    ReferencePlan plan = {frames.sources, (const int64_t *)frames.lengths.buf, (const int64_t *)refs.buf,
                          (const int64_t *)rows.buf, (const uint32_t *)frames.checksums.buf,
                          (const uint32_t *)frames.seeds.buf, (char *)out.buf, (char *)scratch.buf, n_out,
                          (int)frame_nbytes, (int)row_nbytes, row_nbytes > 0, m};
    Py_ssize_t bad;
    Py_BEGIN_ALLOW_THREADS
    bad = runner(&plan, (int)threads);
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(bad);
done:
    frame_sources_release(&frames);
    PyBuffer_Release(&refs);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&out);
    PyBuffer_Release(&scratch);
    return result;
}

PyObject *
py_reference_decode(PyObject *module, PyObject *args)
{
    (void)module;
    return reference_decode_call(args, reference_decode_in_order);
}
