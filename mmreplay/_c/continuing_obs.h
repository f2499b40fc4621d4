/* One env's add at nearly every step, checked in place (Writer.add's one-env path): whether its obs
 * continues the env's episode and its next_obs is that obs shifted by one new frame, and its scalars. The general path
 * checks the same (tests/test_fast_add.py, tests/test_one_env_add.py). */
#ifndef MMREPLAY_CONTINUING_OBS_H
#define MMREPLAY_CONTINUING_OBS_H

#include <Python.h>

/* continuing_frame(obs, next_obs, frames, stacked) -> bytes | None
 *   obs and next_obs: C-contiguous buffers of equal length (the caller checked their type, dtype and
 *   shape); frames: the env's newest next_obs as an iterable of bytes, oldest first (EnvEpisode.frames).
 *   With stacked, obs must equal the frames back to back and next_obs[:-1] obs[1:] (one frame = the
 *   buffer's length / the number of frames); without, obs must equal the newest frame. Returns the new
 *   frame (next_obs's newest, or next_obs) as bytes; None where any of that does not hold, where a
 *   buffer is not C-contiguous, or where a frame's length differs (the caller's general path decides,
 *   and names what is wrong). Compares in place: no copy of obs is made. */
PyObject *py_continuing_frame(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* one_env_values(action, reward, terminated, truncated, form) -> (bytes, float, int) | None
 *   The forms of a one-env add's scalars that a training loop passes at nearly every step, taken without the
 *   Python parse (add_arguments.parse_one_env_values, whose result this equals where it returns one):
 *   terminated and truncated True or False; the reward a float or an int within 2**53, within float32's
 *   range; the action a numpy scalar of the store's action type (form[0], its buffer form[1] bytes), or,
 *   where form[2] (the action dtype is a signed integer), an int that fits form[1] bytes, packed
 *   little-endian. form: (the action dtype's scalar type, its size, signed int, the TERMINATED bit, the
 *   TRUNCATED bit), built once per store. Returns (the action's bytes, the reward, the flags); None for
 *   any other form (the Python parse then decides). */
PyObject *py_one_env_values(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#define CONTINUING_OBS_METHODS                                                                                     \
    {"continuing_frame", (PyCFunction)(void (*)(void))py_continuing_frame, METH_FASTCALL,                         \
     "continuing_frame(obs, next_obs, frames, stacked) -> bytes | None\n\n"                                        \
     "One env's new frame where obs continues its episode (frames: its newest next_obs, oldest first) and a\n"   \
     "stacked next_obs is obs shifted by that frame, compared in place; else None."},                          \
    {"one_env_values", (PyCFunction)(void (*)(void))py_one_env_values, METH_FASTCALL,                             \
     "one_env_values(action, reward, terminated, truncated, form) -> (bytes, float, int) | None\n\n"             \
     "One env's action bytes, reward and flags where each has the common form taken here; else None."},

#endif
