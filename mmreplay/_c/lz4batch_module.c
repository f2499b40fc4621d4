/* mmreplay._lz4batch: the compiled half of reading and writing frames and transition rows. Each job
 * lives in a file of its own, by family (see each header for its functions and their arguments):
 *
 *   codec/    frames as bytes: crc32 (zlib's CRC-32), frame_blocks (a frame alone: lz4 blocks decoded and
 *             compressed in batches), reference_frames (a frame against its reference: stock lz4 calls,
 *             its changed units), reference_groups (a writer's groups: which frame each is compressed
 *             against)
 *   ring/     a frame ring: frame_table (its geometry, entries and the `ring` argument), frame_sources
 *             (segment views), frame_reads (frames decoded or gathered by step, stacks followed),
 *             reference_reads (a reference ring's frames rebuilt in place), frame_writes (add's frames)
 *   rows/     transition rows: row_layout (the row's fields and the `rows` argument), row_checksum,
 *             row_gather (a batch's rows checked and unpacked), row_writes (add's rows),
 *             transition_read (a sampled batch in one call)
 *   pool/     work_pool: helper threads that share one call's work and join before it returns
 *
 * The pure-Python code each function accelerates gives identical results (MMREPLAY_PURE_PYTHON=1 runs it). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "codec/crc32.h"
#include "codec/frame_blocks.h"
#include "codec/lz4_api.h"
#include "codec/reference_frames.h"
#include "codec/reference_groups.h"
#include "ring/frame_reads.h"
#include "ring/frame_table.h"
#include "ring/frame_writes.h"
#include "ring/reference_reads.h"
#include "rows/row_checksum.h"
#include "rows/row_gather.h"
#include "rows/row_layout.h"
#include "rows/row_writes.h"
#include "rows/transition_read.h"

static PyMethodDef methods[] = {
    CRC32_METHODS
    FRAME_BLOCKS_METHODS
    REFERENCE_FRAMES_METHODS
    REFERENCE_GROUPS_METHODS
    FRAME_TABLE_METHODS
    FRAME_READS_METHODS
    REFERENCE_READS_METHODS
    FRAME_WRITES_METHODS
    ROW_CHECKSUM_METHODS
    ROW_LAYOUT_METHODS
    ROW_GATHER_METHODS
    ROW_WRITES_METHODS
    TRANSITION_READ_METHODS
    {NULL, NULL, 0, NULL},
};

/* The interface of this module's functions, as mmreplay/extensions.py's INTERFACES expects it: bump
 * both when a function is added or its arguments change, so that a build from older sources is
 * refused (and its pure-Python fallback used) rather than failing mid-call. 13: one module for both
 * encodings (format version 6's reference frames), the `ring` and `rows` arguments, no work ahead. */
#define INTERFACE 14

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "mmreplay._lz4batch",
    "Frames (lz4 blocks alone and against references) and transition rows, read and written for mmreplay.",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__lz4batch(void)
{
    frame_crc32_init();
    PyObject *module = PyModule_Create(&module_definition);
    if (module != NULL && (PyModule_AddIntConstant(module, "LZ4_VERSION", LZ4_versionNumber()) < 0
                           || PyModule_AddIntConstant(module, "INTERFACE", INTERFACE) < 0
                           || PyModule_AddIntConstant(module, "UNCHECKED_BYTES", RECORD_UNCHECKED_BYTES) < 0
                           || PyModule_AddIntConstant(module, "REFERENCE_DICT_MIN_BYTES", REFERENCE_DICT_MIN_BYTES) < 0)) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
