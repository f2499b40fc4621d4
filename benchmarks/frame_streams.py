"""Where the benchmarks get their real Atari frame streams: recorded once with ALE, or from ``--data-dir``.

Every benchmark replays the first frames of a game's 20,000-frame stream (pong, breakout, mspacman or
seaquest; the layout is in ``mmreplay/testing/atari_frames.py``). By default the stream comes from that
module's cache, recorded with ALE the first time it is asked for (``python -m mmreplay.testing.atari_frames
--frames 20000`` records them all ahead). ``--data-dir DIR`` reads ``DIR/atari_<game>.npz`` instead, a file
of the same layout, such as one of an earlier recording kept elsewhere. The recorder is imported only when
a stream is recorded or looked up in the cache, so a benchmark run with another tree's package first on
the path (an A/B run against a tree older than ``mmreplay.testing``) works with ``--data-dir``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def stream_path(game: str, data_dir: Path | None = None) -> Path:
    """The npz file of ``game``'s stream: ``data_dir``'s, else the recorded one (recording it if needed)."""
    if data_dir is not None:
        path = data_dir / f"atari_{game}.npz"
        if not path.is_file():
            sys.exit(f"no frame stream at {path}; leave out --data-dir to record one with ALE")
        return path
    from mmreplay.testing import atari_frames

    try:
        return atari_frames.stream_path(game, atari_frames.BENCHMARK_FRAMES)
    except ModuleNotFoundError as error:
        sys.exit(str(error))


def add_data_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help="read atari_<game>.npz from this directory instead of "
                        "the streams recorded with ALE (mmreplay.testing.atari_frames)")  # fmt: skip


def data_dir_arguments(data_dir: Path | None) -> list[str]:
    """``--data-dir`` as a worker subprocess's command line takes it (nothing when it was not given)."""
    return [] if data_dir is None else ["--data-dir", str(data_dir)]
