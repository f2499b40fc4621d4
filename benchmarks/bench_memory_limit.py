"""Sampling a store from a process in a memory cgroup: a store larger than the cgroup allows,
and one that fits, each sampled by this tree's package and a base tree's in alternating runs.

A store maps its segment files ``MADV_RANDOM`` when they outgrow half of the memory the process may use.
Before the store read its cgroup's limit, that memory was the machine's ``MemAvailable``, which does not
see a container's or a batch job's limit: in a cgroup of 300 MB, a 1 GiB store was read around, each page fault reading the
disk's read-ahead window and evicting what the next faults need. This measures, for each tree and each
store, a fresh process placed in a new cgroup (v1 ``memory.limit_in_bytes`` or v2 ``memory.max``,
whichever this machine lets it make) before Python starts, with the store's pages evicted from the page
cache first (``posix_fadvise(DONTNEED)`` on each file; ``--drop-caches`` drops the whole page cache as
well, which needs root): uniform ``sample(32)`` batches per second over ``--seconds`` (and over the
second half alone: the steady rate once a store that fits is cached), the bytes the process read from
the disk per batch (``/proc/self/io``'s ``read_bytes``), the cgroup's peak usage and the policy the
store reports (this tree's ``page_cache_advice()``; the base has none).

Stores are built once from the recorded MsPacman stream (plain lz4, stack 4) and kept in ``--dir``::

    git worktree add /tmp/base main && (cd /tmp/base && /work/main/.venv/bin/python setup.py build_ext --inplace -q)
    sudo .venv/bin/python benchmarks/bench_memory_limit.py --base /tmp/base --rounds 3 \\
        --json benchmarks/results/memory-limit-2core.jsonl
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TREE = HERE.parent
sys.path.insert(1, str(HERE))
MiB = 1 << 20


# -- the cgroup ------------------------------------------------------------------------------------


def own_cgroup() -> tuple[int, Path] | None:
    """(version, directory) of this process's memory cgroup where a child of it can be made, else None."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            directory = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            if (directory / "memory.limit_in_bytes").exists() and os.access(directory, os.W_OK):
                return 1, directory
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":
            directory = Path("/sys/fs/cgroup") / path.lstrip("/")
            if "memory" in (directory / "cgroup.controllers").read_text().split() and os.access(directory, os.W_OK):
                return 2, directory
    return None


def make_cgroup(parent: tuple[int, Path], name: str, limit: int | None) -> Path:
    """A new child cgroup of ``parent`` limited to ``limit`` bytes (``None``: no limit of its own; v2:
    memory enabled for children first)."""
    version, directory = parent
    child = directory / name
    child.mkdir()
    if limit is None:
        return child
    if version == 1:
        (child / "memory.limit_in_bytes").write_text(str(limit))
    else:
        if "memory" not in (directory / "cgroup.subtree_control").read_text().split():
            (directory / "cgroup.subtree_control").write_text("+memory")  # EBUSY where this cgroup holds processes
        (child / "memory.max").write_text(str(limit))
        (child / "memory.swap.max").write_text("0") if (child / "memory.swap.max").exists() else None
    return child


def peak_usage(version: int, cgroup: Path) -> int | None:
    name = "memory.max_usage_in_bytes" if version == 1 else "memory.peak"
    try:
        return int((cgroup / name).read_text())
    except (OSError, ValueError):
        return None


# -- the stores -------------------------------------------------------------------------------------


def build(path: Path, transitions: int, game: str) -> dict[str, Any]:
    """A plain-lz4 store of ``transitions`` transitions of ``game``'s stream (cycled), kept for later runs."""
    from frame_streams import stream_path
    from peers import FrameStream

    from mmreplay import ReplayStore

    marker = path / "bench-complete.json"
    if marker.exists():
        return json.loads(marker.read_text())
    shutil.rmtree(path, ignore_errors=True)
    stream = FrameStream.load(stream_path(game))
    began = time.perf_counter()
    with ReplayStore.create(path, frame_shape=(84, 84), capacity=transitions, stack_size=4,
                            frame_encoding="lz4") as store:
        for i in range(transitions):
            store.add(*stream.single_frame_inputs(i))
        store.flush()
        built = {"transitions": len(store), "bytes_on_disk": store.bytes_on_disk, "game": game,
                 "build_seconds": round(time.perf_counter() - began, 1)}
    marker.write_text(json.dumps(built))
    print(f"built {path}: {built}", file=sys.stderr, flush=True)
    return built


def evict(path: Path, drop_caches: bool) -> None:
    from machine import evict_from_page_cache

    evict_from_page_cache(path)
    if drop_caches:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1")


# -- one run: a worker in the cgroup -----------------------------------------------------------------


def read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return -1


def worker(store_path: Path, seconds: float, batch_size: int) -> dict[str, Any]:
    """Open the store and sample for ``seconds``: batches/s overall and in the second half, bytes read."""
    import numpy as np

    import mmreplay
    from mmreplay import ReplayStore

    rng = np.random.default_rng(0)
    before = read_bytes()
    with ReplayStore.open(store_path, "r") as store:
        clock = time.perf_counter
        start = clock()
        half, batches, half_batches = start + seconds / 2, 0, 0
        while (now := clock()) < start + seconds:
            store.sample(batch_size, rng=rng)
            batches += 1
            if now >= half:
                half_batches += 1
        elapsed = clock() - start
        advice = store.page_cache_advice() if hasattr(store, "page_cache_advice") else None
    return {"batches": batches, "per_s": batches / elapsed, "second_half_per_s": half_batches / (elapsed / 2),
            "read_bytes_per_batch": (read_bytes() - before) / max(batches, 1),
            "policy": None if advice is None else advice.policy, "reason": None if advice is None else advice.reason,
            "package": mmreplay.__file__}


def run(tree: Path, store_path: Path, limit: int | None, parent: tuple[int, Path], args: argparse.Namespace
        ) -> dict[str, Any]:
    """One worker of ``tree``'s package in a fresh cgroup limited to ``limit`` bytes, the store's pages
    evicted first."""
    evict(store_path, args.drop_caches)
    cgroup = make_cgroup(parent, f"bench-memory-limit-{os.getpid()}", limit)
    procs = str(cgroup / "cgroup.procs")

    def enter_cgroup() -> None:
        with open(procs, "w") as file:
            file.write(str(os.getpid()))

    try:
        done = subprocess.run(
            [sys.executable, __file__, "--worker", str(store_path), "--seconds", str(args.seconds),
             "--batch-size", str(args.batch_size)],
            env=dict(os.environ, PYTHONPATH=str(tree)), cwd=tree, preexec_fn=enter_cgroup,
            capture_output=True, text=True, timeout=args.seconds * 10 + 120, check=False)
        if done.returncode != 0:
            raise SystemExit(f"worker of {tree} on {store_path} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["cgroup_peak_bytes"] = peak_usage(parent[0], cgroup)
        return result
    finally:
        cgroup.rmdir()


# -- the report --------------------------------------------------------------------------------------


def machine(directory: Path) -> dict[str, Any]:
    from machine import load_average, read_ahead_kb

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    total = next(int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                 if line.startswith("MemTotal:"))
    return {"date": datetime.date.today().isoformat(), "cpu": model, "cores": os.cpu_count(),
            "kernel": platform.release(), "mem_total": total, "read_ahead_kb": read_ahead_kb(directory),
            "load": load_average()}


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per store: each tree's median batches/s, and this tree over the base round by round."""
    out = []
    for store in dict.fromkeys(row["store"] for row in rows):
        mine = {r["round"]: r for r in rows if r["store"] == store and r["tree"] == "this"}
        base = {r["round"]: r for r in rows if r["store"] == store and r["tree"] == "base"}
        rounds = sorted(set(mine) & set(base))
        summary: dict[str, Any] = {"store": store, "rounds": len(rounds)}
        for key in ("per_s", "second_half_per_s", "read_bytes_per_batch"):
            summary[key] = {label: statistics.median(r[key] for r in runs.values())
                            for label, runs in (("this", mine), ("base", base))}
            ratios = [mine[k][key] / base[k][key] for k in rounds if base[k][key]]
            summary[key]["ratio_median"] = statistics.median(ratios) if ratios else None
            summary[key]["ratio_range"] = [min(ratios), max(ratios)] if ratios else None
        summary["policy_this"] = sorted({r["policy"] for r in mine.values()})
        out.append(summary)
    return out


def markdown(summary: list[dict[str, Any]], stores: dict[str, dict[str, Any]], args: argparse.Namespace,
             host: dict[str, Any], cgroup_version: int) -> str:
    lines = [f"Sampling `sample({args.batch_size})` uniform, from a fresh process in a {args.limit_mb} MB memory "
             f"cgroup (v{cgroup_version}; 'no limit': a cgroup without a limit, on a machine of "
             f"{host['mem_total'] / 2**30:.0f} GiB; disk read-ahead {host['read_ahead_kb']} KiB), store pages "
             f"evicted before each run, {args.seconds:g} s a run, "
             f"{summary[0]['rounds']} rounds of this tree and the base alternating ({host['date']}, {host['cpu']}, "
             f"{host['cores']} cores, kernel {host['kernel']}):", "",
             "| store | policy (this tree) | base batches/s | this batches/s | ratio (median, range) | "
             "second half: base / this | disk read per batch: base / this |", "|---|---|---:|---:|---:|---:|---:|"]
    for row in summary:
        built = stores[row["store"]]
        low, high = row["per_s"]["ratio_range"]
        lines.append(
            f"| {row['store']} ({built['bytes_on_disk'] / 2**30:.2f} GiB, {built['transitions']:,} transitions) | "
            f"{', '.join(row['policy_this'])} | {row['per_s']['base']:,.1f} | {row['per_s']['this']:,.1f} | "
            f"{row['per_s']['ratio_median']:.2f}x ({low:.2f}-{high:.2f}) | "
            f"{row['second_half_per_s']['base']:,.1f} / {row['second_half_per_s']['this']:,.1f} | "
            f"{row['read_bytes_per_batch']['base'] / 1024:,.0f} / {row['read_bytes_per_batch']['this'] / 1024:,.0f} KiB |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, help="a built tree to pair against (its mmreplay/ is imported)")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/mmreplay-bench-memory-limit"),
                        help="where the stores are built and kept (a disk, not tmpfs)")
    parser.add_argument("--limit-mb", type=int, default=300, help="the cgroup's memory limit, MB")
    parser.add_argument("--large-transitions", type=int, default=600_000, help="the store larger than the limit")
    parser.add_argument("--fits-transitions", type=int, default=50_000, help="the store that fits")
    parser.add_argument("--game", default="mspacman")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--cases", nargs="+", choices=["larger than the limit", "fits", "large, no limit"],
                        help="run only these cases (default: all three)")
    parser.add_argument("--drop-caches", action="store_true", help="also drop the whole page cache before a run")
    parser.add_argument("--json", type=Path, help="append each run and the summary as JSON lines")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.seconds, args.batch_size)))
        return
    if args.base is None:
        raise SystemExit("--base TREE is needed: a built tree to pair this one against")
    parent = own_cgroup()
    if parent is None:
        raise SystemExit("no memory cgroup to make a child of: needs root and a writable cgroup v1 memory "
                         "controller, or cgroup v2 with the memory controller available")
    from machine import on_tmpfs

    if on_tmpfs(str(args.dir)):
        raise SystemExit(f"{args.dir} is on tmpfs: its pages cannot leave memory; pass --dir on a disk")
    args.dir.mkdir(parents=True, exist_ok=True)
    large, fits = build(args.dir / "large.mmr", args.large_transitions, args.game), build(
        args.dir / "fits.mmr", args.fits_transitions, args.game)
    limit = args.limit_mb * 10**6
    # (store, limit): the large store in the cgroup, the small one in it, the large one without a limit
    cases = {"larger than the limit": (args.dir / "large.mmr", limit), "fits": (args.dir / "fits.mmr", limit),
             "large, no limit": (args.dir / "large.mmr", None)}
    stores = {"larger than the limit": large, "fits": fits, "large, no limit": large}
    cases = {name: case for name, case in cases.items() if args.cases is None or name in args.cases}
    host = machine(args.dir)
    rows = []
    for turn in range(args.rounds):
        order = [("this", TREE), ("base", args.base)]
        for label, tree in order if turn % 2 == 0 else order[::-1]:
            for store, (path, case_limit) in cases.items():
                row = {"round": turn, "tree": label, "store": store, "limit_bytes": case_limit,
                       **run(tree, path, case_limit, parent, args)}
                rows.append(row)
                print(f"round {turn} {label:4} {store:22} {row['per_s']:9,.1f} batches/s "
                      f"(second half {row['second_half_per_s']:9,.1f}) {row['read_bytes_per_batch'] / 1024:9,.0f} "
                      f"KiB read a batch, policy {row['policy']}, peak {row['cgroup_peak_bytes']}", file=sys.stderr,
                      flush=True)
    summary = summarize(rows)
    text = markdown(summary, stores, args, host, parent[0])
    print(text)
    if args.json is not None:
        with args.json.open("a") as out:
            for row in rows:
                out.write(json.dumps({"kind": "run", **host, **row}) + "\n")
            out.write(json.dumps({"kind": "summary", **host, "limit_mb": args.limit_mb, "cgroup_version": parent[0],
                                  "stores": stores, "summary": summary, "markdown": text}) + "\n")


if __name__ == "__main__":
    main()
