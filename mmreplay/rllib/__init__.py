"""mmreplay for RLlib (new API stack): ``MmreplayEpisodeReplayBuffer``, a replay buffer for DQN that keeps
Atari frames once, lz4-compressed, on disk. ``pip install 'mmreplay[rllib]'``; see ``episode_buffer``."""

from mmreplay.extras import require

require("mmreplay.rllib", extra="rllib", modules=("ray", "torch"))

from mmreplay.rllib.episode_buffer import MmreplayEpisodeReplayBuffer  # noqa: E402  (after the check that names the extra)

__all__ = ["MmreplayEpisodeReplayBuffer"]
