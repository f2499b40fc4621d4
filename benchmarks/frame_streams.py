"""Where the benchmarks get their real Atari frame streams: recorded once with ALE, or from ``--data-dir``.

Every benchmark replays the first frames of a game's 20,000-frame stream (pong, breakout or mspacman;
the layout is in scripts/atari_frames.py). By default the stream comes from atari_frames' cache, recorded
with ALE the first time it is asked for (about 10 s a game on one core; ``python scripts/atari_frames.py
--frames 20000`` records all three ahead). ``--data-dir DIR`` reads ``DIR/atari_<game>.npz`` instead, a
file of the same layout, such as one of an earlier recording kept elsewhere.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1] / "scripts"))
import atari_frames  # noqa: E402

FRAMES = atari_frames.BENCHMARK_FRAMES


def stream_path(game: str, data_dir: Path | None = None) -> Path:
    """The npz file of ``game``'s stream: ``data_dir``'s, else the recorded one (recording it if needed)."""
    if data_dir is not None:
        path = data_dir / f"atari_{game}.npz"
        if not path.is_file():
            sys.exit(f"no frame stream at {path}; leave out --data-dir to record one with ALE")
        return path
    try:
        return atari_frames.stream_path(game, FRAMES)
    except ModuleNotFoundError as error:
        sys.exit(str(error))


def add_data_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help="read atari_<game>.npz from this directory instead of "
                        "the streams recorded with ALE (scripts/atari_frames.py)")  # fmt: skip


def data_dir_arguments(data_dir: Path | None) -> list[str]:
    """``--data-dir`` as a worker subprocess's command line takes it (nothing when it was not given)."""
    return [] if data_dir is None else ["--data-dir", str(data_dir)]
