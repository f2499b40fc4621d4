"""What does add's fast path save, and does an add with Python scalars cost more than one with numpy scalars?

One process fills one store per add form (``mmreplay_adapters.ADD_FORMS``: single frames or 4-frame
stacks, with the stream's numpy scalars or with Python ``int``/``float``/``bool``), plus one store per
frame form fed Python scalars with the fast path switched off (``Writer._fast_add``, a private
switch: this is the general path every add took before the fast path, and still takes at episode starts).
The stores take turns, ``--block`` adds each, so a busy machine's drift hits every form alike; each
block's rate is measured in wall time and in the process's CPU time (which leaves out the time other
processes held the CPU). Prints the median block rates and their ratios as markdown.

    .venv/bin/python benchmarks/bench_add_paths.py                  # pong, 40,000 adds per form
    .venv/bin/python benchmarks/bench_add_paths.py --adds 100000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frame_streams import add_data_dir_argument, stream_path
from mmreplay_adapters import MmreplayAdapter
from peers import FrameStream

BATCH = 16  # adds timed together (their inputs, 16 pairs of 4-frame stacks, are ~0.9 MB)
# (label, add form, fast path on)
FORMS = (
    ("single frames, numpy scalars", "frames", True),
    ("single frames, Python scalars", "frames", True),
    ("single frames, Python scalars, general path", "frames", False),
    ("stacks, numpy scalars", "stacks", True),
    ("stacks, Python scalars", "stacks-python", True),
    ("stacks, Python scalars, general path", "stacks-python", False),
)


def python_scalars(inputs: tuple[object, ...]) -> tuple[object, ...]:
    """A single-frame add's numpy scalars as the Python int, float and bool a training loop passes."""
    obs, action, reward, next_obs, terminated, truncated = inputs
    return obs, int(action), float(reward), next_obs, bool(terminated), bool(truncated)  # type: ignore[call-overload]


def measure(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    stream = FrameStream.load(stream_path(args.game, args.data_dir))
    adapters = []
    for label, form, fast in FORMS:
        adapter = MmreplayAdapter(stream, args.capacity, 0, tmpdir=args.tmpdir, add_form=form)
        adapter.store._role._fast_add = fast and adapter.store._role._fast_add
        adapters.append((label, adapter))
    wall: dict[str, list[float]] = {label: [] for label, _ in adapters}
    cpu: dict[str, list[float]] = {label: [] for label, _ in adapters}
    try:
        for first in range(0, args.adds, args.block):
            for label, adapter in adapters:
                wall_s = cpu_s = 0.0
                convert = label.startswith("single frames, Python")
                for batch in range(first, first + args.block, BATCH):
                    # A few adds' inputs built ahead (untimed, still in cache), then timed together: the
                    # thread's CPU clock is a system call, too slow to read around each add.
                    inputs = [adapter.inputs(i) for i in range(batch, min(batch + BATCH, first + args.block))]
                    if convert:
                        inputs = [python_scalars(x) for x in inputs]
                    start, start_cpu = time.perf_counter(), time.thread_time()
                    for x in inputs:
                        adapter.add(*x)
                    cpu_s += time.thread_time() - start_cpu
                    wall_s += time.perf_counter() - start
                wall[label].append(args.block / wall_s)
                cpu[label].append(args.block / cpu_s)
    finally:
        for _, adapter in adapters:
            adapter.close()
    return {label: {"wall": statistics.median(wall[label]), "cpu": statistics.median(cpu[label])} for label in wall}


def report(args: argparse.Namespace, rates: dict[str, dict[str, float]]) -> str:
    lines = [
        f"## add's paths: {args.game}, capacity {args.capacity:,}, {args.adds:,} adds per form in blocks of "
        f"{args.block:,}, median block rates",
        "",
        "| add | transitions/s (wall) | transitions/s (CPU time) | vs numpy scalars, same frames (CPU) |",
        "|---|---:|---:|---:|",
    ]
    for label, rate in rates.items():
        base = rates["stacks, numpy scalars" if label.startswith("stacks") else "single frames, numpy scalars"]
        lines.append(f"| {label} | {rate['wall']:,.0f} | {rate['cpu']:,.0f} | {rate['cpu'] / base['cpu']:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", choices=("pong", "breakout", "mspacman"), default="pong")
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--adds", type=int, default=40_000, help="adds per form")
    parser.add_argument("--block", type=int, default=1_000, help="adds per form per turn")
    parser.add_argument("--tmpdir", help="directory (on disk) for the temporary stores")
    add_data_dir_argument(parser)
    args = parser.parse_args(argv)
    if args.adds < args.block or args.block < 1:
        parser.error(f"--adds must be >= --block >= 1; got {args.adds} and {args.block}")
    print(report(args, measure(args)))


if __name__ == "__main__":
    main()
