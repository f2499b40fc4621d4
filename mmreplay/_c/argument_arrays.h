/* The checks of an extension function's array arguments (numpy arrays passed as buffers). */
#ifndef MMREPLAY_ARGUMENT_ARRAYS_H
#define MMREPLAY_ARGUMENT_ARRAYS_H

#include <Python.h>

/* 0 when view holds exactly n items of itemsize bytes, aligned to itemsize; else -1 with a ValueError
 * naming the argument. */
int check_array(const Py_buffer *view, const char *name, Py_ssize_t n, Py_ssize_t itemsize);

#endif
