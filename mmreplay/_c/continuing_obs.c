/* One env's add checked in place: see continuing_obs.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
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

/* A Python int as a little-endian signed integer of size bytes: 0, or -1 (no exception set) where it is not
 * one that fits. */
static int
pack_signed(PyObject *value, Py_ssize_t size, unsigned char *out)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    if (size < 8) {
        long long bound = 1LL << (8 * size - 1);
        if (v < -bound || v >= bound) {
            return -1;
        }
    }
    unsigned long long bits = (unsigned long long)v;
    for (Py_ssize_t i = 0; i < size; i++) {
        out[i] = (unsigned char)(bits >> (8 * i));
    }
    return 0;
}

/* The action's bytes as the row stores them into out (form: see continuing_obs.h): 0, or -1 (no exception
 * set) where the action is not one of the forms taken here. */
static int
action_bytes(PyObject *action, PyObject *scalar_type, Py_ssize_t size, int signed_int, unsigned char *out)
{
    if ((PyObject *)Py_TYPE(action) == scalar_type) {
        Py_buffer view;
        if (PyObject_GetBuffer(action, &view, PyBUF_SIMPLE) < 0) {
            PyErr_Clear();
            return -1;
        }
        int fits = view.len == size;
        if (fits) {
            memcpy(out, view.buf, (size_t)size);
        }
        PyBuffer_Release(&view);
        return fits ? 0 : -1;
    }
    return signed_int && PyLong_CheckExact(action) ? pack_signed(action, size, out) : -1;
}

/* Every int up to 2**53 is exact as a double, so the row's float32 cast rounds once, as numpy's does. */
#define EXACT_INT (1LL << 53)

PyObject *
py_one_env_values(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError,
                     "one_env_values takes 5 arguments (action, reward, terminated, truncated, form); got %zd", nargs);
        return NULL;
    }
    PyObject *form = args[4];
    if (!PyTuple_CheckExact(form) || PyTuple_GET_SIZE(form) != 5) {
        PyErr_Format(PyExc_TypeError,
                     "one_env_values' form must be a tuple (scalar type, size, signed int, terminated bit, truncated "
                     "bit); got %.100s", Py_TYPE(form)->tp_name);
        return NULL;
    }
    Py_ssize_t size = PyLong_AsSsize_t(PyTuple_GET_ITEM(form, 1));
    long terminated_bit = PyLong_AsLong(PyTuple_GET_ITEM(form, 3));
    long truncated_bit = PyLong_AsLong(PyTuple_GET_ITEM(form, 4));
    int signed_int = PyObject_IsTrue(PyTuple_GET_ITEM(form, 2));
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (size < 1 || size > 8) {
        PyErr_Format(PyExc_ValueError, "one_env_values' action size must be 1 to 8 bytes; got %zd", size);
        return NULL;
    }
    PyObject *terminated = args[2], *truncated = args[3], *reward = args[1];
    if ((terminated != Py_True && terminated != Py_False) || (truncated != Py_True && truncated != Py_False)) {
        Py_RETURN_NONE;
    }
    double value;
    if (PyFloat_CheckExact(reward)) {
        value = PyFloat_AS_DOUBLE(reward);
    } else if (PyLong_CheckExact(reward)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(reward, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred()) || v < -EXACT_INT || v > EXACT_INT) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        value = (double)v;
    } else {
        Py_RETURN_NONE;
    }
    if (!(value >= -(double)FLT_MAX && value <= (double)FLT_MAX)) { /* also refuses nan */
        Py_RETURN_NONE;
    }
    unsigned char bytes[8];
    if (action_bytes(args[0], PyTuple_GET_ITEM(form, 0), size, signed_int, bytes) < 0) {
        Py_RETURN_NONE;
    }
    long flags = (terminated == Py_True ? terminated_bit : 0) | (truncated == Py_True ? truncated_bit : 0);
    return Py_BuildValue("(y#dl)", (const char *)bytes, size, value, flags);
}
