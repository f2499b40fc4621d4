/* The uniform sampler's draws (mmreplay.sampling.samplers.uniform_steps), one C call per batch. */
#ifndef MMREPLAY_UNIFORM_STEPS_H
#define MMREPLAY_UNIFORM_STEPS_H

#include <Python.h>

/* uniform_steps(bit_generator, count, start, out) -> None
 *   Fills out (int64) with start + floor(u * count), u drawn as Generator.random draws it (the bit
 *   generator's next_double, one per step): samplers.uniform_steps' numpy code, without its four numpy
 *   calls (~10 us a batch once a decoded batch has pushed numpy out of the CPU caches). The caller holds
 *   bit_generator.lock, as Generator.random does. */
PyObject *py_uniform_steps(PyObject *module, PyObject *args);

#define UNIFORM_STEPS_METHODS                                                                                      \
    {"uniform_steps", py_uniform_steps, METH_VARARGS,                                                              \
     "uniform_steps(bit_generator, count, start, out): out[i] = start + floor(u_i * count), u_i as Generator.random."},

#endif
