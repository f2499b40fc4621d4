"""``MmreplayPrioritizedVectorReplayBuffer``: Tianshou's ``PrioritizedVectorReplayBuffer`` with its frames
in mmreplay stores; the priorities stay in Tianshou's segment tree."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from tianshou.data import Batch, PrioritizedVectorReplayBuffer

from mmreplay import ReplayStore
from mmreplay.tianshou import persistence
from mmreplay.tianshou.buffer_frames import FRAME_KEYS, BufferFrames
from mmreplay.tianshou.construction import build_frames, check_tianshou_options, parse_sizes


class MmreplayPrioritizedVectorReplayBuffer(PrioritizedVectorReplayBuffer):
    """A ``PrioritizedVectorReplayBuffer`` whose observations live in stores on disk.

    Everything ``MmreplayVectorReplayBuffer`` says holds here; the priorities are Tianshou's own (its
    segment tree, ``update_weight``, ``set_beta``, ``weight`` in every batch), so a prioritized run
    samples and weighs as Tianshou's does.

    Args:
        total_size: the slots of all sub-buffers together; each has ``ceil(total_size / buffer_num)``.
        buffer_num: the sub-buffers, one per env.
        alpha: the priority exponent (Tianshou's).
        beta: the importance-weight exponent (Tianshou's).
        path: the directory of the stores (created; the stores are made at the first add).
        stack_size: frames per obs when the env hands over frame stacks; 1 for obs of any other shape.
        frame_encoding: ``ReplayStore.create``'s (None: its default).
        if_exists: ``"error"`` or ``"replace"``, as ``MmreplayVectorReplayBuffer``'s.
        commit_interval_s: how often the stores commit by themselves (``ReplayStore.create``'s).
        **kwargs: Tianshou's (``weight_norm``, ``sample_avail``, ``random_seed``); ``stack_num`` must be 1.

    Raises:
        TypeError: ``path`` is no path; a size is no int.
        ValueError: a size below 1, Tianshou's memory options, an unknown ``if_exists``.
        StoreExistsError: ``path`` holds files and ``if_exists="error"``.
    """

    def __init__(
        self,
        total_size: int,
        buffer_num: int,
        *,
        alpha: float,
        beta: float,
        path: str | os.PathLike[str],
        stack_size: int = 1,
        frame_encoding: str | None = None,
        if_exists: str = "error",
        commit_interval_s: float | None = 5.0,
        **kwargs: Any,
    ) -> None:
        total_size, buffer_num = parse_sizes(total_size, buffer_num)
        check_tianshou_options(type(self).__name__, kwargs)
        size = -(-total_size // buffer_num)
        frames = build_frames(
            path, maxsize=size * buffer_num, buffer_num=buffer_num, size=size, stack_size=stack_size,
            frame_encoding=frame_encoding, if_exists=if_exists, commit_interval_s=commit_interval_s,
        )
        super().__init__(total_size, buffer_num, alpha=alpha, beta=beta, **kwargs)
        self._frames: BufferFrames = frames

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

        Returns:
            One store (or None) per sub-buffer.
        """
        return list(self._frames.stores.stores)

    def add(
        self, batch: Batch, buffer_ids: np.ndarray | list[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Tianshou's ``add``, the new slots at the highest priority so far; the frames go to the stores.

        Args:
            batch: Tianshou's rows, one per buffer id: obs, act, rew, terminated, truncated, obs_next,
                info.
            buffer_ids: the sub-buffers the rows go to (None: every sub-buffer, in order).

        Returns:
            (slots, episode returns, episode lengths, episode start slots), one per row, as Tianshou's.

        Raises:
            TypeError: an obs that is no array (a ``Dict`` space's ``Batch``), or of a dtype no store keeps.
            ValueError: a shape that differs from the first add's, a ``buffer_ids`` entry out of range, a
                reward that is not one finite number per row, or a stacked ``obs_next`` that is not
                ``obs`` shifted by one frame in a transition that did not end its episode.
        """
        slots, returns, lengths, starts = self._frames.add(self, batch, buffer_ids)
        self.init_weight(slots)
        return slots, returns, lengths, starts

    def __getitem__(self, index: Any) -> Batch:
        indices = self._frames.resolve(self, index)
        batch = self._frames.batch(self, indices)
        weight = self.get_weight(indices)
        batch.weight = weight / np.max(weight) if self._weight_norm else weight
        return batch

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

    def flush(self) -> None:
        """Commit every store."""
        self._frames.stores.flush()

    def close(self) -> None:
        """Commit and close the stores."""
        self._frames.stores.close()

    def __getstate__(self) -> dict[str, Any]:
        return persistence.state_of(self)

    def __setstate__(self, state: dict[str, Any]) -> None:
        persistence.set_state(self, state)

    def save_hdf5(self, path: str, compression: str | None = None) -> None:
        """Tianshou's slot arrays and priorities into an HDF5 file, with where the stores are.

        Args:
            path: the HDF5 file to write.
            compression: h5py's compression filter for the slot arrays (None: none).
        """
        persistence.save_hdf5(self, path, compression)

    @classmethod
    def load_hdf5(cls, path: str, device: str | None = None) -> MmreplayPrioritizedVectorReplayBuffer:
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
