"""Each env's episode in progress: what the next ``add`` compares its obs with, and where its frames are.

An env's episode continues only while it is *open* (its last transition neither terminated nor
truncated, and that transition is still stored) and the new obs equals the env's last next_obs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class EnvEpisode:
    """The newest next_obs stack of one env, as ``sample`` rebuilds it: pixels and frame steps."""

    stack_size: int
    open: bool = False
    last_step: int = -1  # transition step of the env's newest transition
    frames: deque[bytes] = field(init=False)
    frame_steps: deque[int] = field(init=False)

    def __post_init__(self) -> None:
        self.frames = deque(maxlen=self.stack_size)
        self.frame_steps = deque(maxlen=self.stack_size)

    def continues_with(self, obs_bytes: bytes, stacked: bool, oldest_stored_step: int) -> bool:
        """Whether an obs (one frame, or a whole stack) continues this env's episode."""
        if not self.open or self.last_step < oldest_stored_step:
            return False
        return obs_bytes == (b"".join(self.frames) if stacked else self.frames[-1])

    def start(self, frames: list[bytes], frame_steps: list[int]) -> None:
        """A new episode whose obs stack is these frames (padded by repeating the first one)."""
        padding = self.stack_size - len(frames)
        self.frames.extend([frames[0]] * padding + frames)
        self.frame_steps.extend([frame_steps[0]] * padding + frame_steps)

    def advance(self, frame: bytes, frame_step: int, *, step: int, ended: bool) -> None:
        """Record a transition of this env whose next_obs ends with ``frame``."""
        self.frames.append(frame)
        self.frame_steps.append(frame_step)
        self.last_step = step
        self.open = not ended
