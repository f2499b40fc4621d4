"""Stable-Baselines3: ``MmreplayBuffer`` (SB3's ``ReplayBuffer``), ``MmreplayDictBuffer`` (its
``DictReplayBuffer``, for ``MultiInputPolicy``) and ``MmreplayHerBuffer`` (its ``HerReplayBuffer``),
each backed by a store.

``buffer``, ``dict_buffer`` and ``her_buffer`` are the buffers; ``buffer_store`` maps SB3's positions
onto the store and keeps it (``if_exists``, pickles, the writer lock); ``views`` gives SB3's arrays as
views of the store; ``observations`` and ``dict_layout`` map observation spaces onto frames and fields;
``transitions`` maps SB3's ``add`` arguments. Stable-Baselines3 and torch are imported by this package
only: ``pip install 'mmreplay[sb3]'``.
"""

from mmreplay.extras import require

require("mmreplay.sb3", extra="sb3", modules=("stable_baselines3", "torch", "gymnasium"))

from mmreplay.sb3.buffer import MmreplayBuffer  # noqa: E402  (after the check that names the extra)
from mmreplay.sb3.dict_buffer import MmreplayDictBuffer  # noqa: E402
from mmreplay.sb3.her_buffer import MmreplayHerBuffer  # noqa: E402

__all__ = ["MmreplayBuffer", "MmreplayDictBuffer", "MmreplayHerBuffer"]
