"""Staging: a batch's arrays laid out in one block of host memory, and that block's copy on a device.

The host block is page-locked (pinned) when the device is a CUDA device, so that one asynchronous copy
moves a whole batch (pixels and every small field) while the learner computes; on the CPU there is no
copy and the "device" arrays are the host arrays themselves. Each array is a *slab*: a name, a dtype, a
shape and a 64-byte aligned offset into the block.

The host arrays are numpy arrays that the store's reading fills in place (``sample(out=...)``): each is
made with ``as_strided`` so that it is its own base for numpy's view rules (``obs`` and ``next_obs``,
slices of the pixel array, then have that array as their ``base``, as the reading layer checks), while
still keeping the block alive.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from mmreplay.gpu.devices import load_torch, torch_dtype

if TYPE_CHECKING:
    import torch

ALIGNMENT = 64  # bytes: a cache line, and more than any dtype or nvCOMP buffer needs


@dataclass(frozen=True)
class Slab:
    """One array of a staging block: ``shape`` elements of ``dtype`` from byte ``offset``."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def end(self) -> int:
        return self.offset + self.nbytes


def plan_slabs(arrays: Sequence[tuple[str, np.dtype, tuple[int, ...]]]) -> tuple[dict[str, Slab], int]:
    """Slabs for ``(name, dtype, shape)`` in the given order, each aligned to ``ALIGNMENT`` bytes, and the
    block's size in bytes."""
    slabs: dict[str, Slab] = {}
    offset = 0
    for name, dtype, shape in arrays:
        if name in slabs:
            raise ValueError(f"slab {name!r} is planned twice")
        slab = Slab(name, np.dtype(dtype), tuple(int(n) for n in shape), offset)
        slabs[name] = slab
        offset = -(-slab.end // ALIGNMENT) * ALIGNMENT
    return slabs, max(offset, ALIGNMENT)


class Staging:
    """A block of host memory holding ``slabs`` (``host``: numpy arrays), and its mirror on ``device``
    (``device``: tensors of the same shapes and dtypes). On the CPU the mirror is the host block itself."""

    def __init__(self, slabs: Mapping[str, Slab], nbytes: int, device: torch.device) -> None:
        load_torch()
        import torch

        self.slabs = dict(slabs)
        self.nbytes = nbytes
        cuda = device.type == "cuda"
        self.host_block: torch.Tensor = torch.empty(nbytes, dtype=torch.uint8, pin_memory=cuda)
        block = self.host_block.numpy()
        self.host: dict[str, npt.NDArray[np.generic]] = {name: _host_view(block, slab) for name, slab in slabs.items()}
        self.device_block: torch.Tensor | None = None
        if cuda:
            self.device_block = torch.empty(nbytes, dtype=torch.uint8, device=device)
            self.device = {name: _device_view(self.device_block, slab) for name, slab in slabs.items()}
        else:
            self.device = {name: torch.from_numpy(array) for name, array in self.host.items()}

    def upload(self, nbytes: int | None = None) -> None:
        """Copy the block's first ``nbytes`` (all by default) to the device, on the current CUDA stream and
        without waiting for it (the host block is page-locked). Nothing to do on the CPU."""
        if self.device_block is None:
            return
        if nbytes is None or nbytes >= self.nbytes:
            self.device_block.copy_(self.host_block, non_blocking=True)  # one call: no slices made
            return
        self.device_block[:nbytes].copy_(self.host_block[:nbytes], non_blocking=True)


def _host_view(block: npt.NDArray[np.uint8], slab: Slab) -> npt.NDArray[np.generic]:
    """The slab as a C-contiguous, writeable numpy array that is its own base (see the module docstring)."""
    flat = block[slab.offset : slab.end].view(slab.dtype)
    strides = _c_strides(slab.shape, slab.dtype.itemsize)
    return np.lib.stride_tricks.as_strided(flat, slab.shape, strides, writeable=True)


def _device_view(block: torch.Tensor, slab: Slab) -> torch.Tensor:
    return block[slab.offset : slab.end].view(torch_dtype(slab.dtype)).view(slab.shape)


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides = []
    step = itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))
