"""mmreplay for RLlib (new API stack): ``MmreplayEpisodeReplayBuffer``, a replay buffer for DQN that keeps
Atari frames once, lz4-compressed, on disk. ``pip install 'mmreplay[rllib]'``; see ``episode_buffer``."""

from mmreplay.rllib.episode_buffer import MmreplayEpisodeReplayBuffer

__all__ = ["MmreplayEpisodeReplayBuffer"]
