"""Do Stable-Baselines3's own replay-buffer tests pass with ``MmreplayBuffer`` swapped in?

Fetches the source distribution of the installed stable-baselines3 version (``pip download
--no-binary :all: --no-deps``; its tests are not in the wheel) into ``--workdir``, unpacks it there,
and runs its ``tests/test_buffers.py``, ``tests/test_save_load.py`` and ``tests/test_n_step_replay.py``
(those present in that version) against the installed package, with ``sb3_swap_plugin`` (beside this
file) replacing SB3's ``ReplayBuffer`` and ``NStepReplayBuffer``. Nothing of SB3's is copied into this
repository. Prints one row per test case:

* **pass** / **fail**: the test built at least one ``MmreplayBuffer`` (uint8 image observations);
* **n/a**: it built SB3's own buffer only, because mmreplay stores uint8 frames and the test's
  observations are not (the reason names them), or it built no replay buffer at all;
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
TEST_FILES = ("tests/test_buffers.py", "tests/test_save_load.py", "tests/test_n_step_replay.py")


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


def verdict(test: dict) -> tuple[str, str]:
    """(pass | fail | n/a | skipped, why) of one test's record from the plugin."""
    outcome, message = test["outcome"], test["message"]
    if outcome == "skipped":
        return "skipped", message
    if test["mmreplay"]:
        mixed = f" (also SB3's buffer for {', '.join(test['sb3'])})" if test["sb3"] else ""
        if outcome == "passed":
            return "pass", f"{test['mmreplay']} MmreplayBuffer(s){mixed}"
        return "fail", f"{outcome}: {message}"
    ran = outcome if outcome == "passed" else f"{outcome}: {message}"
    if test["sb3"]:
        return "n/a", f"{', '.join(test['sb3'])}: mmreplay stores uint8 images (SB3's buffer ran: {ran})"
    return "n/a", f"builds no ReplayBuffer (on-policy, or Dict observations: DictReplayBuffer is not swapped) ({ran})"


def table(results: dict[str, dict]) -> str:
    lines = ["| test | result | why |", "|---|---|---|"]
    for nodeid, test in results.items():
        result, why = verdict(test)
        lines.append(f"| `{nodeid}` | {result} | {why.replace('|', '/')} |")
    counts: dict[str, int] = {}
    for test in results.values():
        counts[verdict(test)[0]] = counts.get(verdict(test)[0], 0) + 1
    summary = ", ".join(f"{name} {counts[name]}" for name in ("pass", "fail", "n/a", "skipped") if name in counts)
    return "\n".join(lines) + f"\n\n{len(results)} test cases: {summary}\n"


def grouped(results: dict[str, dict]) -> str:
    """The table with the cases of one test function that share a result and reason on one row."""
    groups: dict[tuple[str, str, str], int] = {}
    for nodeid, test in results.items():
        result, why = verdict(test)
        if result == "pass":
            why = "MmreplayBuffer"
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
    results = json.loads(report.read_text())
    text = (
        f"stable-baselines3 {stable_baselines3.__version__}, {', '.join(TEST_FILES)}\n\n"
        + table(results) + "\nBy test function:\n\n" + grouped(results)
    )
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
