"""How fast does mmreplay add and sample, and how little does it keep, against in-RAM peers, on real frames?

Feeds a real Atari frame stream (20,000 frames recorded with ALE, see ``frame_streams.py``; episode
boundaries from the stream) cyclically into each buffer, one add per env step, until it holds
``--capacity`` transitions; then samples uniform batches of ``--batch-size`` 4-frame stacks. mmreplay
is fed by one env (its adds in three forms, below), and by ``--vector-envs`` envs (8) that play the
stream from different episode starts, one vector add of ``(8, 84, 84)`` arrays per env step. Each buffer is
measured in a fresh subprocess per repeat, so its anonymous memory (``RssAnon``) starts clean and one
buffer's memory never weighs on another's. Prints medians over ``--repeats``, mmreplay's ratio against
each peer, and the baseline, speed and training-loop add targets as markdown; ``--json`` also writes them
machine-readable (``benchmarks/report.py`` reads that file).

    .venv/bin/python benchmarks/bench_core.py                     # pong, capacity 100,000, all peers
    .venv/bin/python benchmarks/bench_core.py --game mspacman --capacity 1000000 --peers numpy
    .venv/bin/python benchmarks/bench_core.py --frame-encoding lz4-reference --peers numpy --repeats 3

One env's adds are measured in three forms (``mmreplay_adapters.ADD_FORMS``): single frames with the
stream's numpy scalars (``mmreplay``), and 4-frame stacks with numpy scalars (``mmreplay-stacks``) or
with Python ``int``/``float``/``bool`` (``mmreplay-stacks-py``: ``add(stack, 1, 0.0, next_stack, False,
False)``, the call CleanRL, SB3 and most single-env loops make). The training-loop add targets compare the last
with the numpy-scalar figures of the same run.

``--frame-encoding`` picks how mmreplay's stores compress frames (``ReplayStore.create``'s option):
``lz4`` (each frame alone, the default) or ``lz4-reference`` (each frame against an earlier frame of
its env); the speed targets' bytes bound is checked for the latter.

A peer whose package is missing is skipped with a note; a peer whose arrays would not fit in memory at
``--capacity`` is measured at the largest capacity that fits, and the output says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import load_average, mem_available, on_tmpfs, rss_anon
from mmreplay_adapters import MmreplayAdapter, MmreplayVectorAdapter
from frame_streams import add_data_dir_argument, data_dir_arguments, stream_path
from peers import (
    ESTIMATED_BYTES_PER_TRANSITION,
    PEER_PACKAGES,
    PEERS,
    STACK_SIZE,
    Adapter,
    FrameStream,
)
from timing import batches_per_second

REPO = Path(__file__).resolve().parents[1]
GAMES = ("pong", "breakout", "mspacman")
# One env (single frames; stacks with numpy scalars; stacks with Python scalars); a vector of --vector-envs envs.
MMREPLAY = ("mmreplay", "mmreplay-stacks", "mmreplay-stacks-py", "mmreplay-vec")
ONE_ENV_ADD_FORMS = {"mmreplay": "frames", "mmreplay-stacks": "stacks", "mmreplay-stacks-py": "stacks-python"}
ONE_ENV_LABELS = {"mmreplay-stacks": "mmreplay (stacks, numpy scalars)",
                  "mmreplay-stacks-py": "mmreplay (stacks, Python scalars)"}
BUFFERS = (*MMREPLAY, "sb3", "cpprb", "numpy")
# The baseline targets (bytes on disk per transition; sample >= 0.5x the numpy ring; add).
BYTES_TARGET = {"pong": 320, "mspacman": 2_100}
SAMPLE_TARGET_VS_NUMPY = 0.5
ADD_TARGET = 20_000
# The speed targets: add for one env and for a vector of 8; sample against each peer.
ADD_TARGET_ONE_ENV = 50_000
ADD_TARGET_VECTOR = 100_000
VECTOR_TARGET_ENVS = 8
SAMPLE_TARGET_VS_PEER = {"numpy": 1.0, "cpprb": 1.2, "sb3": 1.2}
# The speed targets' denser encoding: bytes on disk per transition with frame_encoding="lz4-reference".
DENSE_BYTES_TARGET = {"pong": 130, "mspacman": 650}
# The training-loop add targets: one env's add with Python scalars and stacks, and its ratio to the
# numpy-scalar add.
ADD_TARGET_PYTHON_SCALARS = 50_000
PYTHON_SCALARS_TARGET_RATIO = 0.9
FRAME_ENCODINGS = ("lz4", "lz4-reference")
VERIFY_BATCHES = 20  # sampled batches per mmreplay measurement checked against the stream
# A batch of 4-stacks is ~0.9 MB per array. With glibc's defaults such arrays fall either side of the
# dynamic mmap threshold and the heap top is trimmed after each batch, so every batch page-faults its
# output in again: on this VM that made the numpy ring 7x slower (1,550 vs 220 us a batch) and swung
# each buffer by a different amount, measuring the allocator rather than the buffer. "steady" fixes
# both thresholds at 256 MiB for every worker alike; "--malloc default" measures glibc as it comes.
MALLOC_STEADY_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 28), "MALLOC_TRIM_THRESHOLD_": str(1 << 28)}


def label(name: str, vector_envs: int) -> str:
    """A buffer's name in tables: the vector-env store says how many envs it was fed, the one-env
    stores the form of their adds."""
    if name == "mmreplay-vec":
        return f"mmreplay ({vector_envs} envs)"
    return ONE_ENV_LABELS.get(name, name)


# -- one measurement, in its own process -------------------------------------------------------------


def make_adapter(args: argparse.Namespace, stream: FrameStream) -> Adapter:
    name = args.worker
    if name in ONE_ENV_ADD_FORMS:
        return MmreplayAdapter(stream, args.capacity, args.seed, tmpdir=args.tmpdir,
                               frame_encoding=args.frame_encoding, reuse_out=args.reuse_out,
                               add_form=ONE_ENV_ADD_FORMS[name])
    if name == "mmreplay-vec":
        return MmreplayVectorAdapter(stream, args.capacity, args.seed, tmpdir=args.tmpdir,
                                     num_envs=args.vector_envs, frame_encoding=args.frame_encoding,
                                     reuse_out=args.reuse_out)
    return PEERS[name](stream, args.capacity, args.seed)


def measure(args: argparse.Namespace) -> dict[str, object]:
    name = args.worker
    stream = FrameStream.load(stream_path(args.game, args.data_dir))
    if name not in MMREPLAY:
        __import__(PEER_PACKAGES[name])  # imports are not the buffer's memory
        if name == "sb3":
            import gymnasium  # noqa: F401
            import torch  # noqa: F401
    else:
        import mmreplay  # noqa: F401
    rss_before = rss_anon()
    adapter = make_adapter(args, stream)
    try:
        per_add = getattr(adapter, "transitions_per_add", 1)
        adds = -(-args.capacity // per_add)
        add_seconds = 0.0
        clock = time.perf_counter
        for i in range(adds):
            inputs = adapter.inputs(i)
            start = clock()
            adapter.add(*inputs)
            add_seconds += clock() - start
        if name in MMREPLAY:
            start = clock()
            adapter.flush()  # the commit that makes the fill durable counts as add time
            add_seconds += clock() - start
        rss_after = rss_anon()
        stored = len(adapter)
        bytes_per_transition = adapter.bytes_per_transition()

        sample_per_s = batches_per_second(lambda: adapter.sample(args.batch_size), args.sample_seconds)
        mismatches = adapter.verify(args.batch_size, VERIFY_BATCHES) if name in MMREPLAY and args.verify else None
    finally:
        adapter.close()
    return {
        "buffer": name,
        "capacity": args.capacity,
        "transitions": stored,
        "transitions_per_add": per_add,
        "add_per_s": adds * per_add / add_seconds,
        "sample_per_s": sample_per_s,
        "bytes_per_transition": bytes_per_transition,
        "rss_anon_growth": rss_after - rss_before,
        "verify_mismatches": mismatches,
    }


# -- the run: every buffer, every repeat -------------------------------------------------------------


def plan_buffers(args: argparse.Namespace) -> tuple[dict[str, int], list[str]]:
    """The capacity each buffer runs at, and notes on peers skipped or shrunk."""
    notes: list[str] = []
    capacities = dict.fromkeys(ONE_ENV_ADD_FORMS, args.capacity)
    if args.vector_envs:
        capacities["mmreplay-vec"] = args.capacity
    budget = int(mem_available() * args.memory_fraction)
    for name in args.peers:
        if importlib.util.find_spec(PEER_PACKAGES[name]) is None:
            notes.append(f"{name}: skipped, package {PEER_PACKAGES[name]!r} is not installed "
                         f"(`.venv/bin/pip install -e '.[peers]'`)")
            continue
        needed = args.capacity * ESTIMATED_BYTES_PER_TRANSITION[name]
        if needed <= budget:
            capacities[name] = args.capacity
            continue
        fits = budget // ESTIMATED_BYTES_PER_TRANSITION[name] // 10_000 * 10_000
        if fits < 10_000:
            notes.append(f"{name}: skipped, not even 10,000 transitions fit in {budget / 2**30:.1f} GiB")
            continue
        capacities[name] = fits
        notes.append(
            f"{name}: measured at capacity {fits:,}, not {args.capacity:,}: it needs about "
            f"{needed / 2**30:.1f} GiB of RAM and {args.memory_fraction:.0%} of MemAvailable is "
            f"{budget / 2**30:.1f} GiB"
        )
    tmp = args.tmpdir or tempfile.gettempdir()
    free = shutil.disk_usage(tmp).free
    if free < args.capacity * 3_000:
        notes.append(f"mmreplay: only {free / 2**30:.1f} GiB free in {tmp}; the store may not fit")
    if on_tmpfs(tmp):
        notes.append(f"mmreplay: {tmp} is a tmpfs (RAM), not disk; pass --tmpdir on a disk")
    return capacities, notes


def run_worker(args: argparse.Namespace, name: str, capacity: int, repeat: int) -> dict[str, object]:
    command = [
        sys.executable, __file__, "--worker", name, "--game", args.game, "--capacity", str(capacity),
        "--batch-size", str(args.batch_size), "--sample-seconds", str(args.sample_seconds),
        *data_dir_arguments(args.data_dir), "--seed", str(args.seed + repeat),
        "--vector-envs", str(args.vector_envs), "--frame-encoding", args.frame_encoding,
    ]
    if args.tmpdir:
        command += ["--tmpdir", args.tmpdir]
    if not args.verify:
        command.append("--no-verify")
    if args.reuse_out:
        command.append("--reuse-out")
    env = dict(os.environ)
    if args.malloc == "steady":
        env.update(MALLOC_STEADY_ENV)
    done = subprocess.run(command, check=False, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{name} (repeat {repeat + 1}) failed with exit status {done.returncode}:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarize(runs: list[dict[str, object]]) -> dict[str, object]:
    def median(key: str) -> float | None:
        values = [r[key] for r in runs if r[key] is not None]
        return statistics.median(values) if values else None

    summary = {key: median(key) for key in ("add_per_s", "sample_per_s", "bytes_per_transition", "rss_anon_growth")}
    summary["capacity"] = runs[0]["capacity"]
    summary["transitions"] = runs[0]["transitions"]
    summary["anon_bytes_per_transition"] = summary["rss_anon_growth"] / max(1, summary["transitions"])
    mismatches = [r["verify_mismatches"] for r in runs if r["verify_mismatches"] is not None]
    summary["verify_mismatches"] = sum(mismatches) if mismatches else None
    return summary


def _num(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or not b:
        return "n/a"
    ratio = a / b
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.4f}x"


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def check_targets(args: argparse.Namespace, results: dict[str, dict[str, object]]) -> list[dict[str, object]]:
    """The targets that this run's results can check, by group (baseline, speed, training-loop add): one
    record each."""
    checks: list[dict[str, object]] = []

    def check(group: str, target: str, value: str, met: bool, note: str = "") -> None:
        checks.append({"group": group, "target": target, "value": value, "met": met, "note": note})

    mm, vec = results.get("mmreplay"), results.get("mmreplay-vec")
    if mm:
        check("baseline", f"add >= {ADD_TARGET:,} transitions/s", _num(mm["add_per_s"]), mm["add_per_s"] >= ADD_TARGET)
        if args.game in BYTES_TARGET:
            target = BYTES_TARGET[args.game]
            check("baseline", f"bytes on disk/transition <= {target:,}", _num(mm["bytes_per_transition"]),
                  mm["bytes_per_transition"] <= target)
        if args.game in DENSE_BYTES_TARGET and args.frame_encoding == "lz4-reference":
            target = DENSE_BYTES_TARGET[args.game]
            check("speed", f"bytes on disk/transition <= {target:,} with frame_encoding='lz4-reference'",
                  _num(mm["bytes_per_transition"]), mm["bytes_per_transition"] <= target)
        if "numpy" in results:
            ratio = mm["sample_per_s"] / results["numpy"]["sample_per_s"]
            check("baseline", f"sample >= {SAMPLE_TARGET_VS_NUMPY}x the numpy ring", f"{ratio:.2f}x",
                  ratio >= SAMPLE_TARGET_VS_NUMPY)
        check("speed", f"add >= {ADD_TARGET_ONE_ENV:,} transitions/s, one env", _num(mm["add_per_s"]),
              mm["add_per_s"] >= ADD_TARGET_ONE_ENV)
    check_python_scalars(results, check)
    if vec:
        note = "" if args.vector_envs == VECTOR_TARGET_ENVS else f"measured with {args.vector_envs} envs"
        check("speed", f"add >= {ADD_TARGET_VECTOR:,} transitions/s, vector add of {VECTOR_TARGET_ENVS} envs",
              _num(vec["add_per_s"]), vec["add_per_s"] >= ADD_TARGET_VECTOR, note)
    if mm:
        for peer, target in SAMPLE_TARGET_VS_PEER.items():
            if peer not in results:
                continue
            ratio = mm["sample_per_s"] / results[peer]["sample_per_s"]
            capacity = results[peer]["capacity"]
            note = "" if capacity == mm["capacity"] else (
                f"{peer} at capacity {capacity:,} (the largest that fits), mmreplay at {mm['capacity']:,}")
            check("speed", f"sample >= {target}x {peer}", f"{ratio:.2f}x", ratio >= target, note)
    for name in MMREPLAY:
        mismatches = results.get(name, {}).get("verify_mismatches")
        if mismatches is not None:
            checked = VERIFY_BATCHES * args.batch_size * args.repeats
            check("baseline", f"{label(name, args.vector_envs)}: sampled batches equal the stream they came from",
                  f"{mismatches:,} of {checked:,} sampled transitions differ", mismatches == 0)
    return checks


def check_python_scalars(results: dict[str, dict[str, object]], check: Callable[..., None]) -> None:
    """The training-loop add targets: the add CleanRL and SB3 make (one env, Python scalars, stacks) is as
    fast as the same add with numpy scalars, and as the single-frame add."""
    python = results.get("mmreplay-stacks-py")
    if not python:
        return
    rate = python["add_per_s"]
    group = "training-loop add"
    check(group, f"add >= {ADD_TARGET_PYTHON_SCALARS:,} transitions/s, one env, Python scalars and stacks",
          _num(rate), rate >= ADD_TARGET_PYTHON_SCALARS)
    for name, what in (("mmreplay-stacks", "numpy scalars and stacks"), ("mmreplay", "numpy scalars and single frames")):
        if name in results:
            ratio = rate / results[name]["add_per_s"]
            check(group, f"add with Python scalars and stacks >= {PYTHON_SCALARS_TARGET_RATIO}x the add with {what}",
                  f"{ratio:.2f}x ({_num(rate)} against {_num(results[name]['add_per_s'])})",
                  ratio >= PYTHON_SCALARS_TARGET_RATIO)


def report(args: argparse.Namespace, results: dict[str, dict[str, object]], notes: list[str],
           checks: list[dict[str, object]]) -> str:
    lines = [
        (f"## mmreplay vs peers: {args.game}, capacity {args.capacity:,}, stack {STACK_SIZE}, "
        f"batch {args.batch_size}, median of {args.repeats} repeats, malloc {args.malloc}, "
        f"frame encoding {args.frame_encoding}" + (", mmreplay samples with out=" if args.reuse_out else "")),
        "",
        ("| buffer | capacity | add (transitions/s) | sample (batches/s) | bytes/transition | "
        "anon memory growth (MiB) | anon bytes/transition |"),
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        stored = r["bytes_per_transition"]
        bytes_cell = _num(stored) if stored is not None else f"{_num(r['anon_bytes_per_transition'])} (anon)"
        lines.append(
            f"| {label(name, args.vector_envs)} | {r['capacity']:,} | {_num(r['add_per_s'])} | "
            f"{_num(r['sample_per_s'])} | {bytes_cell} | {_num(r['rss_anon_growth'] / 2**20, 1)} | "
            f"{_num(r['anon_bytes_per_transition'])} |"
        )
    mm = results.get("mmreplay")
    peers = [name for name in results if name not in MMREPLAY]
    if mm and peers:
        lines += [
            "",
            ("| mmreplay (1 env) vs | peer capacity | add (higher: mmreplay faster) | sample (higher: faster) | "
            "bytes/transition (lower: smaller) | anon bytes/transition (lower: smaller) |"),
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name in peers:
            p = results[name]
            peer_bytes = p["bytes_per_transition"] or p["anon_bytes_per_transition"]
            lines.append(
                f"| {name} | {p['capacity']:,} | {_ratio(mm['add_per_s'], p['add_per_s'])} | "
                f"{_ratio(mm['sample_per_s'], p['sample_per_s'])} | "
                f"{_ratio(mm['bytes_per_transition'], peer_bytes)} | "
                f"{_ratio(mm['anon_bytes_per_transition'], p['anon_bytes_per_transition'])} |"
            )
    for group, title in (("baseline", "Baseline targets:"), ("speed", "Speed targets:"),
                         ("training-loop add", "Targets of the add training loops make:")):
        rows = [c for c in checks if c["group"] == group]
        if rows:
            lines += ["", title]
            lines += [f"- {c['target']}: {c['value']} {_verdict(bool(c['met']))}"
                      + (f" ({c['note']})" if c["note"] else "") for c in rows]
    if notes:
        lines += ["", "Notes:"] + [f"- {note}" for note in notes]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", choices=GAMES, default="pong", help="which frame stream to replay")
    parser.add_argument("--capacity", type=int, default=100_000, help="transitions each buffer is filled to")
    parser.add_argument("--repeats", type=int, default=5, help="fresh-process measurements per buffer")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--peers", default=",".join(PEERS),
                        help=f"comma-separated peers to measure beside mmreplay, of {','.join(PEERS)}; '' for none")
    parser.add_argument("--no-mmreplay", dest="mmreplay", action="store_false", help="measure only the peers")
    parser.add_argument("--vector-envs", type=int, default=VECTOR_TARGET_ENVS,
                        help="also measure mmreplay fed by this many envs, one vector add per env step; 0: skip")
    parser.add_argument("--sample-seconds", type=float, default=1.0, help="time spent sampling per measurement")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    add_data_dir_argument(parser)
    parser.add_argument("--tmpdir", help="directory (on disk) for mmreplay's temporary store")
    parser.add_argument("--memory-fraction", type=float, default=0.6,
                        help="share of MemAvailable a peer may use before its capacity is reduced")
    parser.add_argument("--no-verify", dest="verify", action="store_false",
                        help="skip checking mmreplay's sampled batches against the stream")
    parser.add_argument("--malloc", choices=("steady", "default"), default="steady",
                        help="glibc allocator settings for the workers (see MALLOC_STEADY_ENV)")
    parser.add_argument("--frame-encoding", choices=FRAME_ENCODINGS, default="lz4",
                        help="how mmreplay's stores compress frames (ReplayStore.create's frame_encoding)")
    parser.add_argument("--reuse-out", action="store_true",
                        help="mmreplay samples into the previous batch's arrays (sample(out=...))")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", choices=BUFFERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    check_shared_args(parser, args)
    if not 0 <= args.vector_envs <= 1024:
        parser.error(f"--vector-envs must be in [0, 1024]; got {args.vector_envs}")
    return args


def check_shared_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--peers (made a list), --capacity and --tmpdir, as bench_core and bench_paired take them."""
    args.peers = [p for p in (s.strip() for s in args.peers.split(",")) if p]
    unknown = sorted(set(args.peers) - set(PEERS))
    if unknown:
        parser.error(f"--peers: unknown {unknown}; choose from {list(PEERS)}")
    if args.capacity < 1_000:
        parser.error(f"--capacity must be >= 1,000; got {args.capacity}")
    if args.tmpdir is not None and not Path(args.tmpdir).is_dir():
        parser.error(f"--tmpdir: {args.tmpdir} is not a directory")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(measure(args)))
        return
    stream_path(args.game, args.data_dir)  # recorded here once, before the workers read it
    capacities, notes = plan_buffers(args)
    if not args.mmreplay:
        capacities = {name: capacity for name, capacity in capacities.items() if name not in MMREPLAY}
    load_before = load_average()
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    runs: dict[str, list[dict[str, object]]] = {name: [] for name in capacities}
    started = time.perf_counter()
    for repeat in range(args.repeats):
        for name, capacity in capacities.items():  # interleaved, so drift on a busy machine hits all alike
            t0 = time.perf_counter()
            run = run_worker(args, name, capacity, repeat)
            runs[name].append(run)
            print(
                f"[{time.perf_counter() - started:6.0f}s] repeat {repeat + 1}/{args.repeats} {name:12s} "
                f"add {run['add_per_s']:9,.0f}/s  sample {run['sample_per_s']:7,.0f}/s  "
                f"({time.perf_counter() - t0:.1f}s)",
                file=sys.stderr,
                flush=True,
            )
    results = {name: summarize(r) for name, r in runs.items()}
    notes.append(f"one-minute load average {load_before:.2f} at the start, {load_average():.2f} at the end "
                 f"({os.cpu_count()} CPUs): above ~1 the figures share the machine with other work")
    checks = check_targets(args, results)
    print(report(args, results, notes, checks))
    if args.json:
        payload = {
            "game": args.game, "capacity": args.capacity, "stack_size": STACK_SIZE, "batch_size": args.batch_size,
            "repeats": args.repeats, "sample_seconds": args.sample_seconds, "malloc": args.malloc,
            "vector_envs": args.vector_envs, "frame_encoding": args.frame_encoding, "reuse_out": args.reuse_out,
            "labels": {name: label(name, args.vector_envs) for name in results},
            "notes": notes, "targets": checks, "results": results, "runs": runs,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"\nwrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
