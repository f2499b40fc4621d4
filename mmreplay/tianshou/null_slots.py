"""Which slots hold a missing value (None or NaN), kept up to date at every write, so that ``hasnull`` is
one comparison instead of Tianshou's ``self[:].hasnull()``, which rebuilds every stored observation.

Tianshou's ``Collector`` and ``OffPolicyTrainer`` call ``hasnull()`` after every collect; on a buffer of
Atari frames it decodes and copies the whole buffer each time. Here each write marks its rows: a row is
null when any of its values is (pandas' ``isnull``, as Tianshou's ``Batch.isnull``), its frames included.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from tianshou.data import Batch


def null_rows(batch: Batch, rows: int) -> npt.NDArray[np.bool_]:
    """Per row of ``batch`` (a leading axis of ``rows``), whether any of its values is None or NaN."""
    found = np.zeros(rows, np.bool_)
    for value in batch.values():
        if isinstance(value, Batch):
            if value.get_keys():
                found |= null_rows(value, rows)
            continue
        array = np.asarray(value)
        if array.ndim == 0 or array.shape[0] != rows:
            found |= bool(pd.isnull(array).any())
            continue
        found |= np.asarray(pd.isnull(array)).reshape(rows, -1).any(axis=1)
    return found


class NullSlots:
    """Flags per slot of a buffer of ``maxsize`` slots: whether the slot's frames hold a NaN (fixed when
    the slot is written) and whether its other values hold a None or NaN (these may change in place:
    ``set_array_at_key``); ``count`` is the number of slots holding a stored transition with either."""

    def __init__(self, maxsize: int) -> None:
        self.frames = np.zeros(maxsize, np.bool_)
        self.values = np.zeros(maxsize, np.bool_)
        self.live = np.zeros(maxsize, np.bool_)
        self.count = 0

    def write(
        self, slots: npt.NDArray[np.int64], *, frames: npt.NDArray[np.bool_], values: npt.NDArray[np.bool_]
    ) -> None:
        """Slots ``slots`` now hold new transitions with these flags (a slot given twice: its last)."""
        self._set(slots, frames, values, live=True)

    def mark(self, slots: npt.NDArray[np.int64], values: npt.NDArray[np.bool_]) -> None:
        """Slots ``slots`` had values changed in place; their frames did not change."""
        last = _last_of_each(slots)
        self._set(slots[last], self.frames[slots[last]], values[last], live=None)

    def _set(
        self, slots: npt.NDArray[np.int64], frames: npt.NDArray[np.bool_], values: npt.NDArray[np.bool_], *,
        live: bool | None,
    ) -> None:
        last = _last_of_each(slots)
        slots, frames, values = slots[last], frames[last], values[last]
        self.count -= int((self.live[slots] & (self.frames[slots] | self.values[slots])).sum())
        self.frames[slots] = frames
        self.values[slots] = values
        if live is not None:
            self.live[slots] = live
        self.count += int((self.live[slots] & (frames | values)).sum())

    def clear(self) -> None:
        """No slot holds a stored transition any more (``reset``)."""
        self.frames[:] = False
        self.values[:] = False
        self.live[:] = False
        self.count = 0

    def state(self) -> dict[str, Any]:
        return {"frames": self.frames.copy(), "values": self.values.copy(), "live": self.live.copy()}

    @classmethod
    def restore(cls, state: dict[str, Any]) -> NullSlots:
        slots = cls(len(state["frames"]))
        slots.frames[:] = state["frames"]
        slots.values[:] = state["values"]
        slots.live[:] = state["live"]
        slots.count = int((slots.live & (slots.frames | slots.values)).sum())
        return slots


def _last_of_each(slots: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The positions in ``slots`` of each distinct slot's last occurrence."""
    reverse = slots[::-1]
    _, first = np.unique(reverse, return_index=True)
    return (len(slots) - 1 - first).astype(np.int64)
