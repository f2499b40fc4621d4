"""How fast do HDF5 export and import run, how big are the files, and does memory stay flat?

Records ``--transitions`` real Atari transitions (a 20,000-frame stream recorded with ALE, see
``frame_streams.py``; fed cyclically, one add per env step) into a store, then measures, each in a fresh
subprocess so peak RSS
(``VmHWM``) belongs to that phase alone:

* export to the ``mmreplay`` layout and to the ``minari`` layout, and import of each back into a store;
* the reference: the same frames (one per transition) written with plain h5py, ``compression="gzip"``
  (level 4, h5py's default), one frame per chunk, 1,024 frames per write.

Prints a markdown table: transitions/s, file bytes per transition, peak RSS and peak anonymous memory.
Peak RSS (``VmHWM``) counts the pages of the store's files that the phase has mapped and touched:
page cache, which the kernel reclaims at will, and which grows with the store; "memory stays flat" is
about the anonymous memory (``RssAnon``, polled every 5 ms), which a streaming phase keeps constant.

    .venv/bin/python benchmarks/bench_export.py                      # 100,000 transitions of pong
    .venv/bin/python benchmarks/bench_export.py --transitions 1000000 --workdir /big/disk
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frame_streams import stream_path  # noqa: E402

PHASES = ("reference", "export-mmreplay", "import-mmreplay", "export-minari", "import-minari")


def record(path: Path, game: str, transitions: int) -> None:
    from mmreplay import ReplayStore

    with np.load(stream_path(game)) as data:
        frames, action, reward = data["frames"], data["action"], data["reward"]
        terminated, truncated = data["terminated"], data["truncated"]
    starts = np.flatnonzero(action[:-1] >= 0)
    with ReplayStore.create(path, frame_shape=(84, 84), capacity=transitions, action_dtype=np.int16) as store:
        added = 0
        while added < transitions:
            for t in starts[: transitions - added]:
                store.add(frames[t], action[t], reward[t], frames[t + 1], terminated[t], truncated[t])
            added += min(len(starts), transitions - added)


def size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def phase(name: str, work: Path) -> dict[str, float]:
    """Run one phase in this process; returns seconds, file bytes, peak RSS and peak anonymous memory."""
    from machine import rss_anon

    peak_anon, done = [rss_anon()], threading.Event()

    def poll() -> None:
        while not done.wait(0.005):
            peak_anon[0] = max(peak_anon[0], rss_anon())

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        result = _run_phase(name, work)
    finally:
        done.set()
        poller.join()
    return {**result, "peak_anon": max(peak_anon[0], rss_anon())}


def _run_phase(name: str, work: Path) -> dict[str, float]:
    from machine import proc_field
    from mmreplay import ReplayStore
    from mmreplay.hdf5 import export_hdf5, import_hdf5

    store_path, began = work / "store.mmr", time.perf_counter()
    output = work / ("export.h5" if name.endswith("mmreplay") else "export-v0")
    if name == "reference":
        import h5py

        output = work / "reference.h5"
        with ReplayStore.open(store_path) as store, h5py.File(output, "w") as file:
            stored = store.stored_steps
            frames = file.create_dataset("frames", shape=(len(stored), 84, 84), dtype=np.uint8,
                                         chunks=(1, 84, 84), compression="gzip")
            for start in range(stored.start, stored.stop, 1024):
                steps = np.arange(start, min(start + 1024, stored.stop))
                frames[start - stored.start : start - stored.start + len(steps)] = store.read(steps).next_obs[:, -1]
    elif name.startswith("export"):
        with ReplayStore.open(store_path) as store:
            export_hdf5(store, output, layout=name.split("-")[1])
    else:
        import_hdf5(output, work / f"imported-{name}.mmr")
        output = work / f"imported-{name}.mmr"
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec, so it would report the parent's
    # peak (the recording) rather than this phase's.
    return {"seconds": time.perf_counter() - began, "bytes": size_of(output),
            "peak_rss": proc_field("/proc/self/status", "VmHWM:")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transitions", type=int, default=100_000)
    parser.add_argument("--game", default="pong")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.phase:
        print(json.dumps(phase(arguments.phase, arguments.workdir)))
        return
    stream_path(arguments.game)  # recorded here, before the timed phases, if it is not yet
    work = Path(tempfile.mkdtemp(prefix="bench-export-", dir=arguments.workdir))
    try:
        began = time.perf_counter()
        record(work / "store.mmr", arguments.game, arguments.transitions)
        print(f"recorded {arguments.transitions:,} {arguments.game} transitions in {time.perf_counter() - began:.1f} s",
              file=sys.stderr)
        rows = []
        for name in PHASES:
            done = subprocess.run([sys.executable, __file__, "--phase", name, "--workdir", str(work)],
                                  capture_output=True, text=True, check=True)
            result = json.loads(done.stdout.splitlines()[-1])
            rows.append((name, result))
        n = arguments.transitions
        print(f"\n{n:,} {arguments.game} transitions, 84x84 frames\n")
        print("| phase | transitions/s | file bytes / transition | peak RSS (MiB) | peak anonymous memory (MiB) |")
        print("|---|---:|---:|---:|---:|")
        for name, r in rows:
            print(f"| {name} | {n / r['seconds']:,.0f} | {r['bytes'] / n:,.0f} | {r['peak_rss'] / 2**20:,.0f} "
                  f"| {r['peak_anon'] / 2**20:,.0f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
