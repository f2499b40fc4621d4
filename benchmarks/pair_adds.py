"""One writer's adds, this tree against a base tree, paired: ``bench_adds.py`` run by each tree in turn, in
its own process (this, base | base, this | ...), and each figure's per-turn ratios summarized.

On a shared machine the speed drifts between runs (the 2-core VM's base rate ran 52k-70k adds/s in one
session); a turn of each tree close in time cancels most of it, so the ratio of a turn pair is the figure,
reported as the median over turns with its range, beside each tree's median rate.

    git worktree add /tmp/base 0f306cb && (cd /tmp/base && /work/main/.venv/bin/python setup.py build_ext --inplace)
    .venv/bin/python benchmarks/pair_adds.py --base /tmp/base --turns 4 --out benchmarks/results/x.jsonl
    .venv/bin/python benchmarks/pair_adds.py --summarize adds-new-1.jsonl adds-base-2.jsonl ...   # a box's files

``--summarize`` reads files named ``adds-<new|base>-<turn>.jsonl`` (benchmarks/adds_box.sh's) or lines that
carry ``tree`` and ``turn`` (this script's ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
TREE = HERE.parent


def run_turn(tree: Path, label: str, turn: int, bench_args: list[str]) -> list[dict[str, object]]:
    """bench_adds.py of ``tree`` (its own package first on the path), its JSON lines tagged."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, str(tree / "benchmarks" / "bench_adds.py"), "--json", *bench_args],
                          cwd=tree, env=env, capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [{"tree": label, "turn": turn, **row} for row in rows]


def load(paths: list[Path]) -> list[dict[str, object]]:
    rows = []
    for path in paths:
        named = re.search(r"adds-(new|base)-(\d+)\.jsonl$", path.name)
        for line in path.read_text().splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                if named:
                    row = {"tree": named.group(1), "turn": int(named.group(2)), **row}
                rows.append(row)
    return rows


def summarize(rows: list[dict[str, object]]) -> str:
    """Per game, encoding and form: each tree's median rate and the median (range) of the ratios of each
    pair of runs close in time: the two trees' runs of one turn (this script's lines), or of turns 1-2,
    3-4, ... where each turn ran one tree (adds_box.sh's files)."""
    rates: dict[tuple[str, str, str], dict[tuple[str, int], float]] = defaultdict(dict)
    for row in rows:
        if row.get("figure") == "adds":
            key = (str(row["game"]), str(row["encoding"]), str(row["form"]))
            rates[key][str(row["tree"]), int(row["turn"])] = float(row["transitions_s"])  # type: ignore[arg-type]
    lines = ["| game | encoding | form | new | base | new / base, median (range) |", "|---|---|---|---:|---:|---:|"]
    for (game, encoding, form), by in rates.items():
        new = {turn: rate for (tree, turn), rate in by.items() if tree == "new"}
        base = {turn: rate for (tree, turn), rate in by.items() if tree == "base"}
        shared = set(new) & set(base)  # both trees in one turn: pair within it, else consecutive turns
        pair_of = (lambda turn: turn) if shared else (lambda turn: (turn + 1) // 2)
        new_by, base_by = {pair_of(t): r for t, r in new.items()}, {pair_of(t): r for t, r in base.items()}
        ratios = [new_by[pair] / base_by[pair] for pair in sorted(set(new_by) & set(base_by))]
        if not ratios:
            continue
        lines.append(f"| {game} | {encoding} | {form} | {statistics.median(new.values()):,.0f} | "
                     f"{statistics.median(base.values()):,.0f} | {statistics.median(ratios):.2f} "
                     f"({min(ratios):.2f}-{max(ratios):.2f}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, help="the base tree (its extensions built in place)")
    parser.add_argument("--turns", type=int, default=4, help="turns per tree")
    parser.add_argument("--out", type=Path, help="write every tagged JSON line here")
    parser.add_argument("--bench-args", default="--encodings lz4-reference,lz4 --adds 12000",
                        help="bench_adds.py's arguments, for both trees")
    parser.add_argument("--summarize", nargs="+", type=Path, help="only summarize these files")
    args = parser.parse_args(argv)
    if args.summarize:
        print(summarize(load(args.summarize)))
        return
    if args.base is None:
        parser.error("--base is required unless --summarize")
    rows: list[dict[str, object]] = []
    for turn in range(1, args.turns + 1):
        order = ("new", "base") if turn % 2 == 1 else ("base", "new")  # this, base | base, this | ...
        for label in order:
            tree = TREE if label == "new" else args.base.resolve()
            print(f"turn {turn}: {label} ({tree})", file=sys.stderr, flush=True)
            rows += run_turn(tree, label, turn, args.bench_args.split())
    if args.out:
        args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    print(summarize(rows))


if __name__ == "__main__":
    main()
