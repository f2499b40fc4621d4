/* The checks of an extension function's array arguments: see argument_arrays.h. */
#define PY_SSIZE_T_CLEAN
#include "argument_arrays.h"

#include <stdint.h>

int
check_array(const Py_buffer *view, const char *name, Py_ssize_t n, Py_ssize_t itemsize)
{
    if (view->len != n * itemsize || ((uintptr_t)view->buf % (uintptr_t)itemsize) != 0) {
        PyErr_Format(PyExc_ValueError, "%s must be %zd aligned items of %zd bytes; got %zd bytes", name, n,
                     itemsize, view->len);
        return -1;
    }
    return 0;
}
