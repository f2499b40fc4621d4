/* mmreplay._lz4batch: the compiled half of reading and writing lz4 frames and transition rows. Each job
 * lives in a file of its own (see each header for its functions and their arguments):
 *
 *   lz4_decode       decode, decode_entries: a batch of lz4 frames decoded with the GIL released once,
 *                    shared with the helper threads of work_pool
 *   frame_entries    gather_entries: frames located through a frame ring's table, still compressed
 *   crc32            crc32: CRC-32 of frames (zlib's), folded 16 bytes at a time where the CPU can
 *   row_checksum     row_checksums: the checksum of records tied to their step (transition rows)
 *   row_layout       row_layout: the transition row's layout, passed in from Python once per table
 *   row_gather       gather_rows, gather_fields, prefetch_rows: a sampled batch's rows, checked
 *   link_follow      follow_links: frame stacks through the frame table's episode links
 *   transition_read  read_transitions: rows, stacks and frames of a sampled batch in one call
 *   frame_compress   compress_frames, compress_ahead: frames compressed alone on the pool's threads, at
 *                    once or ahead while the caller works on (add's fast path, encode_frames)
 *   fast_add         append_frames, append_reference_frames, write_rows: add's fast path, its writes in
 *                    one call each
 *   one_env_add      continue_one_env: one env's continuing add (the frame left behind, the new one
 *                    posted, the row) in one call
 *   reference_groups reference_groups, encode_frame, groups_checkpoint, groups_rollback: a writer's
 *                    reference groups (which frame each is compressed against), for both of add's paths
 *   reference_ahead  encode_ahead, groups_taken_back: an add's frames encoded ahead on helpers, taken
 *                    back from a preempted one
 *   reference_threads reference_decode: mmreplay._lz4ref.decode's batch on the pool's threads, one
 *                    tree of references a task (reference_decode's entries)
 *   reference_table  reference_decode_entries: a reference ring's frames located through its table,
 *                    planned (reference_plan) and decoded in one call; read_transitions' reference path
 *   key_frames       key_frames, key_frames_counts: a reference ring's key frames kept decoded across
 *                    batches, for reference_table's reads
 *   referenced_decode referenced_decode: encoded blocks that reference each other (a reference store's
 *                    encoded batch), planned and decoded in one call
 *
 * The pure-Python code each function accelerates gives identical results (MMREPLAY_PURE_PYTHON=1 runs it). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "continuing_obs.h"
#include "crc32.h"
#include "fast_add.h"
#include "frame_compress.h"
#include "frame_entries.h"
#include "key_frames.h"
#include "link_follow.h"
#include "one_env_add.h"
#include "lz4_api.h"
#include "lz4_decode.h"
#include "reference_ahead.h"
#include "reference_groups.h"
#include "reference_table.h"
#include "reference_threads.h"
#include "referenced_decode.h"
#include "row_checksum.h"
#include "row_gather.h"
#include "row_layout.h"
#include "transition_read.h"

static PyMethodDef methods[] = {
    LZ4_DECODE_METHODS
    FRAME_ENTRIES_METHODS
    CRC32_METHODS
    ROW_CHECKSUM_METHODS
    ROW_LAYOUT_METHODS
    ROW_GATHER_METHODS
    LINK_FOLLOW_METHODS
    TRANSITION_READ_METHODS
    FAST_ADD_METHODS
    CONTINUING_OBS_METHODS
    ONE_ENV_ADD_METHODS
    FRAME_COMPRESS_METHODS
    REFERENCE_GROUPS_METHODS
    REFERENCE_AHEAD_METHODS
    REFERENCE_THREADS_METHODS
    REFERENCE_TABLE_METHODS
    KEY_FRAMES_METHODS
    REFERENCED_DECODE_METHODS
    {NULL, NULL, 0, NULL},
};

/* The interface of this module's functions, as mmreplay/extensions.py's INTERFACES expects it: bump
 * both when a function is added or its arguments change, so that a build from older sources is
 * refused (and its pure-Python fallback used) rather than failing mid-call. 4: the row functions take
 * row_layout()'s capsule instead of env_bytes. 5: threads up to 64 (POOL_MAX_THREADS), append_frames'
 * threads and frames compressed ahead, compress_frames, compress_ahead, wake_helpers. 6: format version
 * 5's rows and entries (row_layout's next_delta_bytes and env_shift, entry layouts of 13 fields, gather_rows'
 * unchecked, follow_links' layout), reference groups and append_reference_frames, reference_decode. 7:
 * read_transitions' reference argument (a reference ring's batch in one call), reference_decode_entries,
 * encode_ahead and append_reference_frames' ahead. 8: referenced_decode. 9: continuing_frame. 10:
 * entry_layout (the entry functions' layout as its capsule, or the tuple). 11: one_env_values. 12:
 * continue_one_env. */
#define INTERFACE 12

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "mmreplay._lz4batch",
    "Batch lz4 decoding for mmreplay.frames.lz4_codec, the index work of reading a sampled batch, and add's "
    "fast path.", -1, methods,
};

PyMODINIT_FUNC
PyInit__lz4batch(void)
{
    frame_crc32_init();
    PyObject *module = PyModule_Create(&module_definition);
    if (module != NULL && (PyModule_AddIntConstant(module, "LZ4_VERSION", LZ4_versionNumber()) < 0
                           || PyModule_AddIntConstant(module, "INTERFACE", INTERFACE) < 0
                           || PyModule_AddIntConstant(module, "UNCHECKED_BYTES", RECORD_UNCHECKED_BYTES) < 0)) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
