"""What both of mmreplay's Tianshou buffers do alike: their stores, the slot arrays beside them, pickles
and HDF5 files (``StoreSlots``, a mixin placed before Tianshou's buffer class in each)."""

from __future__ import annotations

from typing import Any

import numpy as np
from tianshou.data import Batch

from mmreplay import ReplayStore
from mmreplay.tianshou import persistence
from mmreplay.tianshou.buffer_frames import FRAME_KEYS, BufferFrames


class StoreSlots:
    """The methods both buffers share; ``self._frames`` (a ``BufferFrames``) holds their stores."""

    _frames: BufferFrames
    maxsize: int

    @property
    def path(self) -> str:
        """The directory of the stores.

        Returns:
            The path, as a str.
        """
        return str(self._frames.stores.path)

    @property
    def stores(self) -> list[ReplayStore | None]:
        """Each sub-buffer's store, None before its env's first add.

        Open them with ``ReplayStore.open`` elsewhere, list their ``episodes()``, export them.

        Returns:
            One store (or None) per sub-buffer.
        """
        return list(self._frames.stores.stores)

    def reset(self, keep_statistics: bool = False) -> None:
        """Tianshou's ``reset``, and every store emptied.

        Args:
            keep_statistics: Tianshou's: keep the episode statistics of the envs in progress.
        """
        super().reset(keep_statistics=keep_statistics)
        self._frames.reset()

    def hasnull(self) -> bool:
        """Whether any stored transition holds a None or NaN (frames included), in constant time.

        Returns:
            True if one does.
        """
        return self._frames.nulls.count > 0

    def isnull(self) -> Batch:
        """Tianshou's ``isnull`` of every stored transition, decoding frames only where one holds a NaN.

        Returns:
            A Batch of masks by key; those of obs and obs_next are read-only all-False views where no
            frame holds a NaN.
        """
        return self._frames.isnull(self)

    def dropnull(self) -> None:
        """Refuse: a store's transitions never move, so slots cannot be dropped.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot drop slots: a store's transitions never move")

    def set_array_at_key(
        self, seq: np.ndarray, key: str, index: Any = None, default_value: float | None = None
    ) -> None:
        """Tianshou's ``set_array_at_key`` for the slot arrays; obs and obs_next live in the stores.

        Args:
            seq: the values.
            key: a slot array's key.
            index: the slots (None: all).
            default_value: Tianshou's fill for slots ``seq`` does not cover.

        Raises:
            ValueError: ``key`` is obs or obs_next, where a stored frame never changes.
        """
        if key in FRAME_KEYS:
            raise ValueError(f"{key} lives in the stores, where a stored frame never changes; it cannot be set")
        super().set_array_at_key(seq, key, index, default_value)
        self._frames.values_changed(self, np.arange(self.maxsize)[index if index is not None else slice(None)])

    def set_batch(self, batch: Batch) -> None:
        """Tianshou's ``set_batch`` for the slot arrays only.

        Args:
            batch: the slot arrays, without obs and obs_next.

        Raises:
            ValueError: ``batch`` holds obs or obs_next, which live in the stores.
        """
        found = [key for key in FRAME_KEYS if key in batch.get_keys()]
        if found:
            raise ValueError(f"set_batch takes the slot arrays only; {found} live in the stores")
        super().set_batch(batch)
        self._frames.values_changed(self, np.arange(self.maxsize))

    # -- closing, pickles and HDF5 ---------------------------------------------------------------

    def flush(self) -> None:
        """Commit every store (what was added survives a crash from now on)."""
        self._frames.stores.flush()

    def close(self) -> None:
        """Commit and close the stores (another buffer may then load them to append)."""
        self._frames.stores.close()

    def __getstate__(self) -> dict[str, Any]:
        return persistence.state_of(self)

    def __setstate__(self, state: dict[str, Any]) -> None:
        persistence.set_state(self, state)

    def save_hdf5(self, path: str, compression: str | None = None) -> None:
        """Tianshou's slot arrays into an HDF5 file at ``path``, with where the stores are.

        The frames stay in the stores: ``load_hdf5`` reopens them.

        Args:
            path: the HDF5 file to write.
            compression: h5py's compression filter for the slot arrays (None: none).
        """
        persistence.save_hdf5(self, path, compression)

    @classmethod
    def load_hdf5(cls, path: str, device: str | None = None) -> Any:
        """A buffer from ``save_hdf5``'s file, its stores reopened read-only until its first add.

        Args:
            path: the file ``save_hdf5`` wrote.
            device: Tianshou's, where its arrays go.

        Returns:
            The buffer.

        Raises:
            ValueError: the file holds no mmreplay frames (another buffer class saved it), or a store
                changed since.
        """
        return persistence.load_hdf5(cls, path, device)

