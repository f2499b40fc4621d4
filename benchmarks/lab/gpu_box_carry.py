"""Fill ``.devcarry/`` with what ``benchmarks/lab/gpu_box.sh`` needs on a GPU box that has no ALE and no
package registry, beside the wheels and sources already there (``whl/``, ``src/``: lz4, cpprb,
setuptools, nvCOMP; see ``/work/shared/notes/gpu-box-measurements.md``):

- ``frames/atari_<game>.npz``: the 20,000-frame streams of Pong, MsPacman, Seaquest and Breakout, copied from the
  ``mmreplay.testing.atari_frames`` cache (recorded with ALE first where missing), in the layout ``--data-dir`` reads;
- ``testwhl/``: pytest and hypothesis wheels (and their dependencies) for CPython 3.12, downloaded with
  pip, for the CUDA tests;
- with ``--base REV``, ``base.tar``: the package at that commit (``git archive REV mmreplay setup.py``), which
  ``benchmarks/lab/feed_box.sh`` measures beside this tree.

It prints the size of each part and of the whole carry, which must stay under the device tool's 64 MiB
with the tree (this script warns above 60 MiB).

    .venv/bin/python benchmarks/lab/gpu_box_carry.py                 # into ./.devcarry
    .venv/bin/python benchmarks/lab/gpu_box_carry.py --carry /path/to/.devcarry --games pong,mspacman
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from mmreplay.testing import atari_frames

GAMES = ("pong", "mspacman", "seaquest", "breakout")
STREAM_FRAMES = atari_frames.BENCHMARK_FRAMES
TEST_REQUIREMENTS = ("pytest", "hypothesis", "tqdm")  # tqdm: mmreplay imports it; a box Python may lack it
LIMIT_MIB = 60


def size_mib(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 2**20


def copy_frames(carry: Path, games: list[str]) -> None:
    target = carry / "frames"
    target.mkdir(parents=True, exist_ok=True)
    for game in games:
        source = atari_frames.stream_path(game, STREAM_FRAMES)
        if not source.exists():  # recorded with ALE into the cache first
            atari_frames.load(game, STREAM_FRAMES)
        destination = target / f"atari_{game}.npz"
        shutil.copyfile(source, destination)
        print(f"frames: {destination} ({size_mib(destination):.1f} MiB) from {source}")


def download_test_wheels(carry: Path) -> None:
    target = carry / "testwhl"
    target.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--python-version", "3.12",
               "--platform", "manylinux2014_x86_64", "--implementation", "cp", "-d", str(target), *TEST_REQUIREMENTS]
    subprocess.run(command, check=True, timeout=300)
    print(f"testwhl: {', '.join(sorted(p.name for p in target.glob('*.whl')))} ({size_mib(target):.1f} MiB)")


def archive_base(carry: Path, revision: str) -> None:
    root = Path(__file__).resolve().parents[2]
    target = carry / "base.tar"
    subprocess.run(["git", "-C", str(root), "archive", "--format=tar", "-o", str(target), revision, "mmreplay", "setup.py"],
                   check=True, timeout=60)
    print(f"base: {target} ({size_mib(target):.1f} MiB), the package at {revision}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--carry", type=Path, default=Path(__file__).resolve().parents[2] / ".devcarry")
    parser.add_argument("--games", default=",".join(GAMES))
    parser.add_argument("--no-wheels", action="store_true", help="leave testwhl/ as it is")
    parser.add_argument("--base", help="also carry the package at this commit as base.tar (for feed_box.sh)")
    args = parser.parse_args(argv)
    copy_frames(args.carry, args.games.split(","))
    if args.base:
        archive_base(args.carry, args.base)
    if not args.no_wheels:
        download_test_wheels(args.carry)
    for part in sorted(p for p in args.carry.iterdir()):
        print(f"  {part.name}: {size_mib(part):.1f} MiB")
    total = size_mib(args.carry)
    print(f"carry: {args.carry} {total:.1f} MiB")
    if total > LIMIT_MIB:
        sys.exit(f"the carry is {total:.1f} MiB; keep it under {LIMIT_MIB} MiB (the tree travels beside it)")


if __name__ == "__main__":
    main()
