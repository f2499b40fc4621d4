"""Do TorchRL's own replay-buffer tests pass with ``MmreplayStorage`` swapped in?

TorchRL's tests are not in its wheel. ``--source`` names a pytorch/rl source tree (a clone, or a tree
exported from one) holding ``test/rb``; without it the tree of the installed version's tag is downloaded
from GitHub (``https://github.com/pytorch/rl/archive/refs/tags/v<version>.tar.gz``) into ``--workdir``.
Nothing of TorchRL's is copied into this repository. The tests run twice against the installed
torchrl: as written (the baseline: which cases pass here at all; TorchRL's C++ extension, for one, needs
the torch it was built for) and with ``torchrl_swap_plugin`` (beside this file) building an
``MmreplayStorage`` wherever a test builds a ``LazyTensorStorage`` or ``LazyMemmapStorage``. One row per
test case:

* **pass** / **fail**: the case built at least one ``MmreplayStorage``; a failure is grouped by its
  reason (the storage's own refusal, or the first line of any other error), and marked when the case
  fails without the swap too;
* **n/a**: it built none (other storages: ``ListStorage``, ``TensorStorage`` of given tensors, ...), or
  only TorchRL's own for arguments ``MmreplayStorage`` does not take (``ndim=2``, a GPU device);
* **skipped**: skipped by TorchRL's test itself (the reason is TorchRL's).

    python benchmarks/torchrl_own_tests.py --source /tmp/rl                      # a pytorch/rl checkout
    python benchmarks/torchrl_own_tests.py --markdown benchmarks/results/torchrl_own_tests.md -- -k storages
    python benchmarks/torchrl_own_tests.py --workdir /tmp/torchrl-own --render-only
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
# A whole run of test/rb (5,300 cases) takes about an hour on two cores; each test is stopped after the
# plugin's TEST_SECONDS, the run after this.
RUN_SECONDS = 3 * 3600


def source_tree(version: str, workdir: Path, source: Path | None) -> Path:
    """A directory holding TorchRL's ``test/rb`` (and its ``test/conftest.py``), copied into ``workdir``."""
    tree = workdir / "rl"
    if (tree / "test" / "rb").is_dir():
        return tree
    workdir.mkdir(parents=True, exist_ok=True)
    if source is None:
        archive = workdir / f"rl-v{version}.tar.gz"
        url = f"https://github.com/pytorch/rl/archive/refs/tags/v{version}.tar.gz"
        with urllib.request.urlopen(url, timeout=300) as response, open(archive, "wb") as file:
            shutil.copyfileobj(response, file)
        with tarfile.open(archive) as tar:
            tar.extractall(workdir, filter="data")
        source = next(path for path in workdir.iterdir() if path.is_dir() and (path / "test" / "rb").is_dir())
    for name in ("test/rb", "test/conftest.py", "pytest.ini"):
        origin = source / name
        target = tree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if origin.is_dir():
            shutil.copytree(origin, target)
        elif origin.exists():
            shutil.copy2(origin, target)
    return tree


def run_tests(tree: Path, report: Path, swap: str, extra: list[str]) -> int:
    """TorchRL's ``test/rb`` under the plugin; ``python -P`` keeps the tree's directory off ``sys.path``, so
    the installed torchrl is the one tested."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "benchmarks")])}
    command = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "torchrl_swap_plugin",
               f"--mmreplay-swap={swap}", f"--mmreplay-report={report}", "--tb=short", "test/rb", *extra]
    try:
        return subprocess.run(command, cwd=tree, env=environment, check=False, timeout=RUN_SECONDS).returncode
    except subprocess.TimeoutExpired:
        return -1


# A failure of a case that built an MmreplayStorage, by a part of its message: what it is.
KNOWN_REASONS = (
    ("keeps transitions with the observation under", "the data is no transition (no observation with a ('next', observation))"),
    ("writing at given indices", "writes at given indices (rb[i] = ..., set_(), update_()): a stored transition never changes"),
    ("stores TensorDicts of transitions", "the data is not a TensorDict (tensors, lists, pytrees)"),
    ("MmreplayStorage keeps bool, integer and float", "a dtype the store does not keep"),
    ("MmreplayStorage keeps tensors only", "non-tensor entries (strings, NonTensorData)"),
    ("a zero-size axis cannot be stored", "an entry with a zero-size axis"),
    ("MmreplayStorage appends", "a write that is not at the writer's next slots (another writer, write_at)"),
    ("the data's keys differ from the storage's", "keys that change between writes"),
    ("takes a batch of transitions along one axis", "data with more than one batch axis"),
    ("shifted by one frame", "a stacked observation whose next is not it shifted"),
    ("has another layout", "a storage reopened with other arguments"),
    ("expected one frame", "observations whose shape changes between writes"),
    ("fixed by the first write", "an entry whose dtype or shape changes between writes"),
)


def reason_of(message: str) -> str | None:
    return next((why for part, why in KNOWN_REASONS if part in message), None)


def verdict(test: dict, baseline: dict | None) -> tuple[str, str]:
    """(pass | fail | n/a | skipped, why) of one case's record from the plugin."""
    outcome, message = test["outcome"], test["message"]
    if outcome == "skipped":
        return "skipped", message
    if test["mmreplay"]:
        if outcome == "passed":
            return "pass", f"{test['mmreplay']} MmreplayStorage(s)"
        also = "" if baseline is None or baseline["outcome"] in ("passed", "skipped") else " [fails without the swap too]"
        known = reason_of(message)
        if known is not None:
            return "fail", f"refused: {known}{also}"
        return "fail", f"{outcome}: {message}{also}"
    ran = outcome if outcome == "passed" else f"{outcome}: {message}"
    if test["torchrl"]:
        return "n/a", f"{'; '.join(test['torchrl'])} ({ran})"
    return "n/a", f"builds no lazy storage ({ran})"


def kind_of(result: str, why: str) -> str:
    if result == "fail":
        if "[fails without the swap too]" in why:
            return "fail without the swap too"
        return "refused by the storage" if why.startswith("refused:") else "other errors"
    if result == "n/a":
        return "TorchRL's own storage kept" if "TorchRL's own" in why else "no lazy storage"
    return ""


def summary(results: dict[str, dict], baseline: dict[str, dict]) -> str:
    counts: dict[str, Counter[str]] = {}
    for nodeid, test in results.items():
        result, why = verdict(test, baseline.get(nodeid))
        counts.setdefault(result, Counter())[kind_of(result, why)] += 1
    parts = []
    for result in ("pass", "fail", "n/a", "skipped"):
        if result in counts:
            kinds = counts[result]
            split = ", ".join(f"{kind} {count}" for kind, count in kinds.items() if kind)
            parts.append(f"{result} {sum(kinds.values())}" + (f" ({split})" if split else ""))
    built = sum(1 for test in results.values() if test["mmreplay"])
    passing = sum(1 for test in baseline.values() if test["outcome"] == "passed")
    return (f"{len(results)} test cases; {built} build an MmreplayStorage: " + "; ".join(parts)
            + f"\n\nWithout the swap (the baseline, the same installation): {passing} of {len(baseline)} pass.")


def grouped(results: dict[str, dict], baseline: dict[str, dict]) -> str:
    """One row per test function, result and reason, with the number of its cases."""
    groups: Counter[tuple[str, str, str]] = Counter()
    for nodeid, test in results.items():
        result, why = verdict(test, baseline.get(nodeid))
        if result == "pass":
            why = "MmreplayStorage"
        groups[(nodeid.split("[")[0], result, why)] += 1
    lines = ["| test | cases | result | why |", "|---|---:|---|---|"]
    for (name, result, why), count in sorted(groups.items()):
        if result in ("pass", "fail"):
            lines.append(f"| `{name}` | {count} | {result} | {why.replace('|', '/')[:240]} |")
    return "\n".join(lines) + "\n"


def reasons(results: dict[str, dict], baseline: dict[str, dict]) -> str:
    """The failures of cases that built an MmreplayStorage, counted by reason."""
    counter: Counter[str] = Counter()
    for nodeid, test in results.items():
        result, why = verdict(test, baseline.get(nodeid))
        if result == "fail":
            counter[why[:240]] += 1
    lines = ["| cases | why |", "|---:|---|"]
    lines += [f"| {count} | {why.replace('|', '/')} |" for why, count in counter.most_common()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "mmreplay-torchrl-own-tests")
    parser.add_argument("--source", type=Path, help="a pytorch/rl source tree (else the installed version's tag is downloaded)")
    parser.add_argument("--markdown", type=Path, help="also write the tables here")
    parser.add_argument("--render-only", action="store_true", help="print the tables of the last run in --workdir")
    parser.add_argument("--keep-baseline", action="store_true", help="reuse the baseline run already in --workdir")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (e.g. -k storages)")
    args = parser.parse_args()
    import torchrl

    swapped, baseline = args.workdir / "swapped.json", args.workdir / "baseline.json"
    if not args.render_only:
        tree = source_tree(torchrl.__version__, args.workdir, args.source)
        if not (args.keep_baseline and baseline.exists()):
            run_tests(tree, baseline, "off", args.pytest_args)
        run_tests(tree, swapped, "on", args.pytest_args)
    results = json.loads(swapped.read_text())
    base = json.loads(baseline.read_text()) if baseline.exists() else {}
    text = (
        f"torchrl {torchrl.__version__}, test/rb\n\n{summary(results, base)}\n\n"
        f"Failures by reason:\n\n{reasons(results, base)}\nBy test function (cases that build an MmreplayStorage):\n\n"
        + grouped(results, base)
    )
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
