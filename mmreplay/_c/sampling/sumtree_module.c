/* mmreplay._sumtree: the hot loops of the samplers, one C call per batch (see each header):
 *
 *   sum_tree       find, set, settle: mmreplay.sampling.sum_tree.SumTree's
 *   uniform_steps  uniform_steps: mmreplay.sampling.samplers.uniform_steps' draws
 *   priority_batch draw, weights, update: a prioritized batch's steps, weights and new priorities
 *
 * The numpy code each accelerates gives identical results, bit for bit. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "sampling/priority_batch.h"
#include "sampling/sum_tree.h"
#include "sampling/uniform_steps.h"

static PyMethodDef methods[] = {
    SUM_TREE_METHODS
    UNIFORM_STEPS_METHODS
    PRIORITY_BATCH_METHODS
    {NULL, NULL, 0, NULL},
};

/* The interface of this module's functions, as mmreplay/extensions.py's INTERFACES expects it: bump
 * both when a function is added or its arguments change, so that a build from older sources is
 * refused (and its pure-Python fallback used) rather than failing mid-call. 2: draw, weights, update. 3: update takes its window and exponent as pairs. */
#define INTERFACE 3

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "mmreplay._sumtree", "The hot loops of mmreplay.sampling.sum_tree.SumTree.", -1, methods,
};

PyMODINIT_FUNC
PyInit__sumtree(void)
{
    PyObject *module = PyModule_Create(&module_definition);
    if (module != NULL && PyModule_AddIntConstant(module, "INTERFACE", INTERFACE) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
