"""Salvage on a real-frames store: one damaged row, then one damaged frame, and what survives.

    python scripts/salvage_check.py                      # Pong, 6,000 transitions, both frame encodings
    python scripts/salvage_check.py --game breakout --transitions 8000 --json

For each frame encoding it builds a store of the game's recorded frames (mmreplay.testing.atari_frames), copies
it, flips one byte (the row of a step a sixth of the way into the stored steps; then, in another copy, a
byte of a frame's block a third of the way in; in a reference store also the next key frame from there, which the frames of
its group are compressed against), and salvages the copy. ``ReplayStore.open`` reads the
newest rows of each env (up to 4,096 of them): damage there is refused at open (``DamagedStoreError``),
so the cases damage older transitions, which the store opens and reads around. What must survive is found without the scan: every
stored step of the damaged copy is read alone through ``ReplayStore.read``; those that read are the
survivors. The salvaged store must hold exactly them, in order, each bit-exact against the undamaged
store. It prints one line per case (``--json``: one JSON object per line) and exits 1 if any case fails.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import mmreplay
from mmreplay import CorruptStoreError, ReplayStore
from mmreplay.store import internals
from mmreplay.testing import atari_frames


def build(path: Path, game: str, transitions: int, encoding: str) -> None:
    stream = atari_frames.load(game, transitions + 100)
    rng = np.random.default_rng(0)
    with ReplayStore.create(path, frame_shape=(84, 84), capacity=transitions, stack_size=4,
                            frame_encoding=encoding) as store:
        added = 0
        for t in np.flatnonzero(stream["action"][:-1] >= 0):
            store.add(stream["frames"][t], int(stream["action"][t]), float(stream["reward"][t]), stream["frames"][t + 1],
                      bool(stream["terminated"][t]), bool(rng.random() < 0.01))
            added += 1
            if added == transitions:
                break


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        old = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([old ^ 0x01]))


def damage(copy: Path, what: str) -> str:
    """Flip one byte of ``copy``: the row of a stored step a sixth of the way in, or a frame's block a third
    of the way in (found through the store's own layout, as tests/store_files.py does); says which."""
    with ReplayStore.open(copy) as store:
        files = internals.files_of(store)
        if what == "row":
            step = store.stored_steps[len(store) // 6]
            flip(copy / "transitions.tbl", files.table.offset_of(step) + files.table.dtype.itemsize - 1)
            return f"the row of step {step}"
        document = json.loads((copy / "header.json").read_text())["commit"]
        frame = document["frame_tail"] + (document["frames_written"] - document["frame_tail"]) // 3
        if what == "key frame":  # the next frame others are compressed against (ref_delta 0: a group's first)
            while int(files.frames.ref_deltas(np.array([frame]))[0]) != 0:
                frame += 1
        segment, offset, length = files.frames.location(frame)
    flip(copy / segment, offset + length // 2)
    return f"frame {frame} ({segment}, byte {offset + length // 2})"


def readable(path: Path) -> np.ndarray:
    """The stored steps that read alone, without error."""
    with ReplayStore.open(path) as store:
        good = []
        for step in store.stored_steps:
            try:
                store.read([step])
            except CorruptStoreError:
                continue
            good.append(step)
    return np.array(good, np.int64)


def check(clean: Path, damaged: Path, target: Path) -> dict[str, object]:
    survivors = readable(damaged)
    started = time.perf_counter()
    summary = mmreplay.salvage(damaged, target)
    seconds = time.perf_counter() - started
    with ReplayStore.open(clean) as original, ReplayStore.open(target) as new:
        exact = len(new) == len(survivors)
        for start in range(0, len(survivors), 512):
            chunk = survivors[start : start + 512]
            want, got = original.read(chunk), new.read(np.arange(start, start + len(chunk)))
            exact &= all(np.array_equal(getattr(want, name), getattr(got, name))
                         for name in ("obs", "next_obs", "action", "reward", "terminated", "truncated"))
        stored = len(original)
    return {"stored": stored, "readable": len(survivors), "kept": summary.kept, "dropped": summary.dropped,
            "damaged_rows": summary.damaged_rows, "damaged_frames": summary.damaged_frames,
            "first_dropped_step": summary.first_dropped_step, "bit_exact": bool(exact),
            "ok": bool(exact) and summary.kept == len(survivors), "salvage_s": round(seconds, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="example: python scripts/salvage_check.py --game pong --json")
    parser.add_argument("--game", default="pong")
    parser.add_argument("--transitions", type=int, default=6000)
    parser.add_argument("--json", action="store_true", help="one JSON object per case")
    arguments = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="mmreplay-salvage-") as directory:
        root = Path(directory)
        for encoding in ("lz4", "lz4-reference"):
            clean = root / f"{encoding}.mmr"
            build(clean, arguments.game, arguments.transitions, encoding)
            for what in ("row", "frame", *(("key frame",) if encoding == "lz4-reference" else ())):
                copy = root / f"{encoding}-{what}.mmr"
                shutil.copytree(clean, copy)
                where = damage(copy, what)
                result = {"game": arguments.game, "encoding": encoding, "damaged": where,
                          **check(clean, copy, root / f"{encoding}-{what}-salvaged.mmr")}
                failed |= not result["ok"]
                print(json.dumps(result) if arguments.json else
                      f"{arguments.game} {encoding}, {where} flipped: kept {result['kept']:,} of {result['stored']:,} "
                      f"(readable alone: {result['readable']:,}), dropped {result['dropped']}, "
                      f"{result['damaged_rows']} damaged row(s), {result['damaged_frames']} damaged frame(s), "
                      f"bit-exact {result['bit_exact']}: {'ok' if result['ok'] else 'FAILED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
