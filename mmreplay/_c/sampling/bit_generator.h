/* numpy's BitGenerator as C code draws from it: the bitgen_t (numpy/random/bitgen.h) that a
 * BitGenerator's "capsule" holds, a stable layout. The caller holds bit_generator.lock while it draws,
 * as numpy's Generator methods do. */
#ifndef MMREPLAY_BIT_GENERATOR_H
#define MMREPLAY_BIT_GENERATOR_H

#include <Python.h>

#include <stdint.h>

typedef struct {
    void *state;
    uint64_t (*next_uint64)(void *state);
    uint32_t (*next_uint32)(void *state);
    double (*next_double)(void *state);
    uint64_t (*next_raw)(void *state);
} BitGen;

/* The bitgen_t of a numpy BitGenerator, with a new reference to its capsule in *capsule (release it
 * when done drawing); NULL with an error set for anything else. */
static inline BitGen *
bit_generator_open(PyObject *bit_generator, PyObject **capsule)
{
    *capsule = PyObject_GetAttrString(bit_generator, "capsule");
    return *capsule == NULL ? NULL : PyCapsule_GetPointer(*capsule, "BitGenerator");
}

#endif
