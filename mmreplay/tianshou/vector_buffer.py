"""``MmreplayVectorReplayBuffer``: Tianshou's ``VectorReplayBuffer`` with its frames in mmreplay stores."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from tianshou.data import Batch, VectorReplayBuffer

from mmreplay.tianshou.buffer_frames import BufferFrames
from mmreplay.tianshou.construction import build_frames, check_tianshou_options, parse_sizes
from mmreplay.tianshou.store_slots import StoreSlots


class MmreplayVectorReplayBuffer(StoreSlots, VectorReplayBuffer):
    """A ``VectorReplayBuffer`` of ``buffer_num`` sub-buffers whose observations live in stores on disk.

    What a Tianshou user sees is Tianshou's: ``add``, ``sample``, ``sample_indices``, ``buffer[indices]``,
    ``prev``, ``next``, ``unfinished_index``, ``get_buffer_indices`` and the slot arrays (``buffer.done``,
    ``rew``, ``terminated``, ``truncated``, ``act``, ``info``) behave and sample as in Tianshou, seed for
    seed; ``Collector`` takes it for any number of envs, since it is a ``ReplayBufferManager``. The
    departures, each with its reason:

    * obs and obs_next are kept in one store per sub-buffer (``path/env-000``, ...), each frame once and
      lz4-compressed, and rebuilt when read: an Atari frame stack costs bytes, not 28 KB twice.
    * obs_next is the observation the env returned at every slot, the final one at an episode's end
      included; so Tianshou's memory options (``ignore_obs_next``, ``save_only_last_obs``, ``stack_num``
      above 1), which return wrong ones there, are refused. Frame stacks come from the env
      (``FrameStackObservation``): ``stack_size`` is their depth (1: each obs is one array).
    * ``hasnull`` is one comparison (a count kept at every write), not a rebuild of the whole buffer.
    * obs and obs_next are not in the slot arrays (``buffer.obs`` does not exist); ``set_batch`` takes
      the other keys only.
    * eviction is Tianshou's, per sub-buffer: each store's capacity is the sub-buffer's size, so a store
      drops a transition at the add that overwrites its slot, and every slot's transition is stored.

    Args:
        total_size: the slots of all sub-buffers together; each has ``ceil(total_size / buffer_num)``.
        buffer_num: the sub-buffers, one per env.
        path: the directory of the stores (created; the stores are made at the first add).
        stack_size: frames per obs when the env hands over frame stacks (an obs of shape
            ``(stack_size, *frame_shape)``); 1 for obs of any other shape.
        frame_encoding: ``ReplayStore.create``'s (None: its default).
        if_exists: ``"error"`` refuses a ``path`` that holds anything; ``"replace"`` removes the stores
            an earlier buffer left there.
        commit_interval_s: how often the stores commit by themselves (``ReplayStore.create``'s).
        **kwargs: Tianshou's (``sample_avail``, ``random_seed``); ``stack_num`` must be 1.

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
        super().__init__(total_size, buffer_num, **kwargs)
        self._frames: BufferFrames = frames

    # -- what the stores change ------------------------------------------------------------------

    def add(
        self, batch: Batch, buffer_ids: np.ndarray | list[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Tianshou's ``add``, checked before anything is written; the frames go to the stores.

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
        return self._frames.add(self, batch, buffer_ids)

    def __getitem__(self, index: Any) -> Batch:
        return self._frames.batch(self, self._frames.resolve(self, index))
