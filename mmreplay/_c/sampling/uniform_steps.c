/* The uniform sampler's draws: see uniform_steps.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "sampling/bit_generator.h"
#include "sampling/uniform_steps.h"

PyObject *
py_uniform_steps(PyObject *module, PyObject *args)
{
    PyObject *bit_generator;
    long long count, start;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "OLLw*:uniform_steps", &bit_generator, &count, &start, &out)) {
        return NULL;
    }
    PyObject *result = NULL;
    PyObject *capsule;
    BitGen *bitgen = bit_generator_open(bit_generator, &capsule);
    if (bitgen == NULL) {
        goto done; /* the error is set: not a numpy BitGenerator */
    }
    if (out.len % (Py_ssize_t)sizeof(int64_t) != 0 || (uintptr_t)out.buf % sizeof(int64_t) != 0 || count < 1) {
        PyErr_Format(PyExc_ValueError,
                     "uniform_steps: expected an aligned int64 out and count >= 1; got %zd bytes of out and count %lld",
                     out.len, count);
        goto done;
    }
    int64_t *steps = (int64_t *)out.buf;
    double scale = (double)count; /* as numpy turns the Python int into a float64 */
    for (Py_ssize_t i = 0; i < out.len / (Py_ssize_t)sizeof(int64_t); i++) {
        steps[i] = (int64_t)(bitgen->next_double(bitgen->state) * scale) + start; /* astype truncates */
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(capsule);
    PyBuffer_Release(&out);
    return result;
}
