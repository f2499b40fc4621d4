"""One command for the benchmark report: run bench_core and bench_paired (and optionally bench_scale),
then write ``benchmarks/results/REPORT.md`` (tables, ratios, targets) and ``benchmarks/results/report.png``
(sample batches/s and bytes per transition of mmreplay and each peer).

    .venv/bin/python benchmarks/report.py                        # pong at 100,000 and 1,000,000, 5 repeats
    .venv/bin/python benchmarks/report.py --quick                # 20,000 transitions, 1 repeat: a smoke run
    .venv/bin/python benchmarks/report.py --capacity 100000 --repeats 3 --scale
    .venv/bin/python benchmarks/report.py --render-only          # redraw from the JSON files already there

The raw figures stay beside the report: ``core-<game>-<capacity>.json`` (bench_core's ``--json``),
``paired-<game>-<capacity>.json`` (bench_paired's) and ``scale-<game>.json`` (bench_scale's). The figure
needs matplotlib (``pip install -e '.[plot]'``); without it the report is written without the figure,
with a note.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_OUT = HERE / "results"
QUICK = {"capacity": [20_000], "repeats": 1, "sample_seconds": 0.5, "scale_transitions": 200_000, "rounds": 3}
MMREPLAY = "mmreplay"  # the one-env store every ratio is taken against


def run(command: list[str]) -> None:
    """Run a benchmark, its progress (stderr) and its markdown (stdout) passing through."""
    print("$ " + " ".join(command), file=sys.stderr, flush=True)
    done = subprocess.run(command, check=False, cwd=REPO)
    if done.returncode != 0:
        sys.exit(f"{Path(command[1]).name} failed with exit status {done.returncode}")


def run_benchmarks(args: argparse.Namespace) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    for capacity in args.capacity:
        command = [sys.executable, str(HERE / "bench_core.py"), "--game", args.game, "--capacity", str(capacity),
                   "--repeats", str(args.repeats), "--sample-seconds", str(args.sample_seconds),
                   "--json", str(core_json(args, capacity))]
        if args.peers is not None:
            command += ["--peers", args.peers]
        if args.tmpdir:
            command += ["--tmpdir", args.tmpdir]
        run(command)
        if args.paired:
            command = [sys.executable, str(HERE / "bench_paired.py"), "--game", args.game, "--capacity", str(capacity),
                       "--rounds", str(args.rounds), "--json", str(paired_json(args, capacity))]
            if args.peers is not None:
                command += ["--peers", args.peers]
            if args.tmpdir:
                command += ["--tmpdir", args.tmpdir]
            run(command)
    if args.scale:
        command = [sys.executable, str(HERE / "bench_scale.py"), "--game", args.game,
                   "--transitions", str(args.scale_transitions), "--json", str(scale_json(args))]
        if args.tmpdir:
            command += ["--dir", args.tmpdir]
        run(command)


def core_json(args: argparse.Namespace, capacity: int) -> Path:
    return args.out / f"core-{args.game}-{capacity}.json"


def paired_json(args: argparse.Namespace, capacity: int) -> Path:
    return args.out / f"paired-{args.game}-{capacity}.json"


def scale_json(args: argparse.Namespace) -> Path:
    return args.out / f"scale-{args.game}.json"


# -- the markdown ------------------------------------------------------------------------------------


def _num(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or not b:
        return "n/a"
    ratio = a / b
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.4f}x"


def bytes_per_transition(result: dict) -> tuple[float | None, str]:
    """The bytes a buffer keeps per transition, and where: mmreplay on disk, the peers in RAM."""
    if result["bytes_per_transition"] is None:
        return result["anon_bytes_per_transition"], "anon"
    return result["bytes_per_transition"], "RAM"


def core_section(core: dict) -> list[str]:
    results, labels = core["results"], core.get("labels", {})
    lines = [
        f"## {core['game']}, capacity {core['capacity']:,}",
        "",
        (f"Median of {core['repeats']} repeats, each buffer in a fresh process; batch {core['batch_size']}, "
        f"stack {core['stack_size']}, {core['sample_seconds']:g} s of sampling per measurement, malloc "
        f"{core['malloc']}. Ratios are mmreplay (1 env) divided by the row's buffer: above 1x mmreplay adds or "
        "samples faster; below 1x it keeps fewer bytes."),
        "",
        ("| buffer | capacity | add (transitions/s) | sample (batches/s) | bytes/transition | "
        "anon memory growth (MiB) | add ratio | sample ratio | bytes ratio |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    mm = results.get(MMREPLAY)
    for name, r in results.items():
        kept, where = bytes_per_transition(r)
        where = "disk" if name.startswith(MMREPLAY) else where
        if mm and name != MMREPLAY:
            ratios = [_ratio(mm["add_per_s"], r["add_per_s"]), _ratio(mm["sample_per_s"], r["sample_per_s"]),
                      _ratio(mm["bytes_per_transition"], kept)]
        else:
            ratios = ["", "", ""]
        lines.append(f"| {labels.get(name, name)} | {r['capacity']:,} | {_num(r['add_per_s'])} | "
                     f"{_num(r['sample_per_s'])} | {_num(kept)} ({where}) | "
                     f"{_num(r['rss_anon_growth'] / 2**20, 1)} | {' | '.join(ratios)} |")
    for group, title in (("baseline", "Baseline targets"), ("speed", "Speed targets"),
                         ("training-loop add", "Targets of the add training loops make")):
        rows = [t for t in core.get("targets", []) if t["group"] == group]
        if rows:
            lines += ["", f"{title}:", ""]
            lines += [f"- {t['target']}: {t['value']} **{'met' if t['met'] else 'NOT met'}**"
                      + (f" ({t['note']})" if t["note"] else "") for t in rows]
    if core.get("notes"):
        lines += ["", "Notes:", ""] + [f"- {note}" for note in core["notes"]]
    return lines


def paired_section(paired: dict) -> list[str]:
    import bench_paired  # beside this script; its markdown from the figures, so a render uses today's wording

    text = bench_paired.markdown(paired)
    return ["", text.replace("## mmreplay vs peers, sampling in turns:", "### Sampling in turns:")]


def scale_section(scale: dict) -> list[str]:
    return ["", scale["markdown"].replace("## mmreplay at scale", "## Scale")]


def machine_line() -> str:
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=False, cwd=REPO, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    return (f"{model}, {os.cpu_count()} CPUs, {memory:.0f} GiB RAM, Python {platform.python_version()}, "
            f"commit {commit}")


def write_markdown(
    args: argparse.Namespace, cores: list[dict], paired: dict[int, dict], scale: dict | None, figure: str | None
) -> Path:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# mmreplay benchmark report",
        "",
        (f"Written {now} by `{' '.join(['benchmarks/report.py', *sys.argv[1:]])}` on {machine_line()}. "
        "Real Atari frames (recorded with ALE by `mmreplay.testing.atari_frames`), peers measured in the same run. "
        "Timings are wall-clock and "
        "move with the machine's load (see each section's notes): compare ratios within a section. The "
        "sampling ratios of the \"sampling in turns\" tables (bench_paired) are the steadier ones: there "
        "mmreplay and one peer, both built, sample in alternating half-second windows."),
    ]
    if figure:
        lines += ["", f"![sample batches/s and bytes per transition]({figure})"]
    for core in cores:
        lines += [""] + core_section(core)
        if core["capacity"] in paired:
            lines += paired_section(paired[core["capacity"]])
    if scale:
        lines += scale_section(scale)
    path = args.out / "REPORT.md"
    path.write_text("\n".join(lines) + "\n")
    return path


# -- the figure ----------------------------------------------------------------------------------------


def write_figure(args: argparse.Namespace, cores: list[dict]) -> str | None:
    """Two panels, one bar per buffer and capacity: sample batches/s, bytes/transition (log)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed (pip install -e '.[plot]'): no report.png", file=sys.stderr)
        return None
    names: list[str] = []
    for core in cores:
        names += [n for n in core["results"] if n not in names]
    figure, (speed, size) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(1, len(cores))
    for k, core in enumerate(cores):
        core.get("labels", {})
        xs, rates, kept = [], [], []
        for i, name in enumerate(names):
            if name in core["results"]:
                r = core["results"][name]
                xs.append(i + (k - (len(cores) - 1) / 2) * width)
                rates.append(r["sample_per_s"])
                kept.append(bytes_per_transition(r)[0])
        label = f"capacity {core['capacity']:,}"
        speed.bar_label(speed.bar(xs, rates, width, label=label), fmt="{:,.0f}", fontsize=7)
        size.bar_label(size.bar(xs, kept, width, label=label), fmt="{:,.0f}", fontsize=7)
        for x, name in zip(xs, [n for n in names if n in core["results"]]):
            if core["results"][name]["capacity"] != core["capacity"]:  # a peer shrunk to fit in memory
                speed.annotate(f"at {core['results'][name]['capacity']:,}", (x, 0), rotation=90, fontsize=7,
                               ha="center", va="bottom", xytext=(0, 3), textcoords="offset points")
    ticks = [cores[0].get("labels", {}).get(n, n) for n in names]
    for axis in (speed, size):
        axis.set_xticks(range(len(names)), ticks, rotation=20, ha="right")
        axis.legend(fontsize=8)
        axis.grid(axis="y", alpha=0.3)
    speed.set_ylabel(f"sample: batches of {cores[0]['batch_size']} per second")
    speed.set_title("sampling speed (higher is better)")
    size.set_yscale("log")
    size.set_ylabel("bytes per transition (log)")
    size.set_title("kept per transition: mmreplay on disk, peers in RAM (lower is better)")
    size.title.set_fontsize(10)
    repeats = ", ".join(f"{core['repeats']} at {core['capacity']:,}" for core in cores)
    figure.suptitle(f"{cores[0]['game']}: medians of repeats ({repeats})")
    figure.tight_layout()
    path = args.out / "report.png"
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path.name


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", choices=("pong", "breakout", "mspacman"), default="pong")
    parser.add_argument("--capacity", default="100000,1000000", help="comma-separated capacities for bench_core")
    parser.add_argument("--repeats", type=int, default=5, help="bench_core repeats per buffer")
    parser.add_argument("--sample-seconds", type=float, default=1.0)
    parser.add_argument("--peers", help="bench_core's --peers (default: all)")
    parser.add_argument("--no-paired", dest="paired", action="store_false",
                        help="skip bench_paired (sampling ratios measured in alternating windows)")
    parser.add_argument("--rounds", type=int, default=20, help="bench_paired's rounds per peer")
    parser.add_argument("--scale", action="store_true", help="also run bench_scale (10,000,000 transitions)")
    parser.add_argument("--scale-transitions", type=int, default=10_000_000)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: capacity 20,000, 1 repeat, 0.5 s of sampling, scale at 200,000")
    parser.add_argument("--tmpdir", help="where the stores live while measured (on disk)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where REPORT.md, report.png and JSON go")
    parser.add_argument("--render-only", action="store_true", help="write the report from the JSON files in --out")
    args = parser.parse_args(argv)
    args.capacity = [int(c.replace("_", "")) for c in args.capacity.split(",") if c.strip()]
    if args.quick:
        args.capacity, args.repeats = QUICK["capacity"], QUICK["repeats"]
        args.sample_seconds, args.scale_transitions = QUICK["sample_seconds"], QUICK["scale_transitions"]
        args.rounds = QUICK["rounds"]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not args.render_only:
        run_benchmarks(args)
    cores = [json.loads(core_json(args, c).read_text()) for c in args.capacity if core_json(args, c).exists()]
    if not cores:
        sys.exit(f"no bench_core results in {args.out} for capacities {args.capacity}")
    scale = json.loads(scale_json(args).read_text()) if scale_json(args).exists() and (
        args.scale or args.render_only) else None
    paired = {c: json.loads(paired_json(args, c).read_text()) for c in args.capacity if paired_json(args, c).exists()}
    figure = write_figure(args, cores)
    path = write_markdown(args, cores, paired, scale, figure)
    print(f"wrote {path}" + (f" and {args.out / figure}" if figure else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
