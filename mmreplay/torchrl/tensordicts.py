"""TensorDicts in and out of the storage: a write's leaves as numpy arrays, a read ``Batch`` as the
TensorDict of the same keys, and TorchRL's indices as slot arrays.

The only module of ``mmreplay.torchrl`` besides ``storage`` that touches torch or tensordict.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from tensordict import TensorDict, TensorDictBase, is_tensor_collection

from mmreplay import Batch
from mmreplay.torchrl.layout import (
    ACTION,
    FIELD,
    FRAMES,
    INDEX_KEY,
    NEXT_FRAMES,
    REWARD,
    TERMINATED,
    TRUNCATED,
    Key,
    TensorDictLayout,
    key_text,
)


def rows_of(data: object) -> TensorDictBase:
    """The transitions a write gives, as a TensorDict with one batch axis: one transition (``rb.add``,
    batch size ``[]``) gets an axis of one."""
    if isinstance(data, list) and data and all(is_tensor_collection(item) for item in data):
        data = torch.stack(data)  # ReplayBuffer.extend's list: one transition per item
    if not is_tensor_collection(data):
        raise TypeError(
            f"MmreplayStorage stores TensorDicts of transitions; got {type(data).__name__} "
            "(write with rb.extend(tensordict) or rb.add(tensordict))"
        )
    # A tensorclass is a tensor collection too: its TensorDict.
    table: Any = data if isinstance(data, TensorDictBase) else data.to_tensordict()  # type: ignore[attr-defined]
    if table.batch_dims == 0:
        return table.unsqueeze(0)
    if table.batch_dims != 1:
        raise ValueError(
            f"MmreplayStorage takes a batch of transitions along one axis; got batch size {list(table.batch_size)}: "
            "extend with data.reshape(-1) (the collector's traj_ids keep each env's trajectories apart)"
        )
    return table


def leaves(data: TensorDictBase) -> dict[Key, npt.NDArray[Any]]:
    """Every tensor of ``data`` as a numpy array (a view on the CPU), by key as a tuple, in key order."""
    arrays: dict[Key, npt.NDArray[Any]] = {}
    for key, value in data.items(include_nested=True, leaves_only=True):
        name: Key = (key,) if isinstance(key, str) else tuple(key)
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"{key_text(name)} holds {type(value).__name__}; MmreplayStorage keeps tensors only "
                "(exclude it before writing: data.exclude(key))"
            )
        try:
            arrays[name] = value.detach().cpu().numpy()
        except TypeError:
            raise TypeError(
                f"{key_text(name)} has dtype {value.dtype}; MmreplayStorage keeps bool, integer and float tensors "
                "that numpy holds (not bfloat16 or complex)"
            ) from None
    return arrays


def to_tensordict(batch: Batch, layout: TensorDictLayout, slots: npt.NDArray[np.int64]) -> TensorDict:
    """The TensorDict of ``layout``'s keys for a batch the store read at ``slots``, tensors sharing the
    batch's memory (pixels and next pixels are separate arrays even where the store's batch shares
    their frames); ``"index"`` holds the slots when the writes carried one."""
    count = len(batch)
    next_obs = batch.next_obs
    if np.may_share_memory(batch.obs, next_obs):
        next_obs = next_obs.copy()  # a transform writing into pixels must not change next pixels
    columns: dict[str, npt.NDArray[Any]] = {
        FRAMES: batch.obs, NEXT_FRAMES: next_obs, ACTION: batch.action, REWARD: batch.reward,
        TERMINATED: batch.terminated, TRUNCATED: batch.truncated,
    }
    out = TensorDict(batch_size=[count])
    for entry in layout.entries:
        shape = layout.pixels_shape if entry.column in (FRAMES, NEXT_FRAMES) else entry.shape
        if entry.column == FIELD:
            assert entry.field is not None
            array = batch.fields[entry.field][:, entry.offset : entry.offset + entry.size]
        else:
            array = columns[entry.column]
        out.set(entry.key, torch.from_numpy(array.reshape(count, *shape)))
    if layout.index:
        out.set(INDEX_KEY, torch.from_numpy(slots))
    return out


def slots_of(index: object, length: int) -> tuple[npt.NDArray[np.int64], tuple[int, ...]]:
    """TorchRL's index into the storage (an int, slice, range, sequence, numpy array or tensor of ints, or a
    tuple of one of them) as slots in ``[0, length)``, and the batch shape it asks for (``()`` for an
    int). Negative ints count from the end, as in a TensorStorage."""
    if isinstance(index, tuple):
        if len(index) != 1:
            raise IndexError(f"MmreplayStorage has one dimension; got an index of {len(index)}")
        index = index[0]
    if isinstance(index, slice):
        return np.arange(length, dtype=np.int64)[index], (len(range(length)[index]),)
    if isinstance(index, range):
        index = np.arange(index.start, index.stop, index.step, dtype=np.int64)
    if isinstance(index, torch.Tensor):
        index = index.detach().cpu().numpy()
    array = np.asarray(index)
    if array.dtype == np.bool_:
        if array.shape != (length,):
            raise IndexError(f"a boolean index must have shape ({length},) like the storage; got {array.shape}")
        array = np.flatnonzero(array)
    if array.size and array.dtype.kind not in "iu":
        raise IndexError(f"MmreplayStorage takes integer indices; got dtype {array.dtype}")
    slots = array.astype(np.int64).reshape(-1)
    slots = np.where(slots < 0, slots + length, slots)
    outside = (slots < 0) | (slots >= length)
    if outside.any():
        raise IndexError(f"index {int(array.reshape(-1)[outside][0])} is out of range for a storage of {length} transitions")
    return slots, tuple(array.shape)
