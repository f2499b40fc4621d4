"""Real Atari frame streams for the tests and benchmarks, recorded with ALE once and cached on disk.

A *frame stream* is every observation a uniform random policy saw, in order, with what it did:

- ``frames`` (N, 84, 84) uint8: an episode's reset observation, one frame per agent step including the
  episode's final observation, then the next episode's reset frame, ...
- ``episode_start`` (N,) bool: True where ``frames[t]`` is a reset observation
- ``action`` (N,) int16: the action taken in ``frames[t]``; -1 where none was taken (an episode's final
  frame, the stream's last frame)
- ``reward`` (N,) float32: the reward for that action (0 where action == -1)
- ``terminated``, ``truncated`` (N,) bool: the step from ``frames[t]`` to ``frames[t+1]`` ended the episode,
  or hit a time limit
- ``meta`` 0-d str: JSON of the game, env id, seed, wrapper settings and package versions

Transition t is ``(frames[t], action[t], reward[t], frames[t+1], terminated[t], truncated[t])`` for every
t with ``action[t] >= 0``. The env is ``ALE/<Game>-v5`` made with ``frameskip=1`` and sticky actions
(0.25), wrapped by gymnasium's ``AtariPreprocessing`` (frame_skip=4, max-pool of the last two raw frames,
84x84 grayscale, up to 30 no-op starts), seeded once; the seeds make these streams bit-identical to the
``atari_<game>.npz`` files the project recorded first (ale-py 0.12.1, gymnasium 1.4.0). Pong, Breakout
and MsPacman compress very differently with lz4, which is why all three exist; Seaquest (seed 2) joined
them for the GPU-feed benchmark (``benchmarks/bench_gpu_feed.py``).

A stream is recorded once per game, frame count and versions of the packages that produce its pixels,
and kept as ``atari_<game>_<N>frames_seed<seed>_<versions digest>.npz`` in the cache directory:
``$MMREPLAY_FRAMES_DIR``, else ``$XDG_CACHE_HOME/mmreplay/frames``, else ``~/.cache/mmreplay/frames``.
Files are written to a temporary name and renamed into place, so a killed or concurrent run never leaves
half a file. Recording needs ale-py, gymnasium and opencv, the ``demo`` extra (``bash scripts/test.sh``
installs them); they are imported only when a stream is recorded, so reading a cached one needs numpy alone.

    python -m mmreplay.testing.atari_frames                  # pong, breakout, mspacman, seaquest: 4,000 frames each
    python -m mmreplay.testing.atari_frames --frames 20000   # what the benchmarks replay
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["BENCHMARK_FRAMES", "GAMES", "cache_dir", "load", "record", "stream_path", "versions"]

# name, seed; Seaquest for the GPU-feed benchmark, recorded the same way
GAMES = {"pong": ("Pong", 0), "breakout": ("Breakout", 1), "mspacman": ("MsPacman", 4), "seaquest": ("Seaquest", 2)}
MAKE_KWARGS: dict[str, Any] = {"frameskip": 1, "repeat_action_probability": 0.25}
WRAPPER_KWARGS: dict[str, Any] = {"noop_max": 30, "frame_skip": 4, "screen_size": 84, "terminal_on_life_loss": False,
                  "grayscale_obs": True, "scale_obs": False}  # fmt: skip
BENCHMARK_FRAMES = 20_000
# Shorter streams are cut from one of this length, so the tests' different lengths share one file a game.
SHORTEST_RECORDING = 4_000
RECORDER_VERSION = 1  # bump when the recording loop changes what it writes
INSTALL_HINT = ("install the demo extra: pip install 'mmreplay[demo]' (in a clone: pip install -e '.[demo]', "
                "or run `bash scripts/test.sh`)")  # fmt: skip
# The distributions whose code decides the pixels and actions (opencv under any of its names).
PRODUCERS = {"ale_py": ("ale-py",), "gymnasium": ("gymnasium",), "numpy": ("numpy",),
             "opencv": ("opencv-python-headless", "opencv-python", "opencv-contrib-python")}  # fmt: skip
Stream = dict[str, np.ndarray[Any, Any]]


def cache_dir() -> Path:
    """The directory the streams are kept in, as the environment names it.

    Returns:
        ``$MMREPLAY_FRAMES_DIR`` if set, else ``$XDG_CACHE_HOME/mmreplay/frames``, else
        ``~/.cache/mmreplay/frames``.
    """
    if os.environ.get("MMREPLAY_FRAMES_DIR"):
        return Path(os.environ["MMREPLAY_FRAMES_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mmreplay" / "frames"


def versions() -> dict[str, str]:
    """The installed versions of the packages that produce a stream's pixels and actions.

    Returns:
        The version of ale-py, gymnasium, numpy and opencv, keyed ``ale_py``, ``gymnasium``, ``numpy`` and
        ``opencv``.

    Raises:
        ModuleNotFoundError: One of them is not installed; the message names the extra that installs it.
    """
    found, missing = {}, []
    for name, distributions in PRODUCERS.items():
        for distribution in distributions:
            try:
                found[name] = metadata.version(distribution)
                break
            except metadata.PackageNotFoundError:
                continue
        else:
            missing.append(distributions[0])
    if missing:
        raise ModuleNotFoundError(f"recording real Atari frames needs {', '.join(missing)}, which is not "
                                  f"installed: {INSTALL_HINT}")  # fmt: skip
    return found


def stream_path(game: str, frames: int, *, directory: Path | None = None) -> Path:
    """The cached file that holds exactly the first ``frames`` frames of ``game``'s stream.

    Reuses the file if it exists, else cuts it from a longer cached stream, else records it with ALE.

    Args:
        game: One of ``GAMES``: ``"pong"``, ``"breakout"``, ``"mspacman"`` or ``"seaquest"``.
        frames: How many frames the stream holds, at least 2.
        directory: The cache directory; ``None`` for :func:`cache_dir`'s.

    Returns:
        The path of the ``.npz`` file, which exists when this returns.

    Raises:
        ValueError: ``game`` is not one of ``GAMES``, or ``frames`` is below 2.
        TypeError: ``frames`` is not an int.
        ModuleNotFoundError: The stream must be recorded and ALE is not installed.
    """
    _check(game, frames)
    directory = cache_dir() if directory is None else directory
    title, seed = GAMES[game]
    digest = hashlib.sha256(json.dumps([RECORDER_VERSION, versions()], sort_keys=True).encode()).hexdigest()[:12]
    path = directory / f"atari_{game}_{frames}frames_seed{seed}_{digest}.npz"
    if path.is_file():
        return path
    longer = sorted(directory.glob(f"atari_{game}_*frames_seed{seed}_{digest}.npz"), key=_frame_count)
    longer = [p for p in longer if _frame_count(p) > frames]
    if longer:
        with np.load(longer[0]) as data:
            stream = _first(dict(data), frames, game)
    else:
        print(f"mmreplay: recording {frames:,} real {title} frames (ALE, seed {seed}) into {path} ...",
              end="", file=sys.stderr, flush=True)  # fmt: skip
        started = time.perf_counter()
        stream = record(game, frames)
        print(f" {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    _save_atomically(path, stream)
    return path


def load(game: str, frames: int, *, directory: Path | None = None) -> Stream:
    """The first ``frames`` frames of ``game``'s stream, read from the cache (recorded there first if needed).

    Args:
        game: One of ``GAMES``.
        frames: How many frames to return, at least 2.
        directory: The cache directory; ``None`` for :func:`cache_dir`'s.

    Returns:
        Fresh arrays keyed as the module docstring says, equal to what ``record(game, frames)`` returns.

    Raises:
        ValueError: ``game`` is not one of ``GAMES``, or ``frames`` is below 2.
        TypeError: ``frames`` is not an int.
        ModuleNotFoundError: The stream must be recorded and ALE is not installed.
    """
    _check(game, frames)
    path = stream_path(game, max(frames, SHORTEST_RECORDING), directory=directory)
    with np.load(path) as data:
        return _first(dict(data), frames, game)


def record(game: str, frames: int) -> Stream:
    """Play ``game`` with a seeded uniform random policy until ``frames`` observations were seen.

    Args:
        game: One of ``GAMES``.
        frames: How many observations to record, at least 2.

    Returns:
        The stream's arrays, keyed as the module docstring says.

    Raises:
        ValueError: ``game`` is not one of ``GAMES``, or ``frames`` is below 2.
        TypeError: ``frames`` is not an int.
        ModuleNotFoundError: ale-py, gymnasium or opencv is not installed; the message names the extra.
    """
    _check(game, frames)
    try:
        import ale_py
        import gymnasium
        from gymnasium.wrappers import AtariPreprocessing
    except ImportError as error:
        raise ModuleNotFoundError(f"recording real Atari frames needs {error.name}: {INSTALL_HINT}") from error
    gymnasium.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner: the progress line stays one line
    title, seed = GAMES[game]
    env = AtariPreprocessing(gymnasium.make(f"ALE/{title}-v5", **MAKE_KWARGS), **WRAPPER_KWARGS)
    out = {"frames": np.empty((frames, 84, 84), np.uint8), "episode_start": np.zeros(frames, bool),
           "action": np.full(frames, -1, np.int16), "reward": np.zeros(frames, np.float32),
           "terminated": np.zeros(frames, bool), "truncated": np.zeros(frames, bool)}  # fmt: skip
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    out["frames"][0], out["episode_start"][0] = obs, True
    t = 0
    while t + 1 < frames:
        action = env.action_space.sample()
        obs, reward, terminated, truncated, _ = env.step(action)
        out["action"][t], out["reward"][t] = action, reward
        out["terminated"][t], out["truncated"][t] = terminated, truncated
        t += 1
        out["frames"][t] = obs
        if (terminated or truncated) and t + 1 < frames:
            obs, _ = env.reset()
            t += 1
            out["frames"][t], out["episode_start"][t] = obs, True
    env.close()
    out["meta"] = _meta(game, out)
    return out


def _first(stream: Stream, frames: int, game: str) -> Stream:
    """The stream of the first ``frames`` frames: as recorded, its last frame has no action."""
    out = {key: np.array(value[:frames]) for key, value in stream.items() if key != "meta"}
    out["action"][-1], out["reward"][-1], out["terminated"][-1], out["truncated"][-1] = -1, 0, False, False
    out["meta"] = _meta(game, out)
    return out


def _meta(game: str, stream: Stream) -> np.ndarray[Any, Any]:
    """What a stream is and how it was made, as the 0-d JSON string stored under ``meta``."""
    title, seed = GAMES[game]
    return np.array(json.dumps({
        "game": title, "env_id": f"ALE/{title}-v5", "make_kwargs": MAKE_KWARGS,
        "wrapper": "gymnasium.wrappers.AtariPreprocessing", "wrapper_kwargs": WRAPPER_KWARGS,
        "policy": "uniform random (env.action_space.sample)", "seed": seed, "frames": len(stream["frames"]),
        "complete_episodes": int(stream["terminated"].sum() + stream["truncated"].sum()),
        "versions": versions(), "recorder_version": RECORDER_VERSION,
        "layout": "frame stream; transition t = (frames[t], action[t], reward[t], frames[t+1], terminated[t], "
                  "truncated[t]) for every t with action[t] >= 0",
    }))  # fmt: skip


def _save_atomically(path: Path, stream: Stream) -> None:
    """Write to a temporary file beside ``path``, then rename it into place (readers see all or nothing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(temporary, "xb") as handle:  # the umask's permissions, unlike tempfile's 0600
            # numpy's stubs read the keyword arrays as allow_pickle's bool
            np.savez_compressed(handle, **stream)  # type: ignore[arg-type]
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _frame_count(path: Path) -> int:
    return int(path.name.split("_")[2].removesuffix("frames"))


def _check(game: str, frames: int) -> None:
    if game not in GAMES:
        raise ValueError(f"game is {game!r}; expected one of {sorted(GAMES)}")
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)):
        raise TypeError(f"frames is a {type(frames).__name__}; expected an int")
    if frames < 2:
        raise ValueError(f"frames is {frames}; expected at least 2 (one transition)")


EXAMPLES = """examples:
  python -m mmreplay.testing.atari_frames                          # every game, 4,000 frames: what the tests read
  python -m mmreplay.testing.atari_frames --frames 20000           # what the benchmarks replay
  python -m mmreplay.testing.atari_frames --games pong --json      # one JSON object on stdout, errors included
"""


def main(argv: list[str] | None = None) -> int:
    """Record (or find in the cache) each game's stream and print where it is.

    Args:
        argv: The command line's arguments; ``None`` for ``sys.argv[1:]``.

    Returns:
        The exit status: 0 when every stream is in the cache, 1 when one could not be recorded or was refused.
    """
    parser = argparse.ArgumentParser(prog="python -m mmreplay.testing.atari_frames",
                                     description=(__doc__ or "").split("\n\n")[0], epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--games", default=",".join(GAMES), help=f"comma-separated, of {','.join(GAMES)}")
    parser.add_argument("--frames", type=int, default=SHORTEST_RECORDING, help="frames per game")
    parser.add_argument("--cache-dir", type=Path, help="instead of the default cache directory (see above)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout, errors included")
    args = parser.parse_args(argv)
    streams: list[dict[str, object]] = []
    for game in args.games.split(","):
        started = time.perf_counter()
        try:
            path = stream_path(game, args.frames, directory=args.cache_dir)
        except (ModuleNotFoundError, ValueError, TypeError) as error:
            if args.json:
                print(json.dumps({"ok": False, "error": str(error), "game": game, "streams": streams}))
            print(f"error: {error}", file=sys.stderr)
            return 1
        seconds = time.perf_counter() - started
        streams.append({"game": game, "frames": args.frames, "path": str(path), "seconds": round(seconds, 3)})
        if not args.json:
            print(f"{game}: {path} ({seconds:.1f} s)")
    if args.json:
        print(json.dumps({"ok": True, "streams": streams}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
