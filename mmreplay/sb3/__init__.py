"""Stable-Baselines3: ``MmreplayBuffer``, an SB3 ``ReplayBuffer`` backed by a store.

``buffer`` is the buffer; ``observations`` maps observation spaces onto frames and SB3's ``dones`` onto
the store. Stable-Baselines3 and torch are imported by this package only.
"""

from mmreplay.sb3.buffer import MmreplayBuffer

__all__ = ["MmreplayBuffer"]
