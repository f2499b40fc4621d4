/* One stored frame of a reference ring decoded: see reference_frame.h. */
#include <stdlib.h>
#include <string.h>

#include "changed_rows.h"
#include "lz4_api.h"
#include "reference_frame.h"

/* Each thread's room for a frame's changed rows before they go to their places, never freed. */
static _Thread_local char *rows_area = NULL;
static _Thread_local size_t rows_area_bytes = 0;

/* A changed-rows frame (changed_rows.h): its header read, the block decoded against ref into the rows'
 * room, then every row put in place, from ref or from the block; in place (dst == ref, the block decoded
 * before any row is written), the changed rows only. */
static int
decode_changed_rows(const uint8_t *src, int length, char *dst, const char *ref, int n, int row)
{
    const uint8_t *p = src, *end = src + length;
    size_t rows = (size_t)(n / row), count, covered = 0, changed = 0;
    if (changed_rows_get(&p, end, rows, &count) < 0) {
        return 0;
    }
    const uint8_t *pairs = p;
    for (size_t k = 0; k < count; k++) { /* first pass: the pairs fit the frame, and how many rows changed */
        size_t skip, take;
        if (changed_rows_get(&p, end, rows, &skip) < 0 || changed_rows_get(&p, end, rows, &take) < 0 || take == 0
            || skip + take > rows - covered) {
            return 0;
        }
        covered += skip + take;
        changed += take;
    }
    size_t changed_bytes = changed * (size_t)row;
    int in_place = dst == ref;
    if (changed == 0) {
        if (p != end) {
            return 0;
        }
        if (!in_place) {
            memcpy(dst, ref, (size_t)n);
        }
        return 1;
    }
    if (changed_bytes > rows_area_bytes) {
        char *grown = realloc(rows_area, (size_t)n);
        if (grown == NULL) {
            return 0;
        }
        rows_area = grown, rows_area_bytes = (size_t)n;
    }
    if (LZ4_decompress_safe_usingDict((const char *)p, rows_area, (int)(end - p), (int)changed_bytes, ref, n)
        != (int)changed_bytes) {
        return 0;
    }
    size_t at = 0, from = 0;
    p = pairs;
    for (size_t k = 0; k < count; k++) { /* second pass: the rows in place (the first checked them) */
        size_t skip = 0, take = 0;
        changed_rows_get(&p, end, rows, &skip);
        changed_rows_get(&p, end, rows, &take);
        if (!in_place) {
            memcpy(dst + at, ref + at, skip * (size_t)row);
        }
        at += skip * (size_t)row;
        memcpy(dst + at, rows_area + from, take * (size_t)row);
        at += take * (size_t)row;
        from += take * (size_t)row;
    }
    if (!in_place) {
        memcpy(dst + at, ref + at, (size_t)n - at);
    }
    return 1;
}

int
reference_frame_decode(const char *src, int length, char *dst, const char *ref, int n, int row_nbytes,
                       int changed_rows)
{
    if (ref == NULL) {
        return LZ4_decompress_safe(src, dst, length, n) == n;
    }
    if (changed_rows) {
        return row_nbytes > 0 && n % row_nbytes == 0
               && decode_changed_rows((const uint8_t *)src, length, dst, ref, n, row_nbytes);
    }
    return LZ4_decompress_safe_usingDict(src, dst, length, n, ref, n) == n;
}
