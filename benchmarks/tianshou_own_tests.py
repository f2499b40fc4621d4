"""Do Tianshou's own buffer tests (``test/base/test_buffer.py``) pass with mmreplay's vector buffers in?

Tianshou's tests are not in its sdist or wheel. ``--source`` names a thu-ml/tianshou git clone (the
files are taken at the installed version's tag, ``v<version>``) or a source tree; without it the tag's
archive is downloaded from GitHub into ``--workdir``. Nothing of Tianshou's is copied into this
repository. The tests run twice against the installed tianshou: as written (the baseline) and with
``tianshou_swap_plugin`` (beside this file) building an ``MmreplayVectorReplayBuffer`` wherever a test
builds a ``VectorReplayBuffer`` (and the prioritized one likewise). One row per test:

* **pass** / **fail**: the test built at least one mmreplay buffer; a failure is given with its reason
  (the buffer's own refusal, or the first line of the error);
* **n/a**: it built none (Tianshou's ``ReplayBuffer``, ``CachedReplayBuffer``, HER's, the segment tree).

    python benchmarks/tianshou_own_tests.py --source /path/to/tianshou-clone
    python benchmarks/tianshou_own_tests.py --markdown benchmarks/results/tianshou_own_tests.md
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
FILES = ("test/__init__.py", "test/base/__init__.py", "test/base/env.py", "test/base/test_buffer.py")
RUN_SECONDS = 1800


def source_tree(version: str, workdir: Path, source: Path | None) -> Path:
    """A directory holding Tianshou's ``test/base`` files the buffer tests need, in ``workdir``."""
    tree = workdir / "tianshou-tests"
    if (tree / FILES[-1]).exists():
        return tree
    for name in FILES:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
    if source is not None and (source / ".git").exists() or (source is not None and (source / "HEAD").exists()):
        for name in FILES:
            text = subprocess.run(["git", "-C", str(source), "show", f"v{version}:{name}"], check=True,
                                  capture_output=True).stdout
            (tree / name).write_bytes(text)
        return tree
    if source is None:
        archive = workdir / f"tianshou-v{version}.tar.gz"
        url = f"https://github.com/thu-ml/tianshou/archive/refs/tags/v{version}.tar.gz"
        with urllib.request.urlopen(url, timeout=300) as response, open(archive, "wb") as file:
            shutil.copyfileobj(response, file)
        with tarfile.open(archive) as tar:
            tar.extractall(workdir, filter="data")
        source = next(path for path in workdir.iterdir() if path.is_dir() and (path / FILES[-1]).exists())
    for name in FILES:
        shutil.copy2(source / name, tree / name)
    return tree


def run_tests(tree: Path, report: Path, swap: str, extra: list[str]) -> int:
    """The buffer tests under the plugin; ``python -P`` keeps the tree's directory off ``sys.path`` (the
    installed tianshou is the one tested), and the tree itself is put back for ``test.base.env``."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "benchmarks"), str(tree)])}
    command = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-p",
               "tianshou_swap_plugin", f"--mmreplay-swap={swap}", f"--mmreplay-report={report}", "--tb=short",
               "test/base/test_buffer.py", *extra]
    try:
        return subprocess.run(command, cwd=tree, env=environment, check=False, timeout=RUN_SECONDS).returncode
    except subprocess.TimeoutExpired:
        return -1


# A failure of a test that built an mmreplay buffer, by a part of its message: what it is.
KNOWN_REASONS = (
    ("takes no ignore_obs_next", "refused: Tianshou's ignore_obs_next (obs_next is kept exact instead)"),
    ("takes no save_only_last_obs", "refused: Tianshou's save_only_last_obs (each frame is stored once instead)"),
    ("takes stack_num=1 only", "refused: Tianshou's stack_num (frame stacks come from the env: stack_size=)"),
    ("is a Batch (a Dict or Tuple observation space)", "refused: an obs that is a Batch (Dict spaces), not an array"),
    ("the stores keep one number per transition", "refused: a reward that is not one number per transition"),
    ("expected (", "refused: a reward or flag that is not one value per transition"),
    ("must be finite", "refused: a non-finite reward"),
    ("has dtype object", "refused: an obs or action of dtype object"),
)


def reason_of(message: str) -> str | None:
    return next((why for part, why in KNOWN_REASONS if part in message), None)


def verdict(test: dict, baseline: dict | None) -> tuple[str, str]:
    outcome, message = test["outcome"], test["message"]
    if outcome == "skipped":
        return "skipped", message
    if test["mmreplay"]:
        if outcome == "passed":
            return "pass", f"{test['mmreplay']} mmreplay buffer(s)"
        also = "" if baseline is None or baseline["outcome"] in ("passed", "skipped") else " [fails without the swap too]"
        return "fail", (reason_of(message) or f"{outcome}: {message}") + also
    return "n/a", f"builds no vector buffer ({outcome})"


def table(results: dict[str, dict], baseline: dict[str, dict]) -> str:
    counts = Counter(verdict(test, baseline.get(nodeid))[0] for nodeid, test in results.items())
    passing = sum(1 for test in baseline.values() if test["outcome"] == "passed")
    lines = [
        f"{len(results)} tests; {sum(1 for t in results.values() if t['mmreplay'])} build an mmreplay buffer: "
        + ", ".join(f"{name} {counts[name]}" for name in ("pass", "fail", "n/a", "skipped") if counts[name]),
        "",
        f"Without the swap (the baseline, the same installation): {passing} of {len(baseline)} pass.",
        "",
        "| test | result | why |",
        "|---|---|---|",
    ]
    for nodeid, test in sorted(results.items()):
        result, why = verdict(test, baseline.get(nodeid))
        lines.append(f"| `{nodeid.split('::')[-1]}` | {result} | {why.replace('|', '/')[:240]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "mmreplay-tianshou-own-tests")
    parser.add_argument("--source", type=Path, help="a thu-ml/tianshou clone or source tree (else the tag is downloaded)")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    parser.add_argument("--json", action="store_true", help="print the outcomes as JSON instead of the table")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (e.g. -k manager)")
    args = parser.parse_args()
    import tianshou

    tree = source_tree(tianshou.__version__, args.workdir, args.source)
    swapped, baseline = args.workdir / "swapped.json", args.workdir / "baseline.json"
    run_tests(tree, baseline, "off", args.pytest_args)
    run_tests(tree, swapped, "on", args.pytest_args)
    results, base = json.loads(swapped.read_text()), json.loads(baseline.read_text())
    if args.json:
        print(json.dumps({"tianshou": tianshou.__version__, "swapped": results, "baseline": base}, indent=1))
        return
    text = f"tianshou {tianshou.__version__}, test/base/test_buffer.py\n\n" + table(results, base)
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
