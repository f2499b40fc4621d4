"""Do Stable-Baselines3's own replay-buffer tests pass with mmreplay's buffers swapped in?

Fetches the source distribution of the installed stable-baselines3 version (``pip download
--no-binary :all: --no-deps``; its tests are not in the wheel) into ``--workdir``, unpacks it there,
and runs its ``tests/test_buffers.py``, ``tests/test_save_load.py``, ``tests/test_n_step_replay.py``,
``tests/test_dict_env.py`` and ``tests/test_her.py`` (those present in that version) against the
installed package, with ``sb3_swap_plugin`` (beside this file) replacing SB3's ``ReplayBuffer`` and
``NStepReplayBuffer`` (``MmreplayBuffer``), ``DictReplayBuffer`` (``MmreplayDictBuffer``) and
``HerReplayBuffer`` (``MmreplayHerBuffer``). Nothing of SB3's is copied into this repository. Prints
one row per test case:

* **pass** / **fail**: the test built at least one of mmreplay's buffers; a pass says "built only"
  when none of them was added to or sampled from (the test checks construction, dtypes or arguments);
* **n/a**: it built SB3's own buffer only, because mmreplay's refuses the test's observation space
  (the reason is the buffer's own message), or it built no replay buffer at all (on-policy algorithms);
* **skipped**: skipped by SB3's test itself (the reason is SB3's).

    .venv/bin/python benchmarks/sb3_own_tests.py                            # into /tmp/mmreplay-sb3-own-tests
    .venv/bin/python benchmarks/sb3_own_tests.py --workdir /work/scratch/sb3 --markdown table.md
    .venv/bin/python benchmarks/sb3_own_tests.py --workdir /work/scratch/sb3 --render-only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_FILES = (
    "tests/test_buffers.py", "tests/test_save_load.py", "tests/test_n_step_replay.py", "tests/test_dict_env.py",
    "tests/test_her.py",
)


def sdist_tests(version: str, workdir: Path) -> Path:
    """The unpacked sdist of stable-baselines3 ``version`` in ``workdir`` (downloaded once)."""
    unpacked = workdir / f"stable_baselines3-{version}"
    if (unpacked / "tests").is_dir():
        return unpacked
    workdir.mkdir(parents=True, exist_ok=True)
    archive = workdir / f"stable_baselines3-{version}.tar.gz"
    if not archive.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
             f"stable-baselines3=={version}", "-d", str(workdir)],
            check=True,
        )
    with tarfile.open(archive) as tar:
        tar.extractall(workdir, filter="data")
    return unpacked


def run_tests(source: Path, report: Path, extra: list[str]) -> int:
    """SB3's test files under the plugin; ``python -P`` keeps the sdist's package directory off
    ``sys.path``, so the installed stable-baselines3 is the one tested."""
    files = [name for name in TEST_FILES if (source / name).exists()]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "benchmarks")])}
    command = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "sb3_swap_plugin",
               f"--mmreplay-report={report}", *files, *extra]
    return subprocess.run(command, cwd=source, env=environment, check=False).returncode


# Failures that are differences the README documents, by (test function, a part of the failure message).
# A failure of a listed test with any other message stays unexplained.
DOCUMENTED_DIFFERENCES = {
    ("tests/test_n_step_replay.py::test_nstep_no_terminations", "assert 0.0 == 1.0"):
        "a write to dones is recorded as a truncation by the caller, so samples bootstrap from the "
        "kept next observation (README); SB3 counts it as terminated. The n-step rewards matched",
}


def documented_difference(nodeid: str, message: str) -> str | None:
    """The README's difference that explains this failure, or None."""
    function = nodeid.split("[")[0]
    return next((why for (name, part), why in DOCUMENTED_DIFFERENCES.items() if name == function and part in message), None)


def verdict(test: dict) -> tuple[str, str]:
    """(pass | fail | n/a | skipped, why) of one test's record from the plugin."""
    outcome, message = test["outcome"], test["message"]
    if outcome == "skipped":
        return "skipped", message
    if test["mmreplay"]:
        mixed = f" (also SB3's buffer for {', '.join(test['sb3'])})" if test["sb3"] else ""
        used = test.get("used", [])
        how = "added and sampled" if len(used) == 2 else f"{used[0]} only" if used else "built only: never added or sampled"
        if outcome == "passed":
            return "pass", f"{test['mmreplay']} mmreplay buffer(s), {how}{mixed}"
        difference = documented_difference(test["nodeid"], message)
        if difference is not None:
            return "fail", f"documented difference: {difference} ({outcome}: {message})"
        return "fail", f"{outcome}: {message}"
    ran = outcome if outcome == "passed" else f"{outcome}: {message}"
    if test["sb3"]:
        return "n/a", f"{'; '.join(test['sb3'])} (SB3's buffer ran: {ran})"
    return "n/a", f"builds no replay buffer (on-policy algorithms, or no model) ({ran})"


def table(results: dict[str, dict]) -> str:
    lines = ["| test | result | why |", "|---|---|---|"]
    for nodeid, test in results.items():
        result, why = verdict(test)
        lines.append(f"| `{nodeid}` | {result} | {why.replace('|', '/')} |")
    return "\n".join(lines) + f"\n\n{summary(results)}\n"


def summary(results: dict[str, dict]) -> str:
    """The counts of each result, with fail and n/a split by their reason's kind."""
    counts: dict[str, dict[str, int]] = {}
    for test in results.values():
        result, why = verdict(test)
        kinds = counts.setdefault(result, {})
        kinds[kind_of(result, why)] = kinds.get(kind_of(result, why), 0) + 1
    parts = []
    for result in ("pass", "fail", "n/a", "skipped"):
        if result in counts:
            kinds = counts[result]
            split = ", ".join(f"{kind} {count}" for kind, count in kinds.items() if kind)
            parts.append(f"{result} {sum(kinds.values())}" + (f" ({split})" if split else ""))
    return f"{len(results)} test cases: " + "; ".join(parts)


def kind_of(result: str, why: str) -> str:
    """What kind of fail or n/a this is ('' for pass and skipped)."""
    if result == "fail":
        return "documented differences" if why.startswith("documented difference") else "unexplained"
    if result == "pass":
        return "built only" if "built only" in why else "added or sampled"
    if result != "n/a":
        return ""
    if why.startswith("builds no replay buffer"):
        return "no replay buffer"
    return "observation space refused by mmreplay's buffer"


def grouped(results: dict[str, dict]) -> str:
    """The table with the cases of one test function that share a result and reason on one row."""
    groups: dict[tuple[str, str, str], int] = {}
    for nodeid, test in results.items():
        result, why = verdict(test)
        if result == "pass":
            why = "mmreplay, built only" if "built only" in why else "mmreplay, added or sampled"
        key = (nodeid.split("[")[0], result, why)
        groups[key] = groups.get(key, 0) + 1
    lines = ["| test | cases | result | why |", "|---|---:|---|---|"]
    lines += [f"| `{name}` | {count} | {result} | {why.replace('|', '/')} |" for (name, result, why), count in groups.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "mmreplay-sb3-own-tests",
                        help="where the sdist is downloaded and unpacked")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    parser.add_argument("--render-only", action="store_true", help="print the tables of the last run in --workdir")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (e.g. -k save_load)")
    args = parser.parse_args()
    import stable_baselines3

    report = args.workdir / "outcomes.json"
    if not args.render_only:
        source = sdist_tests(stable_baselines3.__version__, args.workdir)
        run_tests(source, report, args.pytest_args)
    results = {nodeid: {**test, "nodeid": nodeid} for nodeid, test in json.loads(report.read_text()).items()}
    text = (
        f"stable-baselines3 {stable_baselines3.__version__}, {', '.join(TEST_FILES)}\n\n"
        + table(results) + "\nBy test function:\n\n" + grouped(results)
    )
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
