/* The decode order of requested frames and their references: see reference_plan.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "argument_arrays.h"
#include "reference_plan.h"

typedef struct {
    int64_t *steps; /* -1: an empty slot (frame steps are never negative) */
    Py_ssize_t *entries;
    size_t mask;
} StepMap;

/* The entry that holds step, or -1 after recording it as ``entry`` (open addressing, linear probing). */
static Py_ssize_t
find_or_add(StepMap *map, int64_t step, Py_ssize_t entry)
{
    size_t slot = (size_t)(((uint64_t)step * 0x9E3779B97F4A7C15ull) >> 32) & map->mask;
    while (map->steps[slot] != -1) {
        if (map->steps[slot] == step) {
            return map->entries[slot];
        }
        slot = (slot + 1) & map->mask;
    }
    map->steps[slot] = step;
    map->entries[slot] = entry;
    return -1;
}

Py_ssize_t
reference_plan_entries(const int64_t *chain, Py_ssize_t n, Py_ssize_t width, int64_t *steps, int64_t *refs, int64_t *rows)
#define LINK(i, k) chain[(k) * n + (i)]
{
    Py_ssize_t capacity = n * (width - 1) > 0 ? n * (width - 1) : 1;
    size_t size = 16;
    while (size < 2 * (size_t)capacity) {
        size *= 2;
    }
    StepMap map = {PyMem_Malloc(size * sizeof(int64_t)), PyMem_Malloc(size * sizeof(Py_ssize_t)), size - 1};
    int64_t *entry = PyMem_Malloc((size_t)capacity * 4 * sizeof(int64_t)); /* step, ref step, level, row */
    Py_ssize_t *position = PyMem_Malloc(((size_t)capacity + (size_t)width) * sizeof(Py_ssize_t));
    Py_ssize_t m = -1;
    if (map.steps == NULL || map.entries == NULL || entry == NULL || position == NULL) {
        goto done;
    }
    int64_t *ref_step = entry + capacity, *level = ref_step + capacity, *row = level + capacity;
    Py_ssize_t *level_start = position + capacity;
    memset(map.steps, 0xFF, size * sizeof(int64_t));
    m = 0;
    for (Py_ssize_t i = 0; i < n; i++) { /* a repeated requested frame: the first one is referenced */
        int64_t depth = 0;
        while (depth < width - 1 && LINK(i, depth) != LINK(i, depth + 1)) {
            depth++;
        }
        find_or_add(&map, LINK(i, 0), m);
        entry[m] = LINK(i, 0), ref_step[m] = LINK(i, 1), level[m] = depth, row[m] = i;
        m++;
    }
    Py_ssize_t added = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        for (int64_t k = 1; k <= level[i]; k++) {
            if (find_or_add(&map, LINK(i, k), m) >= 0) {
                break; /* listed already, and so are its references */
            }
            entry[m] = LINK(i, k), ref_step[m] = LINK(i, k + 1), level[m] = level[i] - k, row[m] = n + added++;
            m++;
        }
    }
#undef LINK
    for (Py_ssize_t l = 0; l < width; l++) {
        level_start[l] = 0;
    }
    for (Py_ssize_t e = 0; e < m; e++) {
        level_start[level[e] + 1 < width ? level[e] + 1 : width - 1]++;
    }
    for (Py_ssize_t l = 1; l < width; l++) {
        level_start[l] += level_start[l - 1];
    }
    for (Py_ssize_t e = 0; e < m; e++) {
        position[e] = level_start[level[e]]++;
    }
    for (Py_ssize_t e = 0; e < m; e++) {
        Py_ssize_t p = position[e];
        steps[p] = entry[e];
        rows[p] = row[e];
        Py_ssize_t reference = level[e] == 0 ? -1 : find_or_add(&map, ref_step[e], -1);
        if (level[e] != 0 && reference < 0) { /* cannot happen: every reference was listed above */
            m = -2;
            goto done;
        }
        refs[p] = reference < 0 ? -1 : position[reference];
    }
done:
    PyMem_Free(map.steps);
    PyMem_Free(map.entries);
    PyMem_Free(entry);
    PyMem_Free(position);
    return m;
}

PyObject *
py_plan(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer chain, entries;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "y*nw*:plan", &chain, &width, &entries)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = width >= 2 ? chain.len / 8 / width : 0;
    if (width < 2 || check_array(&chain, "chain", n * width, 8) < 0
        || check_array(&entries, "entries", 3 * n * (width - 1), 8) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "width is %zd; expected at least 2", width);
        }
        goto done;
    }
    const int64_t *links = chain.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        for (Py_ssize_t k = 0; k + 1 < width; k++) {
            int64_t step = links[k * n + i], next = links[(k + 1) * n + i];
            if (step < 0 || next < 0 || next > step) {
                PyErr_Format(PyExc_ValueError, "chain column %zd is not a descending run of frame steps", i);
                goto done;
            }
        }
        if (links[(width - 1) * n + i] != links[(width - 2) * n + i]) {
            PyErr_Format(PyExc_ValueError, "chain column %zd does not end at a key frame (two equal steps)", i);
            goto done;
        }
    }
    int64_t *out = entries.buf;
    Py_ssize_t capacity = n * (width - 1);
    Py_ssize_t m = reference_plan_entries(links, n, width, out, out + capacity, out + 2 * capacity);
    if (m == -2) {
        PyErr_SetString(PyExc_SystemError, "mmreplay._lz4ref.plan lost a reference; this is a bug");
    }
    result = m == -1 ? PyErr_NoMemory() : m < 0 ? NULL : PyLong_FromSsize_t(m);
done:
    PyBuffer_Release(&chain);
    PyBuffer_Release(&entries);
    return result;
}
