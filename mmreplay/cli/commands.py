"""The ``mmreplay`` command: inspect, check, draw, export, import, convert and salvage stores (``python -m mmreplay``
too).

Each command calls the library; errors are printed as ``mmreplay: error: ...`` on stderr with exit
status 1 (2 for a wrong command line, as argparse does); ``verify`` exits 1 when it finds problems;
Ctrl-C ends a command with ``mmreplay: interrupted`` and exit status 130 (an import or export leaves
nothing at its target then). Every command takes ``--json``: every outcome is then one JSON value on
stdout, an error too (``{"error": ..., "error_type": ..., "exit_status": ...}``, with the same exit
status and the same line on stderr). Progress bars are drawn on stderr when it is a terminal
(``--progress`` and ``--no-progress`` decide otherwise), as git and curl do.

Episode ids are the library's (``Episode.id``, ``store.episodes().by_id``): an episode's id is the step
of its first stored transition, which never changes while that transition is stored (whatever is
added, or evicted before it). When eviction removes an episode's first transitions, what remains is
listed as incomplete under the step of its oldest remaining transition, and the old id is answered as
evicted, never with another episode.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from mmreplay import __version__, extensions
from mmreplay.cli import drawing
from mmreplay.cli.verification import open_to_describe, verify_store
from mmreplay.disk.atomic_builds import check_new_path
from mmreplay.errors import CorruptStoreError, DamagedStoreError, MmreplayError
from mmreplay.store import ReplayStore
from mmreplay.store.reading.episode_list import Episode

CHUNK_STEPS = 1024
STORE_HELP = "the store's directory"
PROGRESS_HELP = "draw a progress bar on stderr (default: when stderr is a terminal)"
JSON_HELP = "print one JSON object (an error too: error, error_type, exit_status)"
HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")
# What reads as a file format's suffix (.txt, .csv, .json, .h5), unlike a date's or a version's (.2024-05-01, .1).
FILE_SUFFIX = re.compile(r"^\.[A-Za-z][A-Za-z0-9]{0,5}$")

EXAMPLES = {
    "info": "example: mmreplay info pong.mmr --json",
    "episodes": "example: mmreplay episodes pong.mmr --env 0 --json",
    "show": "example: mmreplay show pong.mmr 1200 -o episode.gif --frame-skip 4   (or -o episode.png for a contact "
            "sheet; 1200 is an id from 'mmreplay episodes')",
    "verify": "example: mmreplay verify pong.mmr || echo 'pong.mmr is damaged'",
    "export": "example: mmreplay export pong.mmr pong.h5   |   mmreplay export pong.mmr ~/.minari/datasets/"
              "pong-v0 --layout minari",
    "import": "example: mmreplay import pong.h5 copy.mmr --capacity 2000000",
    "import-dopamine": "example: mmreplay import-dopamine dqn_replay/Pong/1/replay_logs pong.mmr --checkpoints 49 50",
    "convert": "example: mmreplay convert old-pong.mmr pong.mmr   (then append to pong.mmr; old-pong.mmr is unchanged)",
    "salvage": "example: mmreplay verify pong.mmr || mmreplay salvage pong.mmr pong-salvaged.mmr --json",
}


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors, where ``json_errors`` is set, also print one JSON object on stdout."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        if self.json_errors:
            _print_error(message, "ArgumentError", 2)
        self.exit(2, f"{self.prog}: error: {message}\n")


class _PrintVersion(argparse.Action):
    """``--version``: argparse's own action would rewrap the line; this one prints it as it is."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"mmreplay {__version__}: {extensions.summary()}")
        parser.exit()


def build_parser(*, json_errors: bool = False) -> argparse.ArgumentParser:
    """The ``mmreplay`` command's argument parser, with one subparser per command.

    Args:
        json_errors: whether a wrong command line also prints its error as one JSON object on stdout
            (``main`` sets it when the command line asks for ``--json``).

    Returns:
        The parser; its ``parse_args`` exits with status 2 on a wrong command line, as argparse does.
    """
    parser = _Parser(
        prog="mmreplay", description="Inspect, check, draw, export, import and convert mmreplay stores.",
        epilog="Run 'mmreplay COMMAND --help' for a command's options and an example.")
    parser.json_errors = json_errors
    parser.add_argument("--version", action=_PrintVersion,
                        help="print the version and whether compiled code is in use, then exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help, epilog=EXAMPLES[name],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        sub.json_errors = json_errors
        return sub

    info = command("info", "Show a store's layout and size: frame shape, capacity, transitions, episodes, "
                           "envs, bytes on disk, compression ratio, format version.")
    info.add_argument("store", help=STORE_HELP)
    info.add_argument("--json", action="store_true", help=JSON_HELP)

    episodes = command("episodes", "List the stored episodes: id, env, first step, length, return, how it ended.")
    episodes.add_argument("store", help=STORE_HELP)
    episodes.add_argument("--env", type=int, help="only this env's episodes (0 to the store's num_envs - 1)")
    episodes.add_argument("--json", action="store_true",
                          help="print a JSON list (an error: one JSON object, as every command's)")

    show = command("show", "Draw an episode's frames: a contact sheet (.png, each frame labelled with its step) or "
                           "an animation (.gif). Needs Pillow (pip install 'mmreplay[show]').")
    show.add_argument("store", help=STORE_HELP)
    show.add_argument("episode", type=int, metavar="ID", help="the episode's id: the step of its first stored "
                                                              "transition, as 'mmreplay episodes' lists it")
    show.add_argument("-o", "--output", required=True, help="out.png (contact sheet) or out.gif (animation); "
                                                            "an existing file is refused unless --force")
    show.add_argument("--force", action="store_true", help="replace an existing output file")
    show.add_argument("--columns", type=int, default=8, help="contact sheet columns (default: %(default)s)")
    show.add_argument("--max-frames", type=int, default=64,
                      help="contact sheet: at most this many frames, evenly spaced (default: %(default)s)")
    show.add_argument("--scale", type=int, default=2, help="pixels per frame pixel (default: %(default)s)")
    show.add_argument("--frame-skip", type=int, help="emulator frames per agent step; the default --fps is 60 / "
                                                     "frame skip (ALE runs at 60 Hz; 4, the usual one, if not given)")
    show.add_argument("--fps", type=float, help="animation frames per second (default: real time, see --frame-skip)")
    show.add_argument("--json", action="store_true", help=JSON_HELP)

    verify = command("verify", "Check every stored row and decode every frame, then every transition and episode; "
                               "exit status 1 and a list of problems (every damaged row and frame: step, file, "
                               "offset) when something is wrong.")
    verify.add_argument("store", help=STORE_HELP)
    verify.add_argument("--json", action="store_true", help=JSON_HELP)
    verify.add_argument("--progress", action=argparse.BooleanOptionalAction, help=PROGRESS_HELP)

    export = command("export", "Export a store to HDF5: one file (--layout mmreplay) or a Minari dataset "
                               "directory (--layout minari).")
    export.add_argument("store", help=STORE_HELP)
    export.add_argument("output", help="the file (mmreplay: named .h5 or .hdf5) or dataset directory (minari: no "
                                       "file suffix) to create")
    export.add_argument("--layout", choices=("mmreplay", "minari"), default="mmreplay",
                        help="mmreplay: one HDF5 file, readable with plain h5py; minari: a Minari dataset directory "
                             "(default: %(default)s)")
    export.add_argument("--dataset-id", help="Minari dataset id, [namespace/]name-vN (default: made from the "
                                             "output's name: 'export' gives 'export-v0')")
    export.add_argument("--progress", action=argparse.BooleanOptionalAction, help=PROGRESS_HELP)
    export.add_argument("--json", action="store_true", help=JSON_HELP)

    imp = command("import", "Create a store from an HDF5 file in the mmreplay layout or a Minari dataset.")
    imp.add_argument("input", help="an mmreplay HDF5 file, or a Minari dataset directory or main_data.hdf5")
    imp.add_argument("store", help="the store to create")
    imp.add_argument("--capacity", type=int, help="store capacity (default: the exporting store's)")
    imp.add_argument("--stack-size", type=int, help="frames per obs, for Minari datasets not made by mmreplay")
    imp.add_argument("--progress", action=argparse.BooleanOptionalAction, help=PROGRESS_HELP)
    imp.add_argument("--json", action="store_true", help=JSON_HELP)

    dop = command("import-dopamine", "Create a store from Dopamine replay checkpoints ($store$_observation_ckpt.N.gz "
                                     "and friends, the DQN Replay Dataset's format).")
    dop.add_argument("directory", help="the directory holding the checkpoint files")
    dop.add_argument("store", help="the store to create")
    dop.add_argument("--checkpoints", type=int, nargs="+", help="checkpoint numbers in written order (default: all)")
    dop.add_argument("--stack-size", type=int, default=4, help="the store's frames per obs (default: %(default)s)")
    dop.add_argument("--writer-stack-size", type=int,
                     help="the stack size Dopamine wrote with, which sets the padding slots to skip (default: "
                          "found in the files)")
    dop.add_argument("--stack-padding", choices=("zeros", "first"), default="zeros",
                     help="stacks at an episode start: zero-padded as Dopamine's sampler builds them, or the "
                          "first frame repeated as gymnasium does (default: %(default)s)")
    dop.add_argument("--capacity", type=int, help="store capacity (default: the slots read)")
    dop.add_argument("--progress", action=argparse.BooleanOptionalAction, help=PROGRESS_HELP)
    dop.add_argument("--json", action="store_true", help=JSON_HELP)

    conv = command("convert", "Write a store again in this mmreplay's format version, as a new store: what a store "
                              "of an older version (which opens read-only) needs to be appended to.")
    conv.add_argument("store", help=STORE_HELP + " (read, never changed)")
    conv.add_argument("output", help="the store to create")
    conv.add_argument("--progress", action=argparse.BooleanOptionalAction, help=PROGRESS_HELP)
    conv.add_argument("--json", action="store_true", help=JSON_HELP)

    salv = command("salvage", "Copy every intact transition of a damaged store (its row and the frames of its whole obs "
                              "and next_obs stacks intact) into a new store, bit-exact; report how many were kept "
                              "and dropped.")
    salv.add_argument("store", help=STORE_HELP + " (read, never changed)")
    salv.add_argument("output", help="the store to create (built beside it and renamed into place)")
    salv.add_argument("--progress", action=argparse.BooleanOptionalAction, help=PROGRESS_HELP)
    salv.add_argument("--json", action="store_true", help=JSON_HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one ``mmreplay`` command line.

    Args:
        argv: the words after ``mmreplay`` (None: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 done, 1 an error (or problems ``verify`` found), 130 interrupted, 141 the
        reader of stdout went away.

    Raises:
        SystemExit: for ``--help``, ``--version`` (status 0) and a wrong command line (status 2).
    """
    words = sys.argv[1:] if argv is None else list(argv)
    as_json = wants_json(words)
    parser = build_parser(json_errors=as_json)
    arguments = parser.parse_args(words)
    handler = {"info": _info, "episodes": _episodes, "show": _show, "verify": _verify, "export": _export,
               "import": _import, "import-dopamine": _import_dopamine, "convert": _convert,
               "salvage": _salvage}[arguments.command]
    try:
        return handler(arguments)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        if as_json:
            print(json.dumps({"error": "interrupted", "error_type": "KeyboardInterrupt", "exit_status": 130}))
        return 130
    except BrokenPipeError:
        # The reader went away (``mmreplay episodes STORE | head``): stop quietly, as cat and ls do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (MmreplayError, OSError, ValueError, TypeError, IndexError, ImportError) as error:
        message, error_type = " ".join(str(error).split()), type(error).__name__  # one line (HDF5's span several)
    except Exception as error:  # a bug: still one line and status 1, with the exception's type to report it by
        message, error_type = f"{type(error).__name__}: {' '.join(str(error).split())}", type(error).__name__
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    if as_json:
        _print_error(message, error_type, 1)
    return 1


def wants_json(words: list[str]) -> bool:
    """Whether a command line asks for ``--json`` (or a prefix argparse takes for it), before ``--``.

    Args:
        words: the command line's words after ``mmreplay``.

    Returns:
        True when an error, even of the command line itself, is to be printed as JSON too.
    """
    for word in words:
        if word == "--":
            return False
        if len(word) >= 3 and "--json".startswith(word):
            return True
    return False


def _print_error(message: str, error_type: str, status: int) -> None:
    """An error as ``--json`` prints it: one object on stdout (its line on stderr is printed apart)."""
    print(json.dumps({"error": message, "error_type": error_type, "exit_status": status}))
    sys.stdout.flush()


def _print(arguments: argparse.Namespace, value: Any, text: str) -> None:
    print(json.dumps(value) if getattr(arguments, "json", False) else text)


def _progress(arguments: argparse.Namespace) -> bool:
    """Whether to draw a progress bar: as asked, else when stderr is a terminal (not a pipe or a log)."""
    return bool(arguments.progress) if arguments.progress is not None else sys.stderr.isatty()


def _open(path: str) -> ReplayStore:
    """Open a store to describe it, checking first that the files its contents need are there."""
    store = open_to_describe(path)
    missing = store.missing_files()
    if missing:
        store.close()
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise CorruptStoreError(f"{path}: {len(missing)} file(s) its contents need are missing: {shown} "
                                "(run 'mmreplay verify')")
    return store


def _info(arguments: argparse.Namespace) -> int:
    with _open(arguments.store) as store:
        on_disk = store.bytes_on_disk
        # One uncompressed frame per transition.
        raw = len(store) * int(np.prod(store.frame_shape)) * store.frame_dtype.itemsize
        info = {
            "path": str(store.path), "format_version": store.format_version, "frame_shape": list(store.frame_shape),
            "frame_dtype": str(store.frame_dtype),
            "stack_size": store.stack_size, "capacity": store.capacity, "transitions": len(store),
            "transitions_added": store.transitions_added, "episodes": len(store.episodes()),
            "num_envs": store.num_envs, "action_shape": list(store.action_shape),
            "action_dtype": str(store.action_dtype), "frame_encoding": store.frame_encoding,
            "fields": {name: f"{dtype}{list(shape)}" for name, (shape, dtype) in store.fields.items()},
            "bytes_on_disk": on_disk,
            "compression_ratio": round(raw / on_disk, 2) if raw and on_disk else None,  # none without frames
            "compiled_code": extensions.summary(),
        }
        advice = store.page_cache_advice()
    # How this process would map the segments to sample them, and why (the machine's or the cgroup's memory).
    info["page_cache"] = {"policy": advice.policy, "reason": advice.reason,
                          "segment_files_bytes": advice.segment_files_bytes, "usable_memory": advice.memory.bytes,
                          "memory_source": advice.memory.source}
    text = {**info, "page_cache": f"{advice.policy}: {advice.reason}"}
    width = max(len(key) for key in text)
    _print(arguments, info, "\n".join(f"{key.replace('_', ' '):<{width}}  {'n/a' if value is None else value}"
                                      for key, value in text.items()))
    return 0


def _episodes(arguments: argparse.Namespace) -> int:
    with _open(arguments.store) as store:
        if arguments.env is not None and not 0 <= arguments.env < store.num_envs:
            envs = "0 (the store has one env)" if store.num_envs == 1 else (
                f"0 to {store.num_envs - 1} (the store has {store.num_envs} envs)")
            raise ValueError(f"--env must be {envs}; got {arguments.env}")
        listed = [e for e in store.episodes() if arguments.env is None or e.env_index == arguments.env]
    rows = [{"id": e.id, "env": e.env_index, "first_step": e.first_step, "length": e.length,
             "return": e.total_reward, "ended_by": e.ended_by, "complete": e.complete} for e in listed]
    lines = [f"{'id':>10} {'env':>4} {'length':>8} {'return':>10}  ended by"]
    lines += [f"{r['id']:>10} {r['env']:>4} {r['length']:>8} {r['return']:>10g}  "
              f"{r['ended_by']}{'' if r['complete'] else ' (incomplete: its start is not stored)'}" for r in rows]
    _print(arguments, rows, "\n".join(lines))
    return 0


def _find_episode(store: ReplayStore, id: int) -> Episode:
    """The episode whose id is ``id``, as the library finds it (its error lists the stored ids)."""
    return store.episodes().by_id(id)


def _episode_frames(store: ReplayStore, steps: np.ndarray) -> np.ndarray:
    """The episode's observations as single frames: its first obs's newest frame, then each next frame."""
    frames = [store.read(steps[:1]).obs[0, -1:]]
    for start in range(0, len(steps), CHUNK_STEPS):
        frames.append(store.read(steps[start : start + CHUNK_STEPS]).next_obs[:, -1])
    return np.concatenate(frames)


def _check_output(path: Path, *, force: bool) -> None:
    if force and path.is_file():
        return
    check_new_path(path, "the output")


def _show(arguments: argparse.Namespace) -> int:
    drawing.pillow()
    output = Path(arguments.output)
    if output.suffix.lower() not in (".png", ".gif"):
        raise ValueError(f"-o must end in .png (contact sheet) or .gif (animation); got {str(output)!r}")
    for name in ("columns", "max_frames", "scale", "frame_skip"):
        value = getattr(arguments, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1; got {value}")
    if arguments.fps is not None and not (np.isfinite(arguments.fps) and arguments.fps > 0):
        raise ValueError(f"--fps must be a positive number; got {arguments.fps}")
    _check_output(output, force=arguments.force)
    with _open(arguments.store) as store:
        if store.frame_dtype != np.uint8:
            raise ValueError(f"show draws uint8 image frames; this store's frames are {store.frame_dtype} "
                             f"{store.frame_shape} (read them with ReplayStore.read, or export them)")
        episode = _find_episode(store, arguments.episode)
        frames = _episode_frames(store, episode.steps)
    if not (frames.ndim == 3 or (frames.ndim == 4 and frames.shape[-1] in (1, 3))):
        raise ValueError(f"cannot draw frames of shape {frames.shape[1:]}: expected (H, W), (H, W, 1) or (H, W, 3)")
    if frames.ndim == 4 and frames.shape[-1] == 1:
        frames = frames[..., 0]
    report: dict[str, Any] = {"output": str(output), "episode": episode.id, "env": episode.env_index,
                              "first_step": episode.first_step, "last_step": int(episode.steps[-1]),
                              "length": episode.length, "frames_in_episode": len(frames)}
    if output.suffix.lower() == ".gif":
        fps = arguments.fps or drawing.default_fps(arguments.frame_skip)
        drawing.save_animation(drawing.animation(frames, scale=arguments.scale), output, fps=fps)
        report.update(frames_drawn=len(frames), fps=fps, scale=arguments.scale)
        text = (f"wrote {output}: all {len(frames)} frames of episode {episode.id}, x{arguments.scale}, "
                f"{fps:g} fps")
    else:
        chosen = np.unique(np.linspace(0, len(frames) - 1, min(len(frames), arguments.max_frames)).astype(int))
        steps = episode.steps.tolist()
        labels = [str(steps[i]) if i < len(steps) else "final" for i in chosen.tolist()]
        drawing.contact_sheet(frames[chosen], labels, columns=arguments.columns, scale=arguments.scale).save(output)
        report.update(frames_drawn=len(chosen), scale=arguments.scale)
        text = (f"wrote {output}: {len(chosen)} of the {len(frames)} frames of episode {episode.id}, "
                "each labelled with its step")
    _print(arguments, report, text)
    return 0


def _verify(arguments: argparse.Namespace) -> int:
    report = verify_store(arguments.store, progress=_progress(arguments))
    problems = report["problems"]
    rows, frames = report["damaged_rows"], report["damaged_frames"]
    if rows or frames:
        lines = [f"{arguments.store}: damaged: {_count(len(rows), 'row')} and {_count(len(frames), 'frame')}; "
                 f"{report['damaged_transitions']:,} of {report['transitions']:,} transitions cannot be read, "
                 f"{report['intact_transitions']:,} are intact"]
    else:
        lines = [f"{len(problems)} problem(s) in {arguments.store}:"]
    lines += [f"  - {problem}" for problem in problems]
    if report["stopped_early"]:
        lines.append(f"  (the first {len(problems)} listed; --json lists every damaged row and frame)")
    if rows or frames:
        lines.append(f"  transitions that cannot be read: {_ranges(report['damaged_steps'])}")
        lines.append(f"  to copy the intact transitions into a new store: mmreplay salvage {arguments.store} NEW")
    text = "\n".join(lines) if problems else (
        f"ok: {arguments.store}: {report['transitions']} transitions, {report['episodes']} episodes, "
        f"{report['frames_decoded']} frames decoded"
        + (f", fields {', '.join(report['fields'])} checked" if report["fields"] else ""))
    _print(arguments, report, text)
    return 1 if problems else 0


def _ranges(steps: list[int], most: int = 8) -> str:
    """Steps as runs (``7-15, 40``), the first ``most`` of them."""
    runs: list[list[int]] = []
    for step in steps:
        if runs and step == runs[-1][1] + 1:
            runs[-1][1] = step
        else:
            runs.append([step, step])
    shown = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:most])
    return shown + (f" and {len(runs) - most} more runs" if len(runs) > most else "") if runs else "none"


def _count(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _salvage(arguments: argparse.Namespace) -> int:
    from mmreplay.copying import salvage

    summary = salvage(arguments.store, arguments.output, progress=_progress(arguments))
    report = {"store": arguments.store, "output": arguments.output, **summary.as_dict()}
    text = (f"salvaged {arguments.store} into {arguments.output}: kept {summary.kept:,} of {summary.transitions:,} "
            f"transitions, dropped {summary.dropped:,} ({_count(summary.damaged_rows, 'damaged row')}, "
            f"{_count(summary.damaged_frames, 'damaged frame')})")
    if summary.first_dropped_step is not None:
        text += f"; the first dropped is step {summary.first_dropped_step}"
    _print(arguments, report, text)
    return 0


def check_export_target(output: str, layout: str) -> None:
    """Refuse an export target whose suffix says another format than ``layout`` writes.

    Args:
        output: the path to export to.
        layout: ``"mmreplay"`` (one HDF5 file: a suffix of HDF5's, or none) or ``"minari"`` (a dataset
            directory: no suffix of a file format).

    Raises:
        ValueError: naming what the layout writes and the target given.
    """
    suffix = Path(output).suffix
    if not FILE_SUFFIX.match(suffix):
        return
    if layout == "mmreplay" and suffix.lower() not in HDF5_SUFFIXES:
        raise ValueError(f"export --layout mmreplay writes one HDF5 file, named .h5 or .hdf5 (or .hdf, .he5, or "
                         f"without a suffix); got {output!r}")
    if layout == "minari":
        raise ValueError(f"export --layout minari writes a dataset directory, named without a file's suffix (as its "
                         f"dataset id: pong-random-v0; --layout mmreplay writes one .h5 file); got {output!r}")


def _export(arguments: argparse.Namespace) -> int:
    from mmreplay.hdf5 import export_hdf5
    from mmreplay.hdf5.minari_layout import DATASET_ID

    check_export_target(arguments.output, arguments.layout)
    if arguments.layout == "minari" and arguments.dataset_id is not None and not DATASET_ID.match(arguments.dataset_id):
        raise ValueError(f"--dataset-id must look like '[namespace/]name-v0' (Minari's rule); got "
                         f"{arguments.dataset_id!r}")
    with _open(arguments.store) as store:
        try:
            count = export_hdf5(store, arguments.output, layout=arguments.layout, dataset_id=arguments.dataset_id,
                                progress=_progress(arguments))
        except DamagedStoreError as error:  # the store named as given, and the salvage to run
            raise DamagedStoreError(str(error).replace(str(store.path), arguments.store).replace(
                "'mmreplay salvage'", f"'mmreplay salvage {arguments.store} NEW'")) from None
    _print(arguments, {"output": arguments.output, "layout": arguments.layout, "transitions": count},
           f"exported {count} transitions to {arguments.output} ({arguments.layout} layout)")
    return 0


def _imported(arguments: argparse.Namespace, count: int, extra: dict[str, Any], note: str) -> int:
    with ReplayStore.open(arguments.store, "r") as store:
        kept, capacity = len(store), store.capacity
    text = f"imported {count} transitions into {arguments.store}"
    if kept < count:
        text += f"; it keeps the newest {kept} (capacity {capacity}), the older ones were evicted"
    _print(arguments, {"store": arguments.store, "transitions_read": count, "transitions_kept": kept,
                       "capacity": capacity, **extra}, text + note)
    return 0


def _import(arguments: argparse.Namespace) -> int:
    from mmreplay.hdf5 import import_hdf5

    count = import_hdf5(arguments.input, arguments.store, capacity=arguments.capacity,
                        stack_size=arguments.stack_size, progress=_progress(arguments))
    return _imported(arguments, count, {}, "")


def _import_dopamine(arguments: argparse.Namespace) -> int:
    from mmreplay.dopamine import import_dopamine

    count = import_dopamine(arguments.directory, arguments.store, checkpoints=arguments.checkpoints,
                            stack_size=arguments.stack_size, writer_stack_size=arguments.writer_stack_size,
                            stack_padding=arguments.stack_padding, capacity=arguments.capacity,
                            progress=_progress(arguments))
    note = ("\nstacks at episode starts are zero-padded, as Dopamine's sampler builds them (--stack-padding first "
            "repeats the first frame instead)" if arguments.stack_padding == "zeros" else "")
    return _imported(arguments, count, {"stack_padding": arguments.stack_padding}, note)


def _convert(arguments: argparse.Namespace) -> int:
    from mmreplay.copying import convert

    with _open(arguments.store) as store:
        version = store.format_version
    count = convert(arguments.store, arguments.output, progress=_progress(arguments))
    with ReplayStore.open(arguments.output, "r") as store:
        written = store.format_version
    _print(arguments, {"store": arguments.store, "output": arguments.output, "transitions": count,
                       "format_version": written, "from_format_version": version},
           f"converted {count} transitions of {arguments.store} (format version {version}) into {arguments.output} "
           f"(format version {written})")
    return 0
