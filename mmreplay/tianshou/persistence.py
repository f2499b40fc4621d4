"""A Tianshou buffer over stores saved and loaded: pickles and ``save_hdf5`` / ``load_hdf5``.

Both keep what Tianshou keeps (its slot arrays, sub-buffers and counters) and, in place of the frames,
where the stores are and how many transitions each held: the frames stay in the stores, which are
durable already (flushed before the state is taken). A loaded or unpickled buffer opens its stores
read-only, and its first add reopens its env's store to append (the writer lock: the buffer that wrote
it must be closed by then, ``close()``). A store that changed since the save is refused.
"""

from __future__ import annotations

import pickle
from typing import Any, TypeVar

import h5py
import numpy as np
from tianshou.data import ReplayBufferManager
from tianshou.data.utils.converter import from_hdf5, to_hdf5

from mmreplay.tianshou.buffer_frames import BufferFrames

FRAMES_KEY = "_frames"
# The HDF5 file's attribute that holds the frames' state (pickled: small, and of nested plain types; an
# attribute, since Tianshou's from_hdf5 reads every dataset of the file as one of its own).
FRAMES_ATTRIBUTE = "mmreplay_frames"

Buffer = TypeVar("Buffer", bound=ReplayBufferManager)


def state_of(buffer: ReplayBufferManager) -> dict[str, Any]:
    """The buffer's ``__dict__`` with its frames object replaced by that object's state."""
    state = dict(buffer.__dict__)
    frames: BufferFrames = state.pop(FRAMES_KEY)
    state[FRAMES_KEY] = frames.state()
    return state


def set_state(buffer: ReplayBufferManager, state: dict[str, Any]) -> None:
    """Restore ``state_of``'s state into a buffer made with ``__new__``."""
    state = dict(state)
    frames = BufferFrames.restore(state.pop(FRAMES_KEY))
    ReplayBufferManager.__setstate__(buffer, state)
    object.__setattr__(buffer, FRAMES_KEY, frames)
    buffer._set_batch_for_children()  # the sub-buffers view the slot arrays again, as when built


def save_hdf5(buffer: ReplayBufferManager, path: str, compression: str | None) -> None:
    """Tianshou's ``save_hdf5`` of the buffer's slot arrays, with the frames' state beside them."""
    state = state_of(buffer)
    frames = state.pop(FRAMES_KEY)
    with h5py.File(path, "w") as file:
        to_hdf5(state, file, compression=compression)
        file.attrs[FRAMES_ATTRIBUTE] = np.void(pickle.dumps(frames))


def load_hdf5(cls: type[Buffer], path: str, device: str | None) -> Buffer:
    """A buffer of class ``cls`` from ``save_hdf5``'s file, its stores reopened read-only.

    Raises:
        ValueError: the file holds no mmreplay frames (another buffer's save), or a store changed since.
    """
    with h5py.File(path, "r") as file:
        if FRAMES_ATTRIBUTE not in file.attrs:
            raise ValueError(
                f"{path!r} holds no mmreplay frames: it was saved by another buffer class; load it with that class"
            )
        frames = pickle.loads(file.attrs[FRAMES_ATTRIBUTE].tobytes())
        state = from_hdf5(file, device=device)
    state = dict(state)
    state[FRAMES_KEY] = frames
    buffer = cls.__new__(cls)
    set_state(buffer, state)
    return buffer
