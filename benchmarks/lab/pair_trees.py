"""This tree against a base tree, paired: ``bench_encodings.py`` (this tree's script) run with each tree's
package in turn, in a process of its own (this, base | base, this | ...), and each figure's per-turn ratio
of this tree's rate over the base's summarized as the median with its range.

On a shared machine the speed drifts between runs; a turn of each tree close in time cancels most of it.
Each figure (``add_1_env``, ``add_8_envs``, ``sample_32``, ``sample_256``, ``encoded``) has a rate for the
reference store (``lz4-reference``) and the plain one (``lz4``); beside the trees' ratios, each tree's own
reference-over-plain ratio (taken in one process, the stores alive at once) and the bytes per transition.

    git worktree add /tmp/base 907af33 && (cd /tmp/base && /work/main/.venv/bin/python setup.py build_ext --inplace)
    .venv/bin/python benchmarks/lab/pair_trees.py --base /tmp/base --turns 3 --out benchmarks/results/x.jsonl -- --games pong
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]
TREE = BENCHMARKS.parent
FIGURES = ("add_1_env", "add_8_envs", "sample_32", "sample_256", "encoded")
ENCODINGS = ("lz4-reference", "lz4")


def run_turn(tree: Path, label: str, turn: int, bench_args: list[str]) -> list[dict[str, Any]]:
    """bench_encodings.py with ``tree``'s package first on the path: its JSON lines (one a game), tagged."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    with tempfile.TemporaryDirectory(prefix="pair-trees-") as scratch:
        out = Path(scratch) / "turn.jsonl"
        done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_encodings.py"), "--json", str(out), *bench_args],
                              cwd=tree, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"bench_encodings.py failed in {tree} (exit {done.returncode}):\n{done.stderr[-2000:]}")
        rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    print(f"turn {turn} {label} ({tree}): load {rows[0].get('load_before')} -> {rows[-1].get('load_after')}",
          file=sys.stderr, flush=True)
    return [{"tree": label, "turn": turn, **row} for row in rows]


def spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "low": round(min(values), 3), "high": round(max(values), 3)}


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (game, figure): this tree over the base turn by turn, for each store's rate, and each tree's
    reference-over-plain ratio; per game, each tree's bytes per transition."""
    by_game: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    for row in rows:
        by_game.setdefault(row["game"], {}).setdefault(row["tree"], {})[row["turn"]] = row
    out = []
    for game, trees in sorted(by_game.items()):
        turns = sorted(set(trees.get("new", {})) & set(trees.get("base", {})))
        if not turns:
            continue
        new, base = trees["new"], trees["base"]
        out.append({"game": game, "figure": "bytes_per_transition", **{
            tree: {e: round(statistics.median(runs[t]["bytes_per_transition"][e] for t in turns), 1) for e in ENCODINGS}
            for tree, runs in (("new", new), ("base", base))}})
        for figure in FIGURES:
            if figure not in new[turns[0]] or figure not in base[turns[0]]:
                continue
            result: dict[str, Any] = {"game": game, "figure": figure, "turns": len(turns)}
            for encoding in ENCODINGS:
                result[f"new/base {encoding}"] = spread(
                    [new[t][figure]["per_s"][encoding] / base[t][figure]["per_s"][encoding] for t in turns])
                result[f"new {encoding} per_s"] = round(statistics.median(new[t][figure]["per_s"][encoding] for t in turns))
            for tree, runs in (("new", new), ("base", base)):
                result[f"{tree} reference/plain"] = spread([runs[t][figure]["ratio"]["median"] for t in turns])
            out.append(result)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True, help="the base tree (its extensions built in place)")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--out", type=Path, help="append every turn's lines, then the summary's, to this file")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="after --: bench_encodings.py's arguments")
    args = parser.parse_args(argv)
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    rows: list[dict[str, Any]] = []
    for turn in range(args.turns):
        order = [(TREE, "new"), (args.base.resolve(), "base")]
        for tree, label in order if turn % 2 == 0 else reversed(order):
            rows += run_turn(tree, label, turn, bench_args)
    summary = summarize(rows)
    for line in summary:
        print(json.dumps(line))
    if args.out:
        with args.out.open("a") as file:
            for row in [*rows, *({"summary": True, **line} for line in summary)]:
                file.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
