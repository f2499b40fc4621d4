"""What the one-tree Ray pair harnesses share (``direct_sample_pair.py``, ``group_decode_pair.py``): a
``ShardedReplay`` of two local shards and a local store holding the same real frames, and the ``main``
that runs a harness in a scratch directory and prints its JSON (errors on stderr, exit 1).

Imported by those scripts from this folder (``python benchmarks/lab/NAME.py`` puts it on the path).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mmreplay import ReplayStore


def two_shards_and_a_store(work: Path, frames: np.ndarray, *, frame_encoding: str, transitions: int) -> tuple[Any, Any]:
    """A ``ShardedReplay`` of 2 shards on this node and a local ``ReplayStore``, each shard's ``transitions``
    of ``frames`` (one episode, shard k's from frame 3000 k) written to both, committed; Ray already started.

    Returns:
        (the replay, its states asked for; the local store).
    """
    from mmreplay.ray import ShardedReplay

    replay = ShardedReplay.create("pair", str(work / "shards"), num_shards=2, frame_shape=(84, 84), capacity=20_000,
                                  stack_size=4, placement="local", frame_encoding=frame_encoding)
    local = ReplayStore.create(work / "local.mmr", frame_shape=(84, 84), capacity=20_000, stack_size=4,
                               frame_encoding=frame_encoding)
    for k in range(2):
        writer = replay.writer(f"w{k}", shard=k, steps_per_send=256)
        for t in range(transitions):
            i = (3000 * k + t) % (len(frames) - 1)
            last = t == transitions - 1
            writer.add(frames[i], t % 6, 0.0, frames[i + 1], last, False)
            local.add(frames[i], t % 6, 0.0, frames[i + 1], last, False)
        writer.flush()
    local.flush()
    replay.refresh()
    return replay, local


def pair_parser(doc: str, example: str, *, transitions: int) -> argparse.ArgumentParser:
    """The options both harnesses take: --game, --frame-encoding, --transitions (per shard), --windows, --json."""
    from mmreplay.testing import atari_frames

    parser = argparse.ArgumentParser(description=doc.splitlines()[0], epilog=f"example: python {example}")
    parser.add_argument("--game", default="pong", choices=atari_frames.GAMES)
    parser.add_argument("--frame-encoding", choices=["lz4", "lz4-reference"], default="lz4-reference")
    parser.add_argument("--transitions", type=int, default=transitions, help=f"per shard (default {transitions})")
    parser.add_argument("--windows", type=int, default=6)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def run_main(name: str, run: Callable[[argparse.Namespace, Path], dict[str, Any]], args: argparse.Namespace) -> int:
    """``run(args, work)`` in a scratch directory (removed after), its results printed as JSON with the
    machine's load before and after; an error on stderr (and as JSON with ``args.json``), exit 1."""
    work = Path(tempfile.mkdtemp(prefix=f"mmr-{name}-"))
    load_before = os.getloadavg()
    try:
        results = run(args, work)
    except Exception as error:  # noqa: BLE001 - reported on stderr (and as JSON with --json)
        print(f"{name}: {type(error).__name__}: {error}", file=sys.stderr)
        if args.json:
            print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["machine"] = {"cpus": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
                          "load_after": [round(x, 2) for x in os.getloadavg()]}
    print(json.dumps(results, indent=None if args.json else 1))
    return 0
