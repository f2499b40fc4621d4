/* Frames compressed alone: each frame one lz4 block (what a plain store keeps, and a reference store's
 * key frames), compressed as python-lz4's lz4.block.compress compresses it (frames/lz4_codec.py: a fresh
 * stream state per frame), decoded checked against its CRC-32. A batch is shared by the calling thread
 * and the pool's helpers (pool/work_pool.h). */
#ifndef MMREPLAY_FRAME_BLOCKS_H
#define MMREPLAY_FRAME_BLOCKS_H

#include <Python.h>

#include <stdint.h>

#include "codec/lz4_api.h"

/* Decodes one block of `length` bytes into exactly frame_nbytes bytes at dst; whether it did. */
int frame_block_decode(const char *src, int length, char *dst, int frame_nbytes);

/* Compresses one frame of frame_nbytes bytes into out (capacity bytes: LZ4_compressBound suffices)
 * through stream (any state: it is reset); the block's length, 0 when it did not fit. */
int frame_block_compress(LZ4_stream_t *stream, const char *frame, int frame_nbytes, char *out, int capacity);

/* Frame i: its compressed bytes sources[i] (NULL when out of range), lengths[i] of them, its CRC-32
 * seeded with seeds[i] must equal checksums[i], and it decodes to out[i * frame_nbytes : (i + 1) *
 * frame_nbytes]. */
typedef struct {
    const char *const *sources;
    const int64_t *lengths;
    const uint32_t *checksums;
    const uint32_t *seeds;
    char *out;
    int frame_nbytes;
    Py_ssize_t n;
} FrameBatch;

/* Checks and decodes every frame of batch on up to `threads` threads; call with the GIL released.
 * -1 when every frame is good, else the smallest index that is not (frames after it may be left
 * undecoded). */
Py_ssize_t decode_frames(const FrameBatch *batch, int threads);

/* Compresses n frames of frame_nbytes bytes each on up to `threads` threads, then packs the blocks back
 * to back at the start of blocks (room for n blocks of LZ4_compressBound(frame_nbytes) bytes), each
 * block's size into lengths[i] (and, with seeds, its CRC-32 seeded with seeds[i] into checksums[i]):
 * the bytes of all, or -1 when a block is over max_length bytes or memory ran out. GIL released. */
long long compress_frames(const char *frames, Py_ssize_t n, int frame_nbytes, char *blocks, int *lengths,
                          int max_length, const uint32_t *seeds, uint32_t *checksums, int threads);

/* decode(views, blocks, out, frame_nbytes, threads) -> int
 *   blocks: (segments, offsets, lengths, checksums, seeds) as ring/frame_sources.h reads them; out: a
 *   writable buffer of n * frame_nbytes bytes. -1 when every frame's range lies inside its view, its CRC
 *   matches and it decodes to exactly frame_nbytes bytes; else the smallest i that fails. ValueError
 *   for a segment outside views. */
PyObject *py_decode(PyObject *module, PyObject *args);

/* compress_frames(frames, seeds, lengths, checksums, threads) -> bytes
 *   The n = len(seeds) contiguous frames of frames, each compressed alone, on up to `threads` threads:
 *   their blocks back to back, each block's length into lengths (int64[n]) and its CRC-32 seeded with
 *   seeds[i] (uint32[n]) into checksums (uint32[n]). */
PyObject *py_compress_frames(PyObject *module, PyObject *args);

#define FRAME_BLOCKS_METHODS                                                                                       \
    {"decode", py_decode, METH_VARARGS,                                                                            \
     "decode(views, blocks, out, frame_nbytes, threads) -> int\n\n"                                               \
     "Decode n lz4 blocks into out with the GIL released; -1 when all are good, else the first bad index."},       \
    {"compress_frames", py_compress_frames, METH_VARARGS,                                                          \
     "compress_frames(frames, seeds, lengths, checksums, threads) -> bytes\n\n"                                     \
     "Compress frames alone on up to threads threads: their blocks back to back; each block's length and\n"        \
     "seeded CRC-32 into lengths and checksums."},

#endif
