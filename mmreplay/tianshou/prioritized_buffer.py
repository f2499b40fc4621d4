"""``MmreplayPrioritizedVectorReplayBuffer``: Tianshou's ``PrioritizedVectorReplayBuffer`` with its frames
in mmreplay stores; the priorities stay in Tianshou's segment tree."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from tianshou.data import Batch, PrioritizedVectorReplayBuffer

from mmreplay.tianshou.buffer_frames import BufferFrames
from mmreplay.tianshou.construction import build_frames, check_tianshou_options, parse_sizes
from mmreplay.tianshou.store_slots import StoreSlots


class MmreplayPrioritizedVectorReplayBuffer(StoreSlots, PrioritizedVectorReplayBuffer):
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
