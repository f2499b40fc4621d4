"""This tree against a base tree, paired: ``bench_frames.py`` (this tree's script) run with each tree's
package in turn, in a process of its own (this, base | base, this | ...), and each figure's per-turn ratio
of this tree's rate over the base's summarized as the median with its range.

On a shared machine the speed drifts between runs; a turn of each tree close in time cancels most of it.
A figure's rate is the reference store's (``lz4-reference_per_s``) and, beside it, the plain store's.

    git worktree add /tmp/base 907af33 && (cd /tmp/base && /work/main/.venv/bin/python setup.py build_ext --inplace)
    .venv/bin/python benchmarks/pair_trees.py --base /tmp/base --turns 3 --out benchmarks/results/x.jsonl -- --games pong
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
TREE = HERE.parent


def run_turn(tree: Path, label: str, turn: int, bench_args: list[str]) -> list[dict[str, object]]:
    """bench_frames.py with ``tree``'s package first on the path, its JSON lines tagged."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, str(HERE / "bench_frames.py"), "--json", *bench_args], cwd=tree,
                          env=env, capture_output=True, text=True, check=True)
    print(done.stdout.splitlines()[0], file=sys.stderr, flush=True)  # which package, and the load
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [{"tree": label, "turn": turn, **row} for row in rows]


def summarize(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Per (game, figure): this tree over the base turn by turn, for each store's rate, and each tree's
    reference-over-plain ratio."""
    by_key: dict[tuple[str, str], dict[str, dict[int, dict[str, object]]]] = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        if "ratio" in row:
            by_key[str(row["game"]), str(row["figure"])][str(row["tree"])][int(row["turn"])] = row  # type: ignore[call-overload]
    out = []
    for (game, figure), trees in sorted(by_key.items()):
        turns = sorted(set(trees.get("new", {})) & set(trees.get("base", {})))
        result: dict[str, object] = {"game": game, "figure": figure, "turns": len(turns)}
        for rate in ("lz4-reference_per_s", "lz4_per_s"):
            ratios = [float(trees["new"][t][rate]) / float(trees["base"][t][rate]) for t in turns]  # type: ignore[arg-type]
            if ratios:
                result[f"new/base {rate}"] = {"median": round(statistics.median(ratios), 3),
                                             "low": round(min(ratios), 3), "high": round(max(ratios), 3)}
        for tree in ("new", "base"):
            own = [trees[tree][t]["ratio"]["median"] for t in turns]  # type: ignore[index]
            if own:
                result[f"{tree} reference/plain"] = {"median": round(statistics.median(own), 3),
                                                     "low": round(min(own), 3), "high": round(max(own), 3)}
        out.append(result)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="a built worktree of the base commit")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--out", type=Path, help="append every JSON line (both trees', and the summary) here")
    parser.add_argument("bench_args", nargs="*", help="bench_frames.py's arguments (after --)")
    args = parser.parse_args(argv)
    rows: list[dict[str, object]] = []
    for turn in range(args.turns):
        order = [("new", TREE), ("base", args.base)] if turn % 2 == 0 else [("base", args.base), ("new", TREE)]
        for label, tree in order:
            rows += run_turn(tree, label, turn, args.bench_args)
    summaries = summarize(rows)
    for result in summaries:
        print(json.dumps(result), flush=True)
    if args.out is not None:
        with args.out.open("a") as file:
            for row in rows + [{"summary": True, **result} for result in summaries]:
                file.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
