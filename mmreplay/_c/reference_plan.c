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

/* The entries sorted by level (stably: ties keep their order) into steps, refs and rows, each entry's
 * reference given as its index among the entries (-1: a key frame). position: room for m + width. */
static void
plan_order(const int64_t *entry, const Py_ssize_t *reference, const int64_t *level, const int64_t *row, Py_ssize_t m,
           Py_ssize_t width, Py_ssize_t *position, int64_t *steps, int64_t *refs, int64_t *rows)
{
    Py_ssize_t *level_start = position + m;
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
        refs[p] = reference[e] < 0 ? -1 : position[reference[e]];
    }
}

/* A plan's work areas, for up to `capacity` entries: the step map and each entry's step, its
 * reference's step, level, row, reference (its index among the entries) and position. */
typedef struct {
    StepMap map;
    int64_t *entry, *reference_step, *level, *row;
    Py_ssize_t *reference, *position;
    void *bytes;
} PlanRoom;

static int
plan_room_open(PlanRoom *room, Py_ssize_t capacity, Py_ssize_t width)
{
    size_t size = 16;
    while (size < 2 * (size_t)capacity) {
        size *= 2;
    }
    size_t count = (size_t)capacity;
    room->bytes = PyMem_RawMalloc(size * (sizeof(int64_t) + sizeof(Py_ssize_t)) + count * 4 * sizeof(int64_t)
                               + (2 * count + (size_t)width) * sizeof(Py_ssize_t));
    if (room->bytes == NULL) {
        return -1;
    }
    room->map.steps = room->bytes;
    room->map.entries = (Py_ssize_t *)(room->map.steps + size);
    room->map.mask = size - 1;
    room->entry = (int64_t *)(room->map.entries + size);
    room->reference_step = room->entry + count, room->level = room->reference_step + count;
    room->row = room->level + count;
    room->reference = (Py_ssize_t *)(room->row + count);
    room->position = room->reference + count; /* and width more: the levels' starts */
    memset(room->map.steps, 0xFF, size * sizeof(int64_t));
    return 0;
}

Py_ssize_t
reference_plan_entries(const int64_t *chain, Py_ssize_t n, Py_ssize_t width, int64_t *steps, int64_t *refs, int64_t *rows)
#define LINK(i, k) chain[(k) * n + (i)]
{
    PlanRoom room;
    if (plan_room_open(&room, n * (width - 1) > 0 ? n * (width - 1) : 1, width) < 0) {
        return -1;
    }
    int64_t *entry = room.entry, *reference_step = room.reference_step, *level = room.level, *row = room.row;
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++) { /* a repeated requested frame: the first one is referenced */
        int64_t depth = 0;
        while (depth < width - 1 && LINK(i, depth) != LINK(i, depth + 1)) {
            depth++;
        }
        find_or_add(&room.map, LINK(i, 0), m);
        entry[m] = LINK(i, 0), reference_step[m] = LINK(i, 1), level[m] = depth, row[m] = i;
        m++;
    }
    Py_ssize_t added = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        for (int64_t k = 1; k <= level[i]; k++) {
            if (find_or_add(&room.map, LINK(i, k), m) >= 0) {
                break; /* listed already, and so are its references */
            }
            entry[m] = LINK(i, k), reference_step[m] = LINK(i, k + 1), level[m] = level[i] - k, row[m] = n + added++;
            m++;
        }
    }
#undef LINK
    for (Py_ssize_t e = 0; e < m; e++) {
        room.reference[e] = level[e] == 0 ? -1 : find_or_add(&room.map, reference_step[e], -1);
        if (level[e] != 0 && room.reference[e] < 0) { /* cannot happen: every reference was listed above */
            PyMem_RawFree(room.bytes);
            return -2;
        }
    }
    plan_order(entry, room.reference, level, row, m, width, room.position, steps, refs, rows);
    PyMem_RawFree(room.bytes);
    return m;
}

Py_ssize_t
reference_plan_follow(const ReferenceLookup *lookup, const int64_t *requested, Py_ssize_t n, Py_ssize_t depth,
                      Py_ssize_t capacity, int64_t *steps, int64_t *refs, int64_t *rows)
{
    Py_ssize_t width = depth + 2;
    PlanRoom room;
    if (plan_room_open(&room, capacity > 0 ? capacity : 1, width) < 0) {
        return -1;
    }
    int64_t *entry = room.entry, *level = room.level, *row = room.row;
    Py_ssize_t *reference = room.reference, m = 0, status = -3;
    for (Py_ssize_t i = 0; i < n; i++) { /* every requested frame an entry; a repeat references the first */
        if (requested[i] < 0) {
            goto done;
        }
        find_or_add(&room.map, requested[i], m);
        lookup->prefetch(lookup->source, requested[i]);
        entry[m] = requested[i], row[m] = i, level[m] = -1;
        m++;
    }
    /* Round by round up the batch's chains: each entry's reference read (an entry listed for the first
     * time, prefetched when listed, is read in the next round). A frame's chain has at most depth + 1
     * entries, and so the rounds. */
    Py_ssize_t round_start = 0, added = 0;
    for (Py_ssize_t round = 0; round_start < m; round++) {
        if (round > depth) {
            goto done;
        }
        Py_ssize_t round_end = m;
        for (Py_ssize_t e = round_start; e < round_end; e++) {
            int64_t delta = lookup->reference(lookup->source, entry[e]), up = entry[e] - delta;
            if (delta < 0 || up < 0) {
                goto done;
            }
            if (delta == 0) {
                reference[e] = -1;
                continue;
            }
            reference[e] = find_or_add(&room.map, up, m);
            if (reference[e] < 0 && m == capacity) {
                goto done; /* more frames than the caller's bound (a chain longer than it allows) */
            }
            if (reference[e] < 0) {
                lookup->prefetch(lookup->source, up);
                entry[m] = up, row[m] = n + added++, level[m] = -1;
                reference[e] = m++;
            }
        }
        round_start = round_end;
    }
    /* Each entry's level, walking up to the first entry whose level is known; at most depth (the
     * requested frames' chains reach a key frame within depth references). */
    Py_ssize_t path[REFERENCE_PLAN_MAX_DEPTH + 2];
    for (Py_ssize_t e = 0; e < m; e++) {
        Py_ssize_t top = 0, at = e;
        while (level[at] < 0 && reference[at] >= 0) {
            if (top > depth) {
                goto done;
            }
            path[top++] = at;
            at = reference[at];
        }
        int64_t base = level[at] < 0 ? 0 : level[at];
        level[at] = base;
        while (top > 0) {
            level[path[--top]] = ++base;
        }
        if (base > depth) {
            goto done;
        }
    }
    plan_order(entry, reference, level, row, m, width, room.position, steps, refs, rows);
    status = m;
done:
    PyMem_RawFree(room.bytes);
    return status;
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
