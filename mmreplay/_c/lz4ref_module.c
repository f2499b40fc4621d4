/* mmreplay._lz4ref: frames compressed against a reference frame (mmreplay/frames/reference_codec.py).
 * Each job lives in a file of its own (see each header for its functions and their arguments):
 *
 *   reference_encode  encode: one frame against its reference, a greedy lz4 block checked to round-trip
 *   reference_plan    plan: the order in which requested frames and their references decode
 *   reference_decode  decode: a batch of entries in that order (its arguments located as
 *                     mmreplay._lz4batch.decode locates them: frame_sources)
 *
 * python-lz4 decodes the same blocks with identical results (the pure-Python code). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "crc32.h"
#include "reference_decode.h"
#include "reference_encode.h"
#include "reference_plan.h"

static PyMethodDef methods[] = {
    REFERENCE_DECODE_METHODS
    REFERENCE_PLAN_METHODS
    REFERENCE_ENCODE_METHODS
    {NULL, NULL, 0, NULL},
};

/* The interface of this module's functions, as mmreplay/extensions.py's INTERFACES expects it: bump
 * both when a function is added or its arguments change, so that a build from older sources is
 * refused (and its pure-Python fallback used) rather than failing mid-call. 2: encode_rows (format
 * version 5's dependent frames). */
#define INTERFACE 2

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "mmreplay._lz4ref", "lz4 against a reference frame, for mmreplay.frames.reference_codec.",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__lz4ref(void)
{
    frame_crc32_init();
    PyObject *module = PyModule_Create(&module_definition);
    if (module != NULL && PyModule_AddIntConstant(module, "INTERFACE", INTERFACE) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
