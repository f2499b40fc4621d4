"""The real Atari frame streams the tests read, recorded with ALE by ``mmreplay.testing.atari_frames`` and cached.

The first run records 4,000 frames of each game it needs (a few seconds a game) into the cache that
``mmreplay.testing.atari_frames.cache_dir`` names; later runs read the files. Without ALE the tests that
need real frames fail, naming the command that installs it: they carry the README's main promises (real
frames bit-exact, corruption detected, nothing committed lost to a crash), so a run that cannot check them
must not pass.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from mmreplay.testing import atari_frames


def load_stream(game: str, keys: tuple[str, ...], frames: int) -> dict[str, np.ndarray]:
    """The first ``frames`` entries of each of ``keys`` of a game's stream, as fresh arrays.

    Fails the calling test, saying how to install ALE, when the stream is not cached and cannot be recorded.
    """
    stream = _stream(game, frames)
    return {key: stream[key].copy() for key in keys}


@functools.cache
def _stream(game: str, frames: int) -> dict[str, np.ndarray]:
    try:
        return atari_frames.load(game, frames)
    except ModuleNotFoundError as error:
        missing = str(error)
    pytest.fail(missing, pytrace=False)  # outside the except: the message alone, no chained traceback
