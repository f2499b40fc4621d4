/* Frames compressed alone with lz4, as python-lz4's lz4.block.compress compresses one (lz4_codec.compress),
 * on the pool's threads (work_pool.h): the compression step of add's fast path, apart from its writes
 * (fast_add.h), and of encode_frames. A batch compresses either at once (compress_frames) or ahead, on a
 * helper, while the caller does other work (compress_ahead, then pending_frames_take). */
#ifndef MMREPLAY_FRAME_COMPRESS_H
#define MMREPLAY_FRAME_COMPRESS_H

#include <Python.h>

#include <stdint.h>

/* Compresses n frames of frame_nbytes bytes each on up to `threads` threads, then packs the blocks back
 * to back at the start of blocks (room for n blocks of LZ4_compressBound(frame_nbytes) bytes), each
 * block's size into lengths[i] (and, with seeds, its CRC-32 seeded with seeds[i] into checksums[i]):
 * the bytes of all, or -1 when a frame does not compress, its block is over max_length bytes, or
 * memory ran out. Call with the GIL released. */
long long compress_frames(const char *frames, Py_ssize_t n, int frame_nbytes, char *blocks, int *lengths,
                          int max_length, const uint32_t *seeds, uint32_t *checksums, int threads);

/* Frames compress_ahead started on. pending_frames_of: the frames of a compress_ahead capsule that
 * stands for n frames of frame_nbytes bytes; NULL with an error set when it is not one, or stands for
 * other frames (call with the GIL held). pending_frames_take: their blocks once compressed (the caller
 * runs what no helper took, and waits for the rest; the GIL may be released): the bytes of all, packed
 * back to back, *blocks and *lengths pointing into the capsule (valid while it lives); -1 when a frame
 * did not compress. */
typedef struct PendingFrames PendingFrames;
PendingFrames *pending_frames_of(PyObject *capsule, Py_ssize_t n, Py_ssize_t frame_nbytes);
long long pending_frames_take(PendingFrames *pending, char **blocks, int **lengths);

/* compress_frames(frames, seeds, lengths, checksums, threads) -> bytes
 *   The n = len(seeds) contiguous frames of frames, each compressed alone as lz4_codec.compress does, on
 *   up to `threads` threads of the pool: their blocks back to back, each block's length into lengths
 *   (int64[n]) and its CRC-32 seeded with seeds[i] (uint32[n]) into checksums (uint32[n]). */
PyObject *py_compress_frames(PyObject *module, PyObject *args);

/* compress_ahead(frames, count, threads) -> capsule
 *   Starts compressing the count contiguous frames of frames on up to threads - 1 of the pool's helpers
 *   and returns at once; append_frames given the capsule writes those blocks instead of compressing
 *   (add's fast path hands a stack's newest frame over before it checks the add, ~10 us that the
 *   compression then overlaps). With threads 1, or no helper awake (adds further apart than the
 *   helpers poll), the frames compress when taken. The frames' buffer is held until then; a capsule
 *   dropped untaken waits for its helper first. */
PyObject *py_compress_ahead(PyObject *module, PyObject *args);

#define FRAME_COMPRESS_METHODS                                                                                     \
    {"compress_frames", py_compress_frames, METH_VARARGS,                                                          \
     "compress_frames(frames, seeds, lengths, checksums, threads) -> bytes\n\n"                                     \
     "Compress frames alone, each as lz4_codec.compress does, on up to threads threads: their blocks back to\n"    \
     "back; each block's length and seeded CRC-32 into lengths and checksums."},                                   \
    {"compress_ahead", py_compress_ahead, METH_VARARGS,                                                            \
     "compress_ahead(frames, count, threads) -> capsule\n\n"                                                        \
     "Start compressing count frames on the pool's helpers and return at once; append_frames takes the capsule."},

#endif
