"""The ``mmreplay`` command: inspect, check, draw, export and import stores (``python -m mmreplay`` too).

Each command calls the library; errors are printed as ``mmreplay: error: ...`` on stderr with exit
status 1 (2 for a wrong command line, as argparse does); ``verify`` exits 1 when it finds problems.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from mmreplay import __version__, extensions, format
from mmreplay.errors import CorruptStoreError, MmreplayError, StoreNotFoundError
from mmreplay.store import ReplayStore

CHUNK_STEPS = 1024

EXAMPLES = {
    "info": "example: mmreplay info pong.mmr --json",
    "episodes": "example: mmreplay episodes pong.mmr --env 0 --json",
    "show": "example: mmreplay show pong.mmr 3 -o episode3.gif   (or -o episode3.png for a contact sheet)",
    "verify": "example: mmreplay verify pong.mmr || echo 'pong.mmr is damaged'",
    "export": "example: mmreplay export pong.mmr pong.h5   |   mmreplay export pong.mmr ~/.minari/datasets/"
              "pong-v0 --layout minari",
    "import": "example: mmreplay import pong.h5 copy.mmr --capacity 2000000",
    "import-dopamine": "example: mmreplay import-dopamine dqn_replay/Pong/1/replay_logs pong.mmr --checkpoints 49 50",
}


class _PrintVersion(argparse.Action):
    """``--version``: argparse's own action would rewrap the line; this one prints it as it is."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"mmreplay {__version__}: {extensions.summary()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mmreplay", description="Inspect, check, draw, export and import mmreplay stores.",
        epilog="Run 'mmreplay COMMAND --help' for a command's options and an example.")
    parser.add_argument("--version", action=_PrintVersion,
                        help="print the version and whether compiled code is in use, then exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, description=help, epilog=EXAMPLES[name],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)

    info = command("info", "Show a store's layout and size: frame shape, capacity, transitions, episodes, "
                           "envs, bytes on disk, compression ratio, format version.")
    info.add_argument("store", help="the store's directory")
    info.add_argument("--json", action="store_true", help="print one JSON object")

    episodes = command("episodes", "List the stored episodes: id, env, first step, length, return, how it ended.")
    episodes.add_argument("store")
    episodes.add_argument("--env", type=int, help="only this env's episodes")
    episodes.add_argument("--json", action="store_true", help="print a JSON list")

    show = command("show", "Draw an episode's frames: a contact sheet (.png) or an animation (.gif). Needs Pillow "
                           "(pip install 'mmreplay[show]').")
    show.add_argument("store")
    show.add_argument("episode", type=int, help="the episode id (see 'mmreplay episodes')")
    show.add_argument("-o", "--output", required=True, help="out.png (contact sheet) or out.gif (animation)")
    show.add_argument("--columns", type=int, default=8, help="contact sheet columns (default: %(default)s)")
    show.add_argument("--max-frames", type=int, default=64,
                      help="contact sheet: at most this many frames, evenly spaced (default: %(default)s)")
    show.add_argument("--fps", type=float, default=30.0, help="animation frames per second (default: %(default)s)")

    verify = command("verify", "Decode every frame and check every transition and episode; exit status 1 and "
                               "a list of problems when something is wrong.")
    verify.add_argument("store")
    verify.add_argument("--json", action="store_true", help="print one JSON object")
    verify.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    export = command("export", "Export a store to HDF5: one file (--layout mmreplay) or a Minari dataset "
                               "directory (--layout minari).")
    export.add_argument("store")
    export.add_argument("output", help="the file (mmreplay) or dataset directory (minari) to create")
    export.add_argument("--layout", choices=("mmreplay", "minari"), default="mmreplay")
    export.add_argument("--dataset-id", help="Minari dataset id, [namespace/]name-vN (default: the output's name)")
    export.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    imp = command("import", "Create a store from an HDF5 file in the mmreplay layout or a Minari dataset.")
    imp.add_argument("input", help="an mmreplay HDF5 file, or a Minari dataset directory or main_data.hdf5")
    imp.add_argument("store", help="the store to create")
    imp.add_argument("--capacity", type=int, help="store capacity (default: the exporting store's)")
    imp.add_argument("--stack-size", type=int, help="frames per obs, for Minari datasets not made by mmreplay")
    imp.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    dop = command("import-dopamine", "Create a store from Dopamine replay checkpoints ($store$_observation_ckpt.N.gz "
                                     "and friends, the DQN Replay Dataset's format).")
    dop.add_argument("directory", help="the directory holding the checkpoint files")
    dop.add_argument("store", help="the store to create")
    dop.add_argument("--checkpoints", type=int, nargs="+", help="checkpoint numbers in written order (default: all)")
    dop.add_argument("--stack-size", type=int, default=4, help="frames per obs (default: %(default)s)")
    dop.add_argument("--capacity", type=int, help="store capacity (default: the slots read)")
    dop.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    handler = {"info": _info, "episodes": _episodes, "show": _show, "verify": _verify, "export": _export,
               "import": _import, "import-dopamine": _import_dopamine}[arguments.command]
    try:
        return handler(arguments)
    except BrokenPipeError:
        # The reader went away (``mmreplay episodes STORE | head``): stop quietly, as cat and ls do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (MmreplayError, OSError, ValueError, TypeError, IndexError, ImportError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1


def _print(arguments: argparse.Namespace, value: Any, text: str) -> None:
    print(json.dumps(value) if getattr(arguments, "json", False) else text)


def _info(arguments: argparse.Namespace) -> int:
    with ReplayStore.open(arguments.store, "r") as store:
        on_disk = store.bytes_on_disk()
        raw = len(store) * int(np.prod(store.frame_shape))  # one uncompressed frame per transition
        info = {
            "path": str(store.path), "format_version": format.FORMAT_VERSION, "frame_shape": list(store.frame_shape),
            "stack_size": store.stack_size, "capacity": store.capacity, "transitions": len(store),
            "transitions_added": store.transitions_added, "episodes": len(store.episodes()),
            "num_envs": store.num_envs, "action_shape": list(store.action_shape),
            "action_dtype": str(store.action_dtype), "frame_encoding": store.frame_encoding,
            "bytes_on_disk": on_disk,
            "compression_ratio": round(raw / on_disk, 2) if on_disk else None,
            "compiled_code": extensions.summary(),
        }
    width = max(len(key) for key in info)
    _print(arguments, info, "\n".join(f"{key.replace('_', ' '):<{width}}  {value}" for key, value in info.items()))
    return 0


def _episodes(arguments: argparse.Namespace) -> int:
    with ReplayStore.open(arguments.store, "r") as store:
        listed = [e for e in store.episodes() if arguments.env is None or e.env_index == arguments.env]
    rows = [{"id": e.episode_id, "env": e.env_index, "first_step": e.first_step, "length": e.length,
             "return": e.total_reward, "ended_by": e.ended_by, "complete": e.complete} for e in listed]
    lines = [f"{'id':>6} {'env':>4} {'first step':>12} {'length':>8} {'return':>10}  ended by"]
    lines += [f"{r['id']:>6} {r['env']:>4} {r['first_step']:>12} {r['length']:>8} {r['return']:>10g}  "
              f"{r['ended_by']}{'' if r['complete'] else ' (start evicted)'}" for r in rows]
    _print(arguments, rows, "\n".join(lines))
    return 0


def _episode_frames(store: ReplayStore, episode_id: int) -> np.ndarray:
    """The episode's observations as single frames: its first obs's newest frame, then each next frame."""
    episodes = store.episodes()
    if not 0 <= episode_id < len(episodes):
        held = f"ids 0..{len(episodes) - 1}" if episodes else "none"
        raise IndexError(f"episode {episode_id} does not exist; the store's episodes: {held}")
    steps = episodes[episode_id].steps
    frames = [store.read(steps[:1]).obs[0, -1:]]
    for start in range(0, len(steps), CHUNK_STEPS):
        frames.append(store.read(steps[start : start + CHUNK_STEPS]).next_obs[:, -1])
    return np.concatenate(frames)


def _show(arguments: argparse.Namespace) -> int:
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("show needs Pillow: pip install 'mmreplay[show]'") from None
    output = Path(arguments.output)
    if output.suffix.lower() not in (".png", ".gif"):
        raise ValueError(f"-o must end in .png (contact sheet) or .gif (animation); got {str(output)!r}")
    for name in ("columns", "max_frames"):
        if getattr(arguments, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1; got {getattr(arguments, name)}")
    with ReplayStore.open(arguments.store, "r") as store:
        frames = _episode_frames(store, arguments.episode)
    if not (frames.ndim == 3 or (frames.ndim == 4 and frames.shape[-1] in (1, 3))):
        raise ValueError(f"cannot draw frames of shape {frames.shape[1:]}: expected (H, W), (H, W, 1) or (H, W, 3)")
    if frames.ndim == 4 and frames.shape[-1] == 1:
        frames = frames[..., 0]
    if output.suffix.lower() == ".gif":
        images = [Image.fromarray(frame) for frame in frames]
        images[0].save(output, save_all=True, append_images=images[1:], loop=0,
                       duration=max(20, round(1000 / arguments.fps)))
    else:
        chosen = frames[np.unique(np.linspace(0, len(frames) - 1, min(len(frames), arguments.max_frames)).astype(int))]
        columns = min(arguments.columns, len(chosen))
        rows = -(-len(chosen) // columns)
        height, width = chosen.shape[1:3]
        sheet = np.zeros((rows * height, columns * width, *chosen.shape[3:]), np.uint8)
        for i, frame in enumerate(chosen):
            row, column = divmod(i, columns)
            sheet[row * height : (row + 1) * height, column * width : (column + 1) * width] = frame
        Image.fromarray(sheet).save(output)
    print(f"wrote {output} ({len(frames)} frames of episode {arguments.episode})")
    return 0


def _verify(arguments: argparse.Namespace) -> int:
    report = verify_store(arguments.store, progress=not arguments.no_progress)
    text = "\n".join([f"{len(report['problems'])} problem(s) in {arguments.store}:"] +
                     [f"  - {problem}" for problem in report["problems"]]) if report["problems"] else (
        f"ok: {arguments.store}: {report['transitions']} transitions, {report['episodes']} episodes, "
        f"{report['frames_decoded']} frames decoded")
    _print(arguments, report, text)
    return 1 if report["problems"] else 0


def verify_store(path: str, *, progress: bool = False, max_problems: int = 100) -> dict[str, Any]:
    """Decode every stored transition and check it against the episode table; returns what is wrong.

    Checks: every frame decodes (checksums), each transition's step and env are what was asked, rewards
    are finite, each obs continues the previous next_obs of its episode, each next_obs is its obs
    shifted by one frame unless the transition ended its episode (then it was stored as given), and
    terminated/truncated only end an episode, matching how the episode table says it ended.
    """
    report: dict[str, Any] = {"path": path, "transitions": 0, "episodes": 0, "frames_decoded": 0, "problems": []}
    problems: list[str] = report["problems"]
    try:
        store = ReplayStore.open(path, "r")
    except StoreNotFoundError:
        raise
    except CorruptStoreError as error:
        problems.append(f"cannot open the store: {error}")
        return report
    with store:
        stored = store.stored_steps
        report["transitions"] = len(stored)
        try:
            episodes = store.episodes()
        except CorruptStoreError as error:
            problems.append(f"cannot list episodes: {error}")
            episodes = []
        report["episodes"] = len(episodes)
        episode_of = np.full(len(stored), -1, np.int64)
        for episode in episodes:
            episode_of[episode.steps - stored.start] = episode.episode_id
        if episodes and (episode_of < 0).any():
            problems.append(f"step {int(np.flatnonzero(episode_of < 0)[0]) + stored.start} belongs to no episode")
        last_next: dict[int, np.ndarray] = {}
        with tqdm(total=len(stored), disable=not progress, file=sys.stderr, unit="transition", desc="verify") as bar:
            for start in range(stored.start, stored.stop, CHUNK_STEPS):
                steps = np.arange(start, min(start + CHUNK_STEPS, stored.stop), dtype=np.int64)
                _verify_chunk(store, steps, episode_of[steps - stored.start], episodes, last_next, report)
                bar.update(len(steps))
                if len(problems) >= max_problems:
                    problems.append(f"stopped after {max_problems} problems")
                    break
    return report


def _verify_chunk(store: ReplayStore, steps: np.ndarray, episode_of: np.ndarray, episodes: list[Any],
                  last_next: dict[int, np.ndarray], report: dict[str, Any]) -> None:
    problems: list[str] = report["problems"]
    try:
        batch = store.read(steps)
    except CorruptStoreError:
        for step in steps.tolist():  # find the damaged transitions one by one
            try:
                store.read([step])
            except CorruptStoreError as error:
                problems.append(f"step {step}: {error}")
        return
    report["frames_decoded"] += len(steps) * (store.stack_size + 1)
    for what, bad in (("index differs from the step read", batch.index != steps),
                      (f"env_index outside [0, {store.num_envs})", (batch.env_index < 0) | (batch.env_index >= store.num_envs)),
                      ("reward is not finite", ~np.isfinite(batch.reward))):
        problems.extend(f"step {step}: {what}" for step in steps[bad].tolist())
    for i, step in enumerate(steps.tolist()):
        number = int(episode_of[i])
        if number < 0:
            continue
        episode = episodes[number]
        if batch.env_index[i] != episode.env_index:
            problems.append(f"step {step}: env {batch.env_index[i]} but its episode {number} is env {episode.env_index}")
        if number in last_next and not np.array_equal(last_next[number], batch.obs[i]):
            problems.append(f"step {step}: obs does not continue the previous next_obs of episode {number}")
        last = step == int(episode.steps[-1])
        ended = "terminated" if batch.terminated[i] else "truncated" if batch.truncated[i] else None
        if not ended and not np.array_equal(batch.next_obs[i, :-1], batch.obs[i, 1:]):
            problems.append(f"step {step}: next_obs is not obs shifted by one frame, though it did not end its episode")
        if ended and not last:
            problems.append(f"step {step}: {ended} inside episode {number}, which goes on")
        if last and ended and episode.ended_by != ended:
            problems.append(f"step {step}: {ended}, but episode {number} is listed as {episode.ended_by!r}")
        if last:
            last_next.pop(number, None)
        else:
            last_next[number] = batch.next_obs[i].copy()


def _export(arguments: argparse.Namespace) -> int:
    from mmreplay.hdf5 import export_hdf5

    with ReplayStore.open(arguments.store, "r") as store:
        count = export_hdf5(store, arguments.output, layout=arguments.layout, dataset_id=arguments.dataset_id,
                            progress=not arguments.no_progress)
    print(f"exported {count} transitions to {arguments.output} ({arguments.layout} layout)")
    return 0


def _import(arguments: argparse.Namespace) -> int:
    from mmreplay.hdf5 import import_hdf5

    count = import_hdf5(arguments.input, arguments.store, capacity=arguments.capacity,
                        stack_size=arguments.stack_size, progress=not arguments.no_progress)
    print(f"imported {count} transitions into {arguments.store}")
    return 0


def _import_dopamine(arguments: argparse.Namespace) -> int:
    from mmreplay.dopamine import import_dopamine

    count = import_dopamine(arguments.directory, arguments.store, checkpoints=arguments.checkpoints,
                            stack_size=arguments.stack_size, capacity=arguments.capacity,
                            progress=not arguments.no_progress)
    print(f"imported {count} transitions into {arguments.store}")
    return 0
