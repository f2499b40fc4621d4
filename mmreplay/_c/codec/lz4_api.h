/* liblz4's API, as mmreplay's extension calls it: lz4.h where it is installed, else the declarations
 * below (lz4.h's stable API since 1.9.0). Debian ships the header only in liblz4-dev, while the shared
 * library liblz4.so.1 is always present, and setup.py links that. */
#ifndef MMREPLAY_LZ4_API_H
#define MMREPLAY_LZ4_API_H

#if defined(__has_include)
#if __has_include(<lz4.h>)
#include <lz4.h>
#define MMREPLAY_HAVE_LZ4_H 1
#endif
#endif
#ifndef MMREPLAY_HAVE_LZ4_H
int LZ4_decompress_safe(const char *src, char *dst, int compressedSize, int dstCapacity);
int LZ4_decompress_safe_usingDict(const char *src, char *dst, int compressedSize, int dstCapacity,
                                  const char *dictStart, int dictSize);
typedef struct LZ4_stream_u LZ4_stream_t;
LZ4_stream_t *LZ4_createStream(void);
int LZ4_freeStream(LZ4_stream_t *stream);
void LZ4_resetStream(LZ4_stream_t *stream);
int LZ4_loadDict(LZ4_stream_t *stream, const char *dictionary, int dictSize);
int LZ4_compress_fast_continue(LZ4_stream_t *stream, const char *src, char *dst, int srcSize, int dstCapacity,
                               int acceleration);
int LZ4_compressBound(int inputSize);
int LZ4_versionNumber(void);
#endif

#endif
