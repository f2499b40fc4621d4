/* One stored frame of a reference ring decoded (mmreplay/frames/reference_codec.py): a key frame alone,
 * a dependent frame against its reference, as one lz4 block of the whole frame (format version 4) or as
 * its changed rows (version 5, changed_rows.h). Shared by the batch decoders of both extensions. */
#ifndef MMREPLAY_REFERENCE_FRAME_H
#define MMREPLAY_REFERENCE_FRAME_H

#include <stdint.h>

/* Decodes the `length` bytes at src into exactly n bytes at dst: alone when ref is NULL, else against the
 * n bytes at ref, as changed rows of row_nbytes when changed_rows. ref must not overlap dst, except that
 * a changed-rows frame may decode in place (dst == ref): only its changed rows are then written, the
 * reference's other rows already being the frame's. 1 when the frame decodes to exactly n bytes; 0 when
 * it does not (or memory ran out; in place, dst is then unspecified). Any thread may call it. */
int reference_frame_decode(const char *src, int length, char *dst, const char *ref, int n, int row_nbytes,
                           int changed_rows);

#endif
