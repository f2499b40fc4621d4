"""Do d3rlpy's own dataset tests (``tests/dataset``) pass with ``MmreplayReplayBuffer`` swapped in?

d3rlpy's sdist carries no tests: ``--source`` names a takuseno/d3rlpy tree (a clone, or a tree exported
from one, at the installed version's tag), else the tag's archive is downloaded from GitHub
(``https://github.com/takuseno/d3rlpy/archive/refs/tags/v<version>.tar.gz``) into ``--workdir``. Only its
``tests/`` are copied there; nothing of d3rlpy's is kept in this repository. The tests run twice against
the installed d3rlpy: as written (the baseline) and under ``d3rlpy_swap_plugin`` (beside this file),
which swaps the adapter in (its docstring says how). One row per test case:

* **pass** / **fail**: the case built at least one store episode view or ``MmreplayReplayBuffer``; a
  failure is grouped by the first line of its error, and marked when it fails without the swap too;
* **n/a**: it built none (it tests d3rlpy's own components on arrays: ``Signature``, ``Transition``,
  mini-batches of given transitions, utilities);
* **skipped**: skipped by d3rlpy's test itself.

    python scripts/d3rlpy_own_tests.py --source /tmp/d3rlpy            # a takuseno/d3rlpy checkout
    python scripts/d3rlpy_own_tests.py --markdown /tmp/d3rlpy_own_tests.md -- -k replay_buffer
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN_SECONDS = 1800


def source_tree(version: str, workdir: Path, source: Path | None) -> Path:
    """A directory holding d3rlpy's ``tests/`` (copied into ``workdir``)."""
    tree = workdir / "d3rlpy"
    if (tree / "tests" / "dataset").is_dir():
        return tree
    workdir.mkdir(parents=True, exist_ok=True)
    if source is None:
        archive = workdir / f"d3rlpy-v{version}.tar.gz"
        url = f"https://github.com/takuseno/d3rlpy/archive/refs/tags/v{version}.tar.gz"
        with urllib.request.urlopen(url, timeout=300) as response, open(archive, "wb") as file:
            shutil.copyfileobj(response, file)
        with tarfile.open(archive) as tar:
            tar.extractall(workdir, filter="data")
        source = next(path for path in workdir.iterdir() if path.is_dir() and (path / "tests" / "dataset").is_dir())
    shutil.copytree(source / "tests", tree / "tests")
    return tree


def run_tests(tree: Path, report: Path, swap: str, extra: list[str]) -> int:
    """d3rlpy's ``tests/dataset`` under the plugin; ``python -P`` keeps the tree off ``sys.path``, so the
    installed d3rlpy is the one tested."""
    (tree / "test_data").mkdir(exist_ok=True)  # where d3rlpy's io tests write (its CI makes it)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "scripts")])}
    command = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "d3rlpy_swap_plugin",
               f"--mmreplay-swap={swap}", f"--mmreplay-report={report}", "--tb=short", "-W", "ignore",
               "tests/dataset", *extra]
    try:
        return subprocess.run(command, cwd=tree, env=environment, check=False, timeout=RUN_SECONDS,
                              stdout=subprocess.DEVNULL).returncode
    except subprocess.TimeoutExpired:
        return -1


# A failure of a case that built a store episode or buffer, by a part of its message: what it is.
KNOWN_REASONS = (
    ("tuple observations", "refused: tuple observations (a store keeps one observation array per step)"),
    ("replace() should be called on dataclass instances",
     "the test rebuilds the episode with dataclasses.replace: a store episode is a read-only view, no dataclass"),
    ("assert False", "isinstance(buffer.buffer, FIFOBuffer or InfiniteBuffer): the store is the buffer"),
)


def verdict(test: dict, baseline: dict | None) -> tuple[str, str]:
    """(pass | fail | n/a | skipped, why) of one case."""
    outcome, message = test["outcome"], test["message"]
    if outcome == "skipped":
        return "skipped", message
    built = test["views"] + test["buffers"]
    if not built:
        return "n/a", "builds no store episode or buffer" + ("" if outcome == "passed" else f" ({outcome}: {message})")
    if outcome == "passed":
        return "pass", f"{test['views']} view(s), {test['buffers']} buffer(s)"
    also = "" if baseline is None or baseline["outcome"] in ("passed", "skipped") else " [fails without the swap too]"
    known = next((why for part, why in KNOWN_REASONS if part in message), None)
    return "fail", f"{known or message}{also}"


def tables(results: dict[str, dict], baseline: dict[str, dict]) -> str:
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    groups: Counter[tuple[str, str, str]] = Counter()
    for nodeid, test in results.items():
        result, why = verdict(test, baseline.get(nodeid))
        counts[result] += 1
        if result == "fail":
            reasons[why] += 1
        groups[(nodeid.split("[")[0], result, "" if result in ("pass", "n/a") else why)] += 1
    passing = sum(1 for test in baseline.values() if test["outcome"] == "passed")
    lines = [f"{len(results)} test cases: " + ", ".join(f"{name} {counts[name]}" for name in ("pass", "fail", "n/a", "skipped")),
             f"Without the swap (the same installation): {passing} of {len(baseline)} pass.", "",
             "Failures by reason:", "", "| cases | why |", "|---:|---|"]
    lines += [f"| {count} | {why.replace('|', '/')} |" for why, count in reasons.most_common()]
    lines += ["", "By test function:", "", "| test | cases | result | why |", "|---|---:|---|---|"]
    lines += [f"| `{name}` | {count} | {result} | {why.replace('|', '/')[:200]} |"
              for (name, result, why), count in sorted(groups.items())]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "mmreplay-d3rlpy-own-tests")
    parser.add_argument("--source", type=Path, help="a takuseno/d3rlpy tree (else the installed version's tag is downloaded)")
    parser.add_argument("--markdown", type=Path, help="also write the tables here")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (e.g. -k replay_buffer)")
    args = parser.parse_args()
    import d3rlpy

    tree = source_tree(d3rlpy.__version__, args.workdir, args.source)
    swapped, baseline = args.workdir / "swapped.json", args.workdir / "baseline.json"
    run_tests(tree, baseline, "off", args.pytest_args)
    run_tests(tree, swapped, "on", args.pytest_args)
    text = f"d3rlpy {d3rlpy.__version__}, tests/dataset\n\n" + tables(json.loads(swapped.read_text()),
                                                                      json.loads(baseline.read_text()))
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
