"""Each test's outcome as a pytest plugin sees it, for the harnesses that run a host's own tests with an
mmreplay storage swapped in (sb3_swap_plugin.py, torchrl_swap_plugin.py): "passed", "failed", "error in
setup" or "teardown", or "skipped", and the first line of why."""
from __future__ import annotations

import pytest

OUTCOMES: dict[str, dict[str, str]] = {}


def record(report: pytest.TestReport) -> None:
    """Fold one phase's report into its test's outcome: a failure in any phase wins over a pass or a skip."""
    entry = OUTCOMES.setdefault(report.nodeid, {"outcome": "passed", "message": ""})
    if report.failed:
        entry["outcome"] = "failed" if report.when == "call" else f"error in {report.when}"
        entry["message"] = first_line(report)
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"
        entry["message"] = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""


def first_line(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return text.strip().splitlines()[0][:300] if text.strip() else ""
