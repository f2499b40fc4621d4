"""pytest plugin: run Tianshou's own buffer tests with mmreplay's vector buffers in place of Tianshou's.

Loaded with ``-p tianshou_swap_plugin`` (``benchmarks/`` on ``PYTHONPATH``) by ``tianshou_own_tests.py``.
At configure time, before Tianshou's test modules are imported, ``--mmreplay-swap=on`` replaces
``VectorReplayBuffer`` and ``PrioritizedVectorReplayBuffer`` in ``tianshou.data`` by subclasses of
``MmreplayVectorReplayBuffer`` and ``MmreplayPrioritizedVectorReplayBuffer`` that take Tianshou's
arguments and give each buffer a fresh store directory. Tianshou's other buffers (``ReplayBuffer``,
``CachedReplayBuffer``, HER's) are not vector buffers and stay Tianshou's. Each test's outcome is written
with the number of mmreplay buffers it built (``--mmreplay-report``).
"""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path
from typing import Any

import plugin_outcomes  # beside this file, on the harness's PYTHONPATH
import pytest
import tianshou.data

from mmreplay.tianshou import MmreplayPrioritizedVectorReplayBuffer, MmreplayVectorReplayBuffer

DIRECTORY = Path(tempfile.mkdtemp(prefix="mmreplay-tianshou-tests-"))
COUNTER = itertools.count()
BUILT: dict[str, int] = {}
CURRENT: list[str] = ["<collection>"]


def fresh_path() -> Path:
    BUILT[CURRENT[0]] = BUILT.get(CURRENT[0], 0) + 1
    return DIRECTORY / f"buffer-{next(COUNTER)}"


class SwappedVectorReplayBuffer(MmreplayVectorReplayBuffer):
    """``MmreplayVectorReplayBuffer`` built as Tianshou's tests build ``VectorReplayBuffer``."""

    def __init__(self, total_size: int, buffer_num: int, **kwargs: Any) -> None:
        super().__init__(total_size, buffer_num, path=fresh_path(), **kwargs)


class SwappedPrioritizedVectorReplayBuffer(MmreplayPrioritizedVectorReplayBuffer):
    """``MmreplayPrioritizedVectorReplayBuffer`` built as Tianshou's tests build its prioritized buffer."""

    def __init__(self, total_size: int, buffer_num: int, **kwargs: Any) -> None:
        super().__init__(total_size, buffer_num, path=fresh_path(), **kwargs)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--mmreplay-swap", choices=("on", "off"), default="on")
    parser.addoption("--mmreplay-report", type=Path, default=None)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--mmreplay-swap") == "on":
        tianshou.data.VectorReplayBuffer = SwappedVectorReplayBuffer  # type: ignore[misc]
        tianshou.data.PrioritizedVectorReplayBuffer = SwappedPrioritizedVectorReplayBuffer  # type: ignore[misc]


def pytest_runtest_setup(item: pytest.Item) -> None:
    CURRENT[0] = item.nodeid


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    plugin_outcomes.record(report)


def pytest_unconfigure(config: pytest.Config) -> None:
    target = config.getoption("--mmreplay-report")
    if target is not None:
        results = {nodeid: {**outcome, "mmreplay": BUILT.get(nodeid, 0)} for nodeid, outcome in plugin_outcomes.OUTCOMES.items()}
        target.write_text(json.dumps(results, indent=1))
