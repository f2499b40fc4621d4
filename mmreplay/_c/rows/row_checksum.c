/* The checksums of a batch of records: see row_checksum.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "argument_arrays.h"
#include "rows/row_checksum.h"

PyObject *
py_row_checksums(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer rows, steps, out;
    Py_ssize_t row_size;
    if (!PyArg_ParseTuple(args, "y*ny*w*:row_checksums", &rows, &row_size, &steps, &out)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = steps.len / 8;
    if (row_size < RECORD_UNCHECKED_BYTES || rows.len != n * row_size || check_array(&steps, "steps", n, 8) < 0
        || check_array(&out, "out", n, 4) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "row_checksums: rows, row_size, steps and out do not agree");
        }
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        ((uint32_t *)out.buf)[i] = row_crc((const unsigned char *)rows.buf + i * row_size, row_size,
                                           ((const int64_t *)steps.buf)[i], RECORD_UNCHECKED_BYTES);
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&rows);
    PyBuffer_Release(&steps);
    PyBuffer_Release(&out);
    return result;
}
