/* One env's add checked in place: see continuing_obs.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "continuing_obs.h"

/* Whether the frames (an iterable of bytes) lie back to back at the start of obs and fill it (stacked), or
 * the newest of them equals obs (not stacked): 1, 0, or -1 with an exception set. */
static int
obs_equals_frames(const char *obs, Py_ssize_t length, PyObject *frames, int stacked)
{
    PyObject *iterator = PyObject_GetIter(frames);
    if (iterator == NULL) {
        return -1;
    }
    Py_ssize_t offset = 0;
    int equal = 1;
    PyObject *frame, *newest = NULL;
    while ((frame = PyIter_Next(iterator)) != NULL) {
        if (!stacked) {
            Py_XDECREF(newest);
            newest = frame;
            continue;
        }
        Py_ssize_t size = PyBytes_Check(frame) ? PyBytes_GET_SIZE(frame) : -1;
        if (size < 0 || size > length - offset || memcmp(obs + offset, PyBytes_AS_STRING(frame), (size_t)size) != 0) {
            equal = 0;
        }
        offset += size;
        Py_DECREF(frame);
        if (!equal) {
            break;
        }
    }
    Py_DECREF(iterator);
    if (PyErr_Occurred()) {
        Py_XDECREF(newest);
        return -1;
    }
    if (!stacked) {
        equal = newest != NULL && PyBytes_Check(newest) && PyBytes_GET_SIZE(newest) == length
                && memcmp(obs, PyBytes_AS_STRING(newest), (size_t)length) == 0;
        Py_XDECREF(newest);
        return equal;
    }
    return equal && offset == length && offset > 0;
}

/* The buffer of a C-contiguous array; 0, or -1 (no exception set) where it is not one. */
static int
contiguous_view(PyObject *object, Py_buffer *view)
{
    if (PyObject_GetBuffer(object, view, PyBUF_C_CONTIGUOUS) == 0) {
        return 0;
    }
    PyErr_Clear();
    return -1;
}

PyObject *
py_continuing_frame(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "continuing_frame takes 4 arguments (obs, next_obs, frames, stacked); got %zd",
                     nargs);
        return NULL;
    }
    int stacked = PyObject_IsTrue(args[3]);
    if (stacked < 0) {
        return NULL;
    }
    Py_buffer obs, next_obs;
    if (contiguous_view(args[0], &obs) < 0) {
        Py_RETURN_NONE;
    }
    if (contiguous_view(args[1], &next_obs) < 0) {
        PyBuffer_Release(&obs);
        Py_RETURN_NONE;
    }
    PyObject *result = NULL;
    Py_ssize_t length = obs.len;
    int equal = next_obs.len == length ? obs_equals_frames(obs.buf, length, args[2], stacked) : 0;
    if (equal < 0) {
        goto done;
    }
    Py_ssize_t frame = length;
    if (equal && stacked) {
        /* A stack of frames of one length each: the newest frame's length is the last frame compared's,
         * which obs_equals_frames checked add up to the whole stack with the others. */
        Py_ssize_t count = PyObject_Length(args[2]);
        if (count <= 0) {
            if (count < 0) {
                goto done;
            }
            equal = 0;
        } else {
            frame = length / count;
            equal = frame * count == length
                    && memcmp((const char *)next_obs.buf, (const char *)obs.buf + frame, (size_t)(length - frame)) == 0;
        }
    }
    if (equal) {
        result = PyBytes_FromStringAndSize((const char *)next_obs.buf + (length - frame), frame);
    } else {
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&obs);
    PyBuffer_Release(&next_obs);
    return result;
}
