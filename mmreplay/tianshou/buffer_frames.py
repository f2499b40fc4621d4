"""What a Tianshou buffer over stores does differently from Tianshou's: its frames go to the stores, and
every read of obs or obs_next comes back from them; every other key stays in Tianshou's slot arrays.

A *slot* is Tianshou's index into the buffer (``0 <= slot < maxsize``; sub-buffer ``i`` owns the slots
``[offset_i, offset_i + size)``). Tianshou keeps ``act``, ``rew``, ``terminated``, ``truncated``, ``done``,
``info``, ``policy`` and any other key in ``_meta``, one row per slot, and its ``prev``, ``next``,
``unfinished_index``, ``get_buffer_indices`` and sampling read those arrays; they are left exactly as
Tianshou writes them. ``obs`` and ``obs_next`` are not in ``_meta``: each slot records the *step* of its
transition in its sub-buffer's store (``steps``), and a read rebuilds both from the store. A store's
``next_obs`` is the observation the env returned, also at an episode's end (the true final frame), so
``obs_next`` is exact at every slot, where Tianshou's memory options (``ignore_obs_next``,
``save_only_last_obs`` with ``stack_num``) hand out the episode's last obs again, or its first frames.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from tianshou.data import Batch, ReplayBufferManager
from tianshou.data.batch import alloc_by_keys_diff, create_value

from mmreplay.tianshou.frame_stores import FrameStores
from mmreplay.tianshou.null_slots import NullSlots, null_rows
from mmreplay.tianshou.transitions import parse_rows

REQUIRED_KEYS = ("obs", "act", "rew", "terminated", "truncated")
FRAME_KEYS = ("obs", "obs_next")


class BufferFrames:
    """The stores of one Tianshou buffer of ``maxsize`` slots, and which transition each slot holds.

    ``steps[slot]`` is the slot's step in its sub-buffer's store (-1: never written since the last
    ``reset``); ``has_obs_next[slot]`` whether its add carried an ``obs_next`` (Tianshou hands out zeros
    for the slots of adds without one, and no ``obs_next`` at all until some add has carried one).
    """

    def __init__(self, maxsize: int, stores: FrameStores) -> None:
        self.stores = stores
        self.steps = np.full(maxsize, -1, np.int64)
        self.has_obs_next = np.zeros(maxsize, np.bool_)
        self.obs_next_seen = False
        self.nulls = NullSlots(maxsize)

    # -- add ---------------------------------------------------------------------------------------

    def add(
        self, manager: ReplayBufferManager, batch: Batch, buffer_ids: npt.ArrayLike | None
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]:
        """``ReplayBufferManager.add``: every row checked, its frames written to its env's store, then
        Tianshou's bookkeeping and slot arrays, exactly as Tianshou does them."""
        keys = set(batch.get_keys())
        missing = [key for key in REQUIRED_KEYS if key not in keys]
        if missing:
            raise ValueError(f"the batch must have the keys {list(REQUIRED_KEYS)}; it lacks {missing}")
        ids = np.arange(manager.buffer_num) if buffer_ids is None else np.asarray(buffer_ids, dtype=np.int64).reshape(-1)
        kept = Batch()
        for key in set(manager._reserved_keys).intersection(keys):
            kept.__dict__[key] = batch[key]
        kept.__dict__["done"] = np.logical_or(kept.terminated, kept.truncated)
        rows = parse_rows(
            kept, ids, layout=self.stores.layout, stack_size=self.stores.stack_size, buffer_num=manager.buffer_num
        )
        slot_values = Batch()
        for key in kept.get_keys():
            if key not in FRAME_KEYS:
                slot_values.__dict__[key] = kept[key]
        value_null = null_rows(slot_values, len(ids))
        steps = self.stores.add(rows)
        slots, returns, lengths, starts = _advance_sub_buffers(manager, ids, slot_values)
        _write_slot_values(manager, slots, slot_values)
        self.steps[slots] = steps
        self.has_obs_next[slots] = rows.has_obs_next
        self.obs_next_seen |= rows.has_obs_next
        self.nulls.write(slots, frames=rows.frame_null, values=value_null)
        return slots, returns, lengths, starts

    # -- reads -------------------------------------------------------------------------------------

    def resolve(self, manager: ReplayBufferManager, index: Any) -> Any:
        """Tianshou's reading of an index: ``buffer[:]`` is every stored slot (``sample_indices(0)``),
        another slice is taken of ``range(len(buffer))``, anything else is used as given."""
        if isinstance(index, slice):
            return manager.sample_indices(0) if index == slice(None) else manager._indices[: len(manager)][index]
        return index

    def batch(self, manager: ReplayBufferManager, indices: Any, *, frames: bool = True) -> Batch:
        """``ReplayBuffer.__getitem__`` of resolved ``indices``, obs and obs_next from the stores (with
        ``frames=False``, all-False masks of their shape in their place: for ``isnull``)."""
        slots = np.arange(manager.maxsize)[indices]  # numpy's indexing: negative slots, IndexError
        flat = np.asarray(slots, dtype=np.int64).reshape(-1)
        if self.stores.layout is None:
            obs: Any = Batch()
            obs_next: Any = Batch()
        elif frames:
            envs = np.searchsorted(manager._offset, flat, side="right") - 1
            obs, obs_next = self.stores.read(envs, self.steps[flat])
            obs_next[~self.has_obs_next[flat]] = 0
            obs, obs_next = obs.reshape(np.shape(slots) + obs.shape[1:]), obs_next.reshape(np.shape(slots) + obs.shape[1:])
        else:
            obs = obs_next = np.broadcast_to(np.False_, np.shape(slots) + self.stores.layout.obs_shape)
        if not self.obs_next_seen:
            obs_next = Batch()
        values = {
            "obs": obs,
            "act": manager.act[indices],
            "rew": manager.rew[indices],
            "terminated": manager.terminated[indices],
            "truncated": manager.truncated[indices],
            "done": manager.done[indices],
            "obs_next": obs_next,
            "info": manager.get(indices, "info", Batch()),
            "policy": manager.get(indices, "policy", Batch()),
        }
        for key in set(manager._meta.get_keys()) - set(manager._input_keys):
            values[key] = manager._meta[key][indices]
        return Batch(values)

    def isnull(self, manager: ReplayBufferManager) -> Batch:
        """``buffer[:].isnull()`` without decoding a frame where none holds a NaN (the masks of obs and
        obs_next are then read-only all-False views)."""
        indices = manager.sample_indices(0)
        frames_null = self.nulls.frames[indices]
        masks = self.batch(manager, indices, frames=False).isnull() if len(indices) else Batch()
        if frames_null.any():
            read = self.batch(manager, indices[frames_null])
            for key in FRAME_KEYS:
                if isinstance(read[key], np.ndarray):
                    mask = np.zeros(masks[key].shape, np.bool_)
                    mask[frames_null] = np.isnan(read[key])
                    masks[key] = mask
        return masks

    # -- changes in place --------------------------------------------------------------------------

    def values_changed(self, manager: ReplayBufferManager, slots: npt.NDArray[np.int64]) -> None:
        """Slot values were written in place (``set_array_at_key``, ``set_batch``): their null flags again."""
        if len(manager._meta.get_keys()) and len(slots):
            self.nulls.mark(slots, null_rows(manager._meta[slots], len(slots)))

    def reset(self) -> None:
        """Every store emptied (``ReplayBufferManager.reset``: no slot holds a transition any more)."""
        self.stores.clear()
        self.steps[:] = -1
        self.has_obs_next[:] = False
        self.nulls.clear()

    # -- pickles and HDF5 --------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {
            "stores": self.stores.state(),
            "steps": self.steps.copy(),
            "has_obs_next": self.has_obs_next.copy(),
            "obs_next_seen": bool(self.obs_next_seen),
            "nulls": self.nulls.state(),
        }

    @classmethod
    def restore(cls, state: dict[str, Any]) -> BufferFrames:
        """The frames of a saved buffer: its stores reopened read-only (an add reopens its env's store to
        append), refused when one changed since."""
        frames = cls(len(state["steps"]), FrameStores.reopen(dict(state["stores"])))
        frames.steps[:] = state["steps"]
        frames.has_obs_next[:] = state["has_obs_next"]
        frames.obs_next_seen = bool(state["obs_next_seen"])
        frames.nulls = NullSlots.restore(dict(state["nulls"]))
        return frames


def _advance_sub_buffers(
    manager: ReplayBufferManager, ids: npt.NDArray[np.int64], values: Batch
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]:
    """Tianshou's per-row bookkeeping of ``ReplayBufferManager.add``: each row's sub-buffer takes its next
    slot (its ring wraps at its size), its episode return and length, as Tianshou computes them."""
    slots, returns, lengths, starts = [], [], [], []
    for row, buffer_id in enumerate(ids.tolist()):
        sub_buffer = manager.buffers[buffer_id]
        offset = manager._offset[buffer_id]
        index, episode_return, episode_length, start = sub_buffer._update_state_pre_add(values.rew[row], values.done[row])
        slots.append(index + offset)
        returns.append(episode_return)
        lengths.append(episode_length)
        starts.append(start + offset)
        manager.last_index[buffer_id] = index + offset
        manager._lengths[buffer_id] = len(sub_buffer)
    return np.array(slots, dtype=np.int64), np.array(returns), np.array(lengths), np.array(starts)


def _write_slot_values(manager: ReplayBufferManager, slots: npt.NDArray[np.int64], values: Batch) -> None:
    """The rows' values into Tianshou's slot arrays, allocated at the first add (and for a key first seen
    later) as Tianshou allocates them."""
    try:
        manager._meta[slots] = values
    except ValueError:
        values.rew = values.rew.astype(float)
        values.done = values.done.astype(bool)
        values.terminated = values.terminated.astype(bool)
        values.truncated = values.truncated.astype(bool)
        if len(manager._meta.get_keys()) == 0:
            manager._meta = create_value(values, manager.maxsize, stack=False)
        else:
            alloc_by_keys_diff(manager._meta, values, manager.maxsize, False)
        manager._set_batch_for_children()
        manager._meta[slots] = values
