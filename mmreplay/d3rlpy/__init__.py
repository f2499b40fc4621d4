"""d3rlpy: ``MmreplayReplayBuffer``, a d3rlpy replay buffer whose transitions live in a ``ReplayStore``.

``pip install 'mmreplay[d3rlpy]'`` (d3rlpy 2.8.1 pins gymnasium 1.0.0: give it an environment of its
own). See ``replay_buffer`` (the buffer), ``layout`` (frames and actions as d3rlpy shapes them),
``transition_index`` (which stored transitions d3rlpy counts), ``episode_views`` (episodes as lazy
d3rlpy episodes), ``minibatches`` (d3rlpy's records), ``pickers`` (its picker and slicer), ``writing``
(episodes and online steps into a store) and ``opening`` (the stores behind a buffer). d3rlpy is
imported by this package only.
"""

from mmreplay.extras import require

require("mmreplay.d3rlpy", extra="d3rlpy", modules=("d3rlpy",))

from mmreplay.d3rlpy.replay_buffer import MmreplayReplayBuffer  # noqa: E402  (after the check that names the extra)

__all__ = ["MmreplayReplayBuffer"]
