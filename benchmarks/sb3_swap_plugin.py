"""pytest plugin: run Stable-Baselines3's own tests with ``MmreplayBuffer`` in place of SB3's buffers.

Loaded with ``-p sb3_swap_plugin`` (``benchmarks/`` on ``PYTHONPATH``) by ``sb3_own_tests.py``. At
configure time, before SB3's test modules are imported, it replaces ``ReplayBuffer`` and
``NStepReplayBuffer`` in ``stable_baselines3.common.buffers`` and ``off_policy_algorithm`` (where the
algorithms choose their default buffer) by classes that build an ``MmreplayBuffer`` at a fresh store
path for every observation space the buffer accepts (a ``Box`` of any numeric or bool dtype and any
shape: images, vectors, scalars), and SB3's own class for any other, with the buffer's own reason
(``Discrete``, ``MultiDiscrete``, ``MultiBinary``). ``DictReplayBuffer`` (and ``HerReplayBuffer``, its
subclass) is not swapped: mmreplay has no dict observations; the plugin only records that a test built
one. ``isinstance`` checks against the replaced names accept SB3's own buffers too. Each test's outcome
is written with the buffers it built (``--mmreplay-report``), so the harness can say which tests
exercised mmreplay and which were not applicable, and why.
"""

from __future__ import annotations

import itertools
import json
import tempfile
from abc import ABCMeta
from pathlib import Path
from typing import Any

import pytest
from gymnasium import spaces

import stable_baselines3.common.buffers as sb3_buffers
import stable_baselines3.common.off_policy_algorithm as sb3_off_policy
from mmreplay.sb3 import MmreplayBuffer
from mmreplay.sb3.observations import frame_layout

ORIGINAL_REPLAY = sb3_buffers.ReplayBuffer
ORIGINAL_N_STEP = sb3_buffers.NStepReplayBuffer


class _Swap:
    """Where the stores go and what each test built."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="mmreplay-sb3-tests-"))
        self.counter = itertools.count()
        self.test: str | None = None
        self.built: dict[str, dict[str, Any]] = {}

    def record(self, kind: str, detail: str) -> None:
        entry = self.built.setdefault(self.test or "<collection>", {"mmreplay": 0, "sb3": []})
        if kind == "mmreplay":
            entry["mmreplay"] += 1
        elif detail not in entry["sb3"]:
            entry["sb3"].append(detail)

    def next_path(self) -> Path:
        return self.directory / f"buffer-{next(self.counter)}.mmr"


SWAP = _Swap()


def not_stored_by_mmreplay(space: spaces.Space[Any]) -> str | None:
    """Why ``MmreplayBuffer`` refuses these observations (its own message), or None when it takes them.
    The buffer decides by ``frame_layout``, the check its constructor makes first."""
    try:
        frame_layout(space, None)
    except (TypeError, ValueError) as error:
        return f"{type(space).__name__} observations: MmreplayBuffer refuses them ({error})"
    return None


class _AcceptsSB3Buffers(ABCMeta):
    """``isinstance(buffer, ReplayBuffer)`` (SB3's load_replay_buffer asserts it) holds for SB3's own
    buffers, which the swapped classes build for observations mmreplay does not store."""

    def __instancecheck__(cls, instance: object) -> bool:
        accepted: type = cls.__dict__.get("accepts", ORIGINAL_REPLAY)
        if isinstance(instance, MmreplayBuffer):
            return cls is SwappedReplayBuffer or instance.n_steps > 1
        return isinstance(instance, accepted)


class SwappedReplayBuffer(MmreplayBuffer, metaclass=_AcceptsSB3Buffers):
    accepts = ORIGINAL_REPLAY

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """An ``MmreplayBuffer`` when it takes the observation space, else SB3's own class (whose
        ``__init__`` Python then leaves alone). No arguments: unpickling (``load_replay_buffer``,
        ``copy.deepcopy``), which calls ``__setstate__`` next."""
        if not args and not kwargs:
            return super().__new__(cls)
        observation_space = args[1] if len(args) > 1 else kwargs["observation_space"]
        reason = not_stored_by_mmreplay(observation_space)
        if reason is not None:
            SWAP.record("sb3", reason)
            return cls.accepts(*args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        device: Any = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        **kwargs: Any,
    ) -> None:
        SWAP.record("mmreplay", "")
        super().__init__(
            buffer_size, observation_space, action_space, device, n_envs, optimize_memory_usage,
            handle_timeout_termination, path=kwargs.pop("path", SWAP.next_path()), **kwargs,
        )


class SwappedNStepReplayBuffer(SwappedReplayBuffer):
    accepts = ORIGINAL_N_STEP

    def __init__(self, *args: Any, n_steps: int = 3, gamma: float = 0.99, **kwargs: Any) -> None:
        super().__init__(*args, n_steps=n_steps, gamma=gamma, **kwargs)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--mmreplay-report", default=None, help="write each test's outcome and buffers as JSON here")


ORIGINAL_DICT_INIT = sb3_buffers.DictReplayBuffer.__init__


def _recording_dict_init(self: sb3_buffers.DictReplayBuffer, *args: Any, **kwargs: Any) -> None:
    """``DictReplayBuffer.__init__`` unchanged, noting that the test built one (not swapped)."""
    SWAP.record("sb3", f"{type(self).__name__} (Dict observations: mmreplay has none, not swapped)")
    ORIGINAL_DICT_INIT(self, *args, **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    for module in (sb3_buffers, sb3_off_policy):
        module.ReplayBuffer = SwappedReplayBuffer  # type: ignore[misc]
        module.NStepReplayBuffer = SwappedNStepReplayBuffer  # type: ignore[misc]
    sb3_buffers.DictReplayBuffer.__init__ = _recording_dict_init  # type: ignore[method-assign]


def pytest_collection_finish(session: pytest.Session) -> None:
    """The test modules hold the swapped names now; ``buffers`` gets its own back, because
    ``DictReplayBuffer`` calls ``super(ReplayBuffer, self)`` by that module's name."""
    sb3_buffers.ReplayBuffer = ORIGINAL_REPLAY  # type: ignore[misc]
    sb3_buffers.NStepReplayBuffer = ORIGINAL_N_STEP  # type: ignore[misc]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    SWAP.test = item.nodeid


# Each test's outcome: "passed", "failed", "error in setup" or "teardown", "skipped"; and the first line of why.
_OUTCOMES: dict[str, dict[str, str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _OUTCOMES.setdefault(report.nodeid, {"outcome": "passed", "message": ""})
    if report.failed:
        entry["outcome"] = "failed" if report.when == "call" else f"error in {report.when}"
        entry["message"] = _first_line(report)
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"
        entry["message"] = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""


def _first_line(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return text.strip().splitlines()[0][:300] if text.strip() else ""


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--mmreplay-report")
    if path is None:
        return
    tests = {nodeid: {**outcome, **SWAP.built.get(nodeid, {"mmreplay": 0, "sb3": []})} for nodeid, outcome in _OUTCOMES.items()}
    Path(path).write_text(json.dumps(tests, indent=1))
