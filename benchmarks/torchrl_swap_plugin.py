"""pytest plugin: run TorchRL's own replay-buffer tests with ``MmreplayStorage`` in place of its lazy storages.

Loaded with ``-p torchrl_swap_plugin`` (``benchmarks/`` on ``PYTHONPATH``) by ``torchrl_own_tests.py``. At
configure time, before TorchRL's test modules import them, it replaces ``LazyTensorStorage`` and
``LazyMemmapStorage`` (the storages a test builds from a ``max_size``) in ``torchrl.data`` and its replay
buffer modules by classes that build an ``MmreplayStorage`` at a fresh store path, and TorchRL's own class
where the arguments ask for what ``MmreplayStorage`` does not do (``ndim > 1``, a device other than the
CPU), with that reason. The observation key is the one the test's data uses (``pixels``, else
``observation``, ``obs``, else the first key ``k`` with a ``("next", k)``), named at the first write as a
user names ``pixels_key=``. With ``--mmreplay-swap=off`` nothing is replaced (the baseline run). Each
test's outcome is written with what it built (``--mmreplay-report``).
"""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

import plugin_outcomes  # beside this file, on the harness's PYTHONPATH
import pytest
import torchrl.data as torchrl_data
import torchrl.data.replay_buffers as torchrl_replay_buffers
import torchrl.data.replay_buffers.storages as torchrl_storages

from mmreplay.torchrl import MmreplayStorage
from mmreplay.torchrl.tensordicts import leaves, rows_of

ORIGINALS = {name: getattr(torchrl_storages, name) for name in ("LazyTensorStorage", "LazyMemmapStorage")}
MODULES = (torchrl_data, torchrl_replay_buffers, torchrl_storages)
# A test that runs longer than this is stopped (SIGALRM) and counted as failed with a timeout.
TEST_SECONDS = 120


class _Swap:
    """Where the stores go and what each test built."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="mmreplay-torchrl-tests-"))
        self.counter = itertools.count()
        self.test: str | None = None
        self.built: dict[str, dict[str, Any]] = {}

    def record(self, kind: str, detail: str) -> None:
        entry = self.built.setdefault(self.test or "<collection>", {"mmreplay": 0, "torchrl": []})
        if kind == "mmreplay":
            entry["mmreplay"] += 1
        elif detail not in entry["torchrl"]:
            entry["torchrl"].append(detail)

    def next_path(self) -> Path:
        return self.directory / f"storage-{next(self.counter)}.mmr"


SWAP = _Swap()


def observation_key(keys: set[tuple[str, ...]]) -> str | tuple[str, ...]:
    """The observation key of a test's data: the one with a ``("next", key)`` twin, ``pixels`` first."""
    for name in ("pixels", "observation", "obs"):
        if ("next", name) in keys and (name,) in keys:
            return name
    for key in sorted(keys):
        if key[0] != "next" and ("next", *key) in keys:
            return key if len(key) > 1 else key[0]
    return "pixels"


class HarnessStorage(MmreplayStorage):
    """``MmreplayStorage`` whose ``pixels_key`` is the observation key of the first write's data."""

    def _check_write(self, data: object) -> None:
        if self._layout is None:
            key = observation_key(set(leaves(rows_of(data))))
            self._pixels_key = (key,) if isinstance(key, str) else key
        super()._check_write(data)


class _Swapped(HarnessStorage):
    """An ``MmreplayStorage`` built where a test builds ``original`` (TorchRL's own for arguments it does
    not take). Subclassed below under TorchRL's names, at module level, so that pickles find them."""

    original: type

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:  # unpickling
            return super().__new__(cls)
        reason = _not_swapped(kwargs)
        if reason is not None:
            SWAP.record("torchrl", f"{cls.__name__}({reason}): TorchRL's own")
            return cls.original(*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, max_size: int | None = None, *args: Any, **kwargs: Any) -> None:
        SWAP.record("mmreplay", type(self).__name__)
        super().__init__(max_size if max_size is not None else 1000, SWAP.next_path())


class LazyTensorStorage(_Swapped):
    original = ORIGINALS["LazyTensorStorage"]


class LazyMemmapStorage(_Swapped):
    original = ORIGINALS["LazyMemmapStorage"]


SWAPPED = {"LazyTensorStorage": LazyTensorStorage, "LazyMemmapStorage": LazyMemmapStorage}


def _not_swapped(kwargs: dict[str, Any]) -> str | None:
    """Why TorchRL's own storage is built for these arguments, or None."""
    if kwargs.get("ndim", 1) != 1:
        return f"ndim={kwargs['ndim']}"
    device = kwargs.get("device", "cpu")
    if device not in ("cpu", "auto", None) and str(device) != "cpu":
        return f"device={device!r}"
    return None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--mmreplay-report", default=None, help="write each test's outcome and storages as JSON here")
    parser.addoption("--mmreplay-swap", default="on", choices=("on", "off"), help="off: the baseline, nothing replaced")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--mmreplay-swap") == "off":
        return
    for name, original in ORIGINALS.items():
        for module in MODULES:
            if getattr(module, name, None) is original:
                setattr(module, name, SWAPPED[name])


def _timeout(signum: int, frame: object) -> None:
    raise TimeoutError(f"the test ran past {TEST_SECONDS} s (the harness's limit)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    SWAP.test = item.nodeid
    signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(TEST_SECONDS)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    signal.alarm(0)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    plugin_outcomes.record(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    shutil.rmtree(SWAP.directory, ignore_errors=True)
    path = session.config.getoption("--mmreplay-report")
    if path is None:
        return
    empty = {"mmreplay": 0, "torchrl": []}
    tests = {nodeid: {**outcome, **SWAP.built.get(nodeid, empty)} for nodeid, outcome in plugin_outcomes.OUTCOMES.items()}
    Path(path).write_text(json.dumps(tests, indent=1))
