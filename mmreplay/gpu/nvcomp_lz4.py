"""NVIDIA nvCOMP's batched LZ4 decompression, called through its C API with ctypes.

nvCOMP decodes raw LZ4 blocks (the store's format: one block per frame, no frame header) on a CUDA
stream, many blocks in one launch. The library comes from the ``nvidia-libnvcomp-cu13`` (or ``-cu12``)
wheel, which installs ``nvidia/libnvcomp/lib64/libnvcomp.so.N`` (the CUDA runtime is linked into it);
a system ``libnvcomp.so`` is used otherwise. The signatures below are those of nvCOMP 6's ``nvcomp/lz4.h``
and ``nvcomp/shared_types.h`` (6.0.0): another major version is refused rather than called with them.

Decompression uses the CUDA backend explicitly: it reports a corrupt block in its status (the hardware
decompression engine of newer GPUs leaves corrupt input undefined), and the caller checks the CRC of
every block anyway. ctypes releases the GIL during each call.
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

SUPPORTED_MAJOR = 6
INSTALL_HINT = "pip install nvidia-libnvcomp-cu13 (CUDA 13; nvidia-libnvcomp-cu12 for CUDA 12)"
_SONAMES = ("libnvcomp.so.6", "libnvcomp.so")

NVCOMP_SUCCESS = 0
_BACKEND_CUDA = 2  # nvcompDecompressBackend_t: NVCOMP_DECOMPRESS_BACKEND_CUDA
_TYPE_CHAR = 0  # nvcompType_t: NVCOMP_TYPE_CHAR
_BITSHUFFLE_NONE = 0


class DecompressOpts(ctypes.Structure):
    """``nvcompBatchedLZ4DecompressOpts_t``: passed by value, 64 bytes."""

    _fields_ = [
        ("backend", ctypes.c_int),
        ("sort_before_hw_decompress", ctypes.c_int),
        ("data_type", ctypes.c_int),
        ("bitshuffle_mode", ctypes.c_int),
        ("reserved", ctypes.c_char * 48),  # must be zero
    ]


class AlignmentRequirements(ctypes.Structure):
    """``nvcompAlignmentRequirements_t``: the minimum alignment of input, output and temporary buffers."""

    _fields_ = [("input", ctypes.c_size_t), ("output", ctypes.c_size_t), ("temp", ctypes.c_size_t)]


class Properties(ctypes.Structure):
    """``nvcompProperties_t``: version = major * 1000 + minor * 100 + patch."""

    _fields_ = [("version", ctypes.c_uint32), ("cudart_version", ctypes.c_uint32)]


def find_library() -> Path | None:
    """libnvcomp from an installed ``nvidia-libnvcomp-*`` wheel, or None."""
    try:
        spec = importlib.util.find_spec("nvidia.libnvcomp")
    except ModuleNotFoundError:
        return None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        for folder in ("lib64", "lib"):
            for soname in _SONAMES:
                path = Path(location) / folder / soname
                if path.is_file():
                    return path
    return None


class BatchedLZ4:
    """nvCOMP's batched LZ4 decoder: ``decompress_async`` launches the decoding of many blocks on a stream.

    ``library``: a path to libnvcomp; by default the wheel's, else the system's. ``ModuleNotFoundError``
    naming the wheel when there is none; ``RuntimeError`` for another major version."""

    def __init__(self, library: str | Path | None = None) -> None:
        self._lib = load_library(library)
        self._declare()
        properties = Properties()
        self._check(self._lib.nvcompGetProperties(ctypes.byref(properties)), "nvcompGetProperties")
        self.version = properties.version
        major = self.version // 1000
        if major != SUPPORTED_MAJOR:
            raise RuntimeError(
                f"libnvcomp is version {self.version_text}; mmreplay calls nvCOMP {SUPPORTED_MAJOR}'s C API: {INSTALL_HINT}"
            )
        self._opts = DecompressOpts(backend=_BACKEND_CUDA, data_type=_TYPE_CHAR, bitshuffle_mode=_BITSHUFFLE_NONE)
        alignment = AlignmentRequirements()
        self._check(self._lib.nvcompBatchedLZ4DecompressGetRequiredAlignments(self._opts, ctypes.byref(alignment)),
                    "nvcompBatchedLZ4DecompressGetRequiredAlignments")
        self.alignment = (int(alignment.input), int(alignment.output), int(alignment.temp))

    @property
    def version_text(self) -> str:
        return f"{self.version // 1000}.{self.version % 1000 // 100}.{self.version % 100}"

    def temp_bytes(self, chunks: int, chunk_bytes: int) -> int:
        """Temporary device memory that decoding up to ``chunks`` blocks of ``chunk_bytes`` each needs."""
        size = ctypes.c_size_t(0)
        self._check(
            self._lib.nvcompBatchedLZ4DecompressGetTempSize(
                chunks, chunk_bytes, self._opts, ctypes.byref(size), chunks * chunk_bytes, None
            ),
            "nvcompBatchedLZ4DecompressGetTempSize",
        )
        return int(size.value)

    def decompress_async(
        self,
        *,
        compressed_ptrs: int,
        compressed_bytes: int,
        buffer_bytes: int,
        actual_bytes: int,
        count: int,
        temp: int,
        temp_bytes: int,
        out_ptrs: int,
        statuses: int,
        stream: int,
    ) -> None:
        """Launch the decoding of ``count`` blocks on ``stream``. Every argument but ``count`` and
        ``temp_bytes`` is a device address: arrays of ``count`` block addresses (u64), block sizes (u64),
        output capacities (u64), decoded sizes (u64, written), output addresses (u64) and statuses (i32,
        written: 0 where a block decoded), and the temporary buffer. ``RuntimeError`` if the launch fails."""
        status = self._lib.nvcompBatchedLZ4DecompressAsync(
            compressed_ptrs, compressed_bytes, buffer_bytes, actual_bytes, count, temp or None, temp_bytes,
            out_ptrs, self._opts, statuses, stream or None,
        )
        self._check(status, "nvcompBatchedLZ4DecompressAsync")

    def status_text(self, status: int) -> str:
        text: bytes | None = self._lib.nvcompGetStatusString(status)
        return text.decode() if text else f"status {status}"

    def _check(self, status: int, call: str) -> None:
        if status != NVCOMP_SUCCESS:
            raise RuntimeError(f"{call} failed: {self.status_text(status)} (nvCOMP status {status})")

    def _declare(self) -> None:
        lib, size, pointer = self._lib, ctypes.c_size_t, ctypes.c_void_p
        lib.nvcompGetProperties.restype = ctypes.c_int
        lib.nvcompGetProperties.argtypes = [ctypes.POINTER(Properties)]
        lib.nvcompGetStatusString.restype = ctypes.c_char_p
        lib.nvcompGetStatusString.argtypes = [ctypes.c_int]
        lib.nvcompBatchedLZ4DecompressGetRequiredAlignments.restype = ctypes.c_int
        lib.nvcompBatchedLZ4DecompressGetRequiredAlignments.argtypes = [DecompressOpts, ctypes.POINTER(AlignmentRequirements)]
        lib.nvcompBatchedLZ4DecompressGetTempSize.restype = ctypes.c_int
        lib.nvcompBatchedLZ4DecompressGetTempSize.argtypes = [size, size, DecompressOpts, ctypes.POINTER(size), size, pointer]
        lib.nvcompBatchedLZ4DecompressAsync.restype = ctypes.c_int
        lib.nvcompBatchedLZ4DecompressAsync.argtypes = [
            pointer, pointer, pointer, pointer, size, pointer, size, pointer, DecompressOpts, pointer, pointer,
        ]


def load_library(library: str | Path | None = None) -> ctypes.CDLL:
    """libnvcomp: ``library`` if given, else the wheel's, else the system's; ``ModuleNotFoundError`` naming the
    wheel when there is none."""
    if library is not None:
        return ctypes.CDLL(str(library), mode=ctypes.RTLD_LOCAL)
    found = find_library()
    candidates = [str(found)] if found is not None else list(_SONAMES)
    for candidate in candidates:
        try:
            return ctypes.CDLL(candidate, mode=ctypes.RTLD_LOCAL)
        except OSError:
            continue
    raise ModuleNotFoundError(f"decode='device' needs NVIDIA nvCOMP, which is not installed: {INSTALL_HINT}",
                              name="nvidia.libnvcomp")
