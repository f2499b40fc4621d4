"""Atari-like frames made on the spot, for tests that must run where ALE is not (the GPU box): a fixed
background of bands, a few sprites that move a pixel or two per frame, and sparse noise. They compress
with lz4 about as much as Breakout's (x10 to x20), so their blocks hold real matches and literals."""

from __future__ import annotations

import numpy as np


def sprite_frames(count: int, shape: tuple[int, int] = (84, 84), *, seed: int = 0) -> np.ndarray:
    """(count, *shape) uint8 frames of one moving scene."""
    rng = np.random.default_rng(seed)
    height, width = shape
    background = np.repeat((np.arange(height) // 7 * 23 % 97).astype(np.uint8)[:, None], width, axis=1)
    sprites = rng.integers(0, [height - 8, width - 8], size=(5, 2))
    velocity = rng.integers(-2, 3, size=(5, 2))
    frames = np.empty((count, height, width), np.uint8)
    for t in range(count):
        frame = background.copy()
        sprites = (sprites + velocity) % [height - 8, width - 8]
        for k, (y, x) in enumerate(sprites):
            frame[y : y + 6 + k % 3, x : x + 4 + k] = 200 + 10 * k
        noise = rng.integers(0, height * width, 12)
        frame.flat[noise] = rng.integers(0, 256, 12, dtype=np.uint8)
        frames[t] = frame
    return frames
