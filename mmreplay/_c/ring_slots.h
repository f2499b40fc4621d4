/* The slot of a step in a ring (the frame table's entries, the transition table's rows): step mod the
 * ring's slots, as Python's % gives it. Inlined: a sampled batch needs several per transition. */
#ifndef MMREPLAY_RING_SLOTS_H
#define MMREPLAY_RING_SLOTS_H

#include <stdint.h>

/* Never negative, also for a negative step (which only a corrupt link can produce; the numpy fallbacks
 * read that same slot). */
static inline int64_t
ring_slot(int64_t step, int64_t slots)
{
    int64_t slot = step % slots;
    return slot < 0 ? slot + slots : slot;
}

/* ring_slot(step, slots) for a step near anchor, a multiple of slots: without a division (15 to 40
 * cycles) when the step lies within one lap of it, as the steps of a batch do; any other step takes
 * ring_slot. */
static inline int64_t
ring_slot_near(int64_t step, int64_t anchor, int64_t slots)
{
    int64_t offset;
    if (!__builtin_sub_overflow(step, anchor, &offset) && offset >= -slots && offset < 2 * slots) {
        return offset < 0 ? offset + slots : offset >= slots ? offset - slots : offset;
    }
    return ring_slot(step, slots);
}

#endif
