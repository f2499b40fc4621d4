/* Key frames kept decoded across a reader's batches (reference_table.h's reads of a reference ring).
 * Every frame a batch reads decodes its group's key frame (place 0: a whole lz4 frame), most of them
 * not asked for: on Pong a batch of 32 decodes ~32 keys, a tenth of its time, where a copy of each costs
 * a third of its decode. A slot per key, direct-mapped by frame step, holds the frame decoded from the
 * block whose step, checksum and seed it records, and is used only for a block with the same three,
 * whose CRC the reader checks as it checks every block: a frame comes from here only where the stored
 * block is still the one it was decoded from (a block changed in place with its CRC kept is as likely to
 * pass as without the cache). Any thread may read or fill a slot at any time: each has a sequence
 * count (a seqlock), odd while it is written; a reader that sees it odd or changed decodes the block. */
#ifndef MMREPLAY_KEY_FRAMES_H
#define MMREPLAY_KEY_FRAMES_H

#include <Python.h>

#include <stddef.h>
#include <stdint.h>

typedef struct KeyFrames KeyFrames;

/* The key frames of a capsule that key_frames() made; NULL for None; NULL with a TypeError otherwise. */
KeyFrames *key_frames_from(PyObject *capsule, int *error);

/* Copies the key frame at step, decoded from the block of this checksum and seed, into dst: 1; 0 where
 * no slot holds it (dst then unspecified). Any thread, without the GIL. */
int key_frames_get(KeyFrames *k, int64_t step, uint32_t checksum, uint32_t seed, char *dst);

/* Keeps a copy of the key frame at step, decoded from the block of this checksum and seed, in its slot,
 * where the slot is empty, holds a frame `horizon` or more steps older (gone from the ring), or holds
 * this step from another block; and not while another thread writes it, nor where it holds this very
 * frame (a batch split between threads may decode one frame in two parts while another part copies it
 * out of the slot, a copy the rewrite would fail). A slot's frame is never replaced by another the ring
 * may still hold: a batch's plan that stopped a chain at it then finds it when it copies it (else its
 * batch would take the general path), and frames that share a slot do not evict each other in turn. Any
 * thread, without the GIL. */
void key_frames_put(KeyFrames *k, int64_t step, uint32_t checksum, uint32_t seed, const char *frame);

/* Whether a slot holds the frame at step decoded from the block of this checksum and seed (a read of it
 * may still miss, should another thread replace it meanwhile). */
int key_frames_holds(KeyFrames *k, int64_t step, uint32_t checksum, uint32_t seed);

/* Whether a dependent frame compressed against a key frame, ref_delta steps after it, is kept too: the
 * first level of a group's tree from min_delta on (places 32, 64 and 128 of a group of 256, branching
 * 2), where a batch's chains then stop, saving their key frame's copy and the rest of the chain. */
int key_frames_keeps(const KeyFrames *k, int64_t ref_delta);

/* key_frames(frame_nbytes, slots, min_delta=0, horizon=0) -> capsule
 *   Room for `slots` (a power of two) frames of frame_nbytes bytes, allocated as it fills: key frames,
 *   and, with min_delta > 0, the frames compressed against one of them min_delta or more steps after it;
 *   horizon: the ring's frame slots (a frame that many steps older is gone; 0: any frame is). */
PyObject *py_key_frames(PyObject *module, PyObject *args);

/* key_frames_counts(capsule) -> (hits, stores): frames copied out, frames kept. */
PyObject *py_key_frames_counts(PyObject *module, PyObject *arg);

/* key_frames_get(capsule, step, checksum, seed, out) -> bool / key_frames_put(capsule, step, checksum, seed,
 * frame): key_frames_get and key_frames_put on buffers of the frame's bytes (the tests' view of a slot). */
PyObject *py_key_frames_get(PyObject *module, PyObject *args);
PyObject *py_key_frames_put(PyObject *module, PyObject *args);

#define KEY_FRAMES_METHODS                                                                                         \
    {"key_frames", py_key_frames, METH_VARARGS,                                                                    \
     "key_frames(frame_nbytes, slots, min_delta=0, horizon=0) -> capsule\n\n"                                      \
     "Key frames of a reference ring kept decoded across batches, a slot per key."},                               \
    {"key_frames_counts", py_key_frames_counts, METH_O,                                                            \
     "key_frames_counts(capsule) -> (hits, stores)\n\nKey frames copied out of the slots, and kept in them."},      \
    {"key_frames_get", py_key_frames_get, METH_VARARGS,                                                            \
     "key_frames_get(capsule, step, checksum, seed, out) -> bool\n\nCopy a kept key frame into out."},             \
    {"key_frames_put", py_key_frames_put, METH_VARARGS,                                                            \
     "key_frames_put(capsule, step, checksum, seed, frame)\n\nKeep a key frame in its slot."},

#endif
