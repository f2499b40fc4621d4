/* A prioritized batch in one call each (mmreplay.sampling.sum_tree.SumTree's draw, weights and update,
 * which PrioritizedSampler uses): the draw of its steps, their importance weights, and the update of
 * their priorities. The numpy code in sum_tree.py is the fallback and the specification, bit for bit:
 * the same draws from the bit generator, the same double operations, and powers from the C library's
 * pow (the fallback calls it through math.pow; numpy's np.power may use a vectorized pow whose last
 * bit differs). The trees are settled by the caller (SumTree does). */
#ifndef MMREPLAY_PRIORITY_BATCH_H
#define MMREPLAY_PRIORITY_BATCH_H

#include <Python.h>

/* draw(bit_generator, sums, top_level, first_step, slots, out) -> None
 *   For each of out's int64 items: a target u * total (u the bit generator's next double, as
 *   Generator.random draws it; total the root sums[1], > 0), its leaf found as find finds it, and the
 *   step of that leaf's slot counted from first_step: first_step + (leaf - first_step) mod slots.
 *   The caller holds bit_generator.lock. */
PyObject *py_draw(PyObject *module, PyObject *args);

/* weights(sums, minimums, steps, slots, beta, out) -> None
 *   out[i] (float32) = pow(sums[leaf] / minimums[1], -beta) rounded to float32, leaf the node of slot
 *   steps[i] mod slots: the importance weight (p_i / p_min)^-beta. */
PyObject *py_weights(PyObject *module, PyObject *args);

/* update(sums, minimums, steps, priorities, (first_step, stop_step, slots), (alpha, epsilon)[, added])
 *       -> float | None | False
 *   The leaves of the slots (step mod slots) of the steps in [first_step, stop_step) set to
 *   pow(priority + epsilon, alpha), in order (the last of repeats wins), and their ancestors
 *   recomputed, as set does. Returns the largest of those steps' priorities (NaN if one is NaN, as
 *   numpy's max), None when no step is in the range. With `added` (the transitions added so far):
 *   False, with nothing written, when a step is outside [0, added) or a priority is not finite and
 *   >= 0 (ReplayStore.update_priorities' checks, which then name it). */
PyObject *py_update(PyObject *module, PyObject *args);

#define PRIORITY_BATCH_METHODS                                                                                     \
    {"draw", py_draw, METH_VARARGS,                                                                                \
     "draw(bit_generator, sums, top_level, first_step, slots, out): steps drawn in proportion to their leaves."},  \
    {"weights", py_weights, METH_VARARGS,                                                                          \
     "weights(sums, minimums, steps, slots, beta, out): (leaf / minimum) ** -beta of each step, as float32."},     \
    {"update", py_update, METH_VARARGS,                                                                            \
     "update(sums, minimums, steps, priorities, (first_step, stop_step, slots), (alpha, epsilon)[, added])\n"      \
     "    -> max, None or False:\n"                                                                               \
     "the leaves of the stored steps set to (priority + epsilon) ** alpha."},

#endif
