"""Tianshou replay buffers whose frames live in mmreplay stores (the ``tianshou`` extra).

``MmreplayVectorReplayBuffer`` and ``MmreplayPrioritizedVectorReplayBuffer`` are Tianshou's
``VectorReplayBuffer`` and ``PrioritizedVectorReplayBuffer`` with obs and obs_next kept in one store per
sub-buffer (``frame_stores``), Tianshou's slot arrays and bookkeeping left as Tianshou keeps them
(``buffer_frames``), a ``Collector``'s rows checked before the first write (``transitions``), ``hasnull``
kept as a count (``null_slots``), the constructors' checks (``construction``) and pickles and HDF5 files
(``persistence``). The package uses only mmreplay's public names.
"""

from mmreplay.extras import require

require("mmreplay.tianshou", extra="tianshou", modules=("tianshou", "torch"))

from mmreplay.tianshou.prioritized_buffer import MmreplayPrioritizedVectorReplayBuffer  # noqa: E402
from mmreplay.tianshou.vector_buffer import MmreplayVectorReplayBuffer  # noqa: E402

__all__ = ["MmreplayPrioritizedVectorReplayBuffer", "MmreplayVectorReplayBuffer"]
