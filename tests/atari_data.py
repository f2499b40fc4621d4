"""The real Atari frame streams of ../shared/data (see its README), as the tests read them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def load_stream(game: str, keys: tuple[str, ...], frames: int) -> dict[str, np.ndarray]:
    """The first ``frames`` entries of each of ``keys`` of a game's stream, as fresh arrays.

    Skips the calling test when the shared data directory is absent (a checkout without ../shared).
    """
    path = DATA_DIR / f"atari_{game}.npz"
    if not path.is_file():
        pytest.skip(f"real Atari frames are absent: {path} does not exist (see the project README)")
    with np.load(path) as data:
        return {key: np.array(data[key][:frames]) for key in keys}
