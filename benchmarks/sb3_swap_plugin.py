"""pytest plugin: run Stable-Baselines3's own tests with mmreplay's buffers in place of SB3's.

Loaded with ``-p sb3_swap_plugin`` (``benchmarks/`` on ``PYTHONPATH``) by ``sb3_own_tests.py``. At
configure time, before SB3's test modules are imported, it replaces ``ReplayBuffer`` and
``NStepReplayBuffer`` (by ``MmreplayBuffer``), ``DictReplayBuffer`` (by ``MmreplayDictBuffer``) and
``HerReplayBuffer`` (by ``MmreplayHerBuffer``) where SB3's tests and algorithms look them up
(``stable_baselines3.common.buffers``, ``off_policy_algorithm``'s defaults, ``stable_baselines3`` and
``stable_baselines3.her``), each building mmreplay's buffer at a fresh store path for every observation
space it accepts, and SB3's own class for any other, with the buffer's own reason. ``isinstance``
checks against the replaced names accept SB3's own buffers too. Each test's outcome is written with the
buffers it built and whether any of them was added to or sampled (``--mmreplay-report``), so the
harness can say which tests exercised mmreplay, which only built a buffer, and which were not
applicable, and why.
"""

from __future__ import annotations

import itertools
import json
import tempfile
from abc import ABCMeta
from pathlib import Path
from typing import Any

import plugin_outcomes  # beside this file, on the harness's PYTHONPATH
import pytest
import stable_baselines3
import stable_baselines3.common.buffers as sb3_buffers
import stable_baselines3.common.off_policy_algorithm as sb3_off_policy
import stable_baselines3.her
import stable_baselines3.her.her_replay_buffer as sb3_her
from gymnasium import spaces

from mmreplay.sb3 import MmreplayBuffer, MmreplayDictBuffer, MmreplayHerBuffer
from mmreplay.sb3.dict_layout import dict_layout
from mmreplay.sb3.observations import frame_layout

ORIGINAL_REPLAY = sb3_buffers.ReplayBuffer
ORIGINAL_N_STEP = sb3_buffers.NStepReplayBuffer
ORIGINAL_DICT = sb3_buffers.DictReplayBuffer
ORIGINAL_HER = sb3_her.HerReplayBuffer


class _Swap:
    """Where the stores go and what each test built."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="mmreplay-sb3-tests-"))
        self.counter = itertools.count()
        self.test: str | None = None
        self.built: dict[str, dict[str, Any]] = {}

    def record(self, kind: str, detail: str) -> None:
        entry = self.built.setdefault(self.test or "<collection>", {"mmreplay": 0, "sb3": [], "used": []})
        if kind == "mmreplay":
            entry["mmreplay"] += 1
        elif kind == "used":
            if detail not in entry["used"]:
                entry["used"].append(detail)
        elif detail not in entry["sb3"]:
            entry["sb3"].append(detail)

    def next_path(self) -> Path:
        return self.directory / f"buffer-{next(self.counter)}.mmr"


SWAP = _Swap()


def not_stored_by_mmreplay(space: spaces.Space[Any], dict_buffer: bool = False) -> str | None:
    """Why mmreplay's buffer refuses these observations (its own message), or None when it takes them.
    The buffers decide by ``frame_layout`` and ``dict_layout``, the checks their constructors make first."""
    name = "MmreplayDictBuffer" if dict_buffer else "MmreplayBuffer"
    try:
        dict_layout(space, frame_keys=None, stack_size=None) if dict_buffer else frame_layout(space, None)
    except (TypeError, ValueError) as error:
        return f"{type(space).__name__} observations: {name} refuses them ({error})"
    return None


def _observation_space(args: tuple[Any, ...], kwargs: dict[str, Any]) -> spaces.Space[Any]:
    return args[1] if len(args) > 1 else kwargs["observation_space"]


class _AcceptsSB3Buffers(ABCMeta):
    """``isinstance(buffer, ReplayBuffer)`` (SB3's load_replay_buffer asserts it) holds for SB3's own
    buffers, which the swapped classes build for observations mmreplay does not store."""

    def __instancecheck__(cls, instance: object) -> bool:
        accepted: type = cls.__dict__.get("accepts", ORIGINAL_REPLAY)
        if isinstance(instance, MmreplayBuffer):
            return cls is SwappedReplayBuffer or instance.n_steps > 1
        return type.__instancecheck__(cls, instance) or isinstance(instance, accepted)


class _RecordsUse:
    """Notes that a test added to or sampled from one of mmreplay's buffers."""

    def add(self, *args: Any, **kwargs: Any) -> None:
        SWAP.record("used", "add")
        super().add(*args, **kwargs)  # type: ignore[misc]

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        SWAP.record("used", "sample")
        return super().sample(*args, **kwargs)  # type: ignore[misc]


class SwappedReplayBuffer(_RecordsUse, MmreplayBuffer, metaclass=_AcceptsSB3Buffers):
    accepts = ORIGINAL_REPLAY

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """An ``MmreplayBuffer`` when it takes the observation space, else SB3's own class (whose
        ``__init__`` Python then leaves alone). No arguments: unpickling (``load_replay_buffer``,
        ``copy.deepcopy``), which calls ``__setstate__`` next."""
        if not args and not kwargs:
            return super().__new__(cls)
        reason = not_stored_by_mmreplay(_observation_space(args, kwargs))
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


class _SwapsDictSpaces:
    """``__new__``/``__init__`` of a swapped dict-space buffer: the mmreplay class when it takes the
    observation space (recorded, at a fresh path), else SB3's own (``accepts``), the reason recorded."""

    accepts: type

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:
            return super().__new__(cls)
        reason = not_stored_by_mmreplay(_observation_space(args, kwargs), dict_buffer=True)
        if reason is not None:
            SWAP.record("sb3", reason)
            return cls.accepts(*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        SWAP.record("mmreplay", "")
        kwargs.setdefault("path", SWAP.next_path())
        super().__init__(*args, **kwargs)


class SwappedDictReplayBuffer(_RecordsUse, _SwapsDictSpaces, MmreplayDictBuffer, metaclass=_AcceptsSB3Buffers):
    accepts = ORIGINAL_DICT


class SwappedHerReplayBuffer(_RecordsUse, _SwapsDictSpaces, MmreplayHerBuffer, metaclass=_AcceptsSB3Buffers):
    accepts = ORIGINAL_HER


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--mmreplay-report", default=None, help="write each test's outcome and buffers as JSON here")


def pytest_configure(config: pytest.Config) -> None:
    for module in (sb3_buffers, sb3_off_policy):
        module.ReplayBuffer = SwappedReplayBuffer  # type: ignore[misc]
        module.NStepReplayBuffer = SwappedNStepReplayBuffer  # type: ignore[misc]
        module.DictReplayBuffer = SwappedDictReplayBuffer  # type: ignore[misc]
    # The test modules import HerReplayBuffer from these; off_policy_algorithm keeps SB3's class for its
    # issubclass and isinstance checks, which the swapped class (a subclass of it) passes.
    for module in (stable_baselines3, stable_baselines3.her, sb3_her):
        module.HerReplayBuffer = SwappedHerReplayBuffer  # type: ignore[attr-defined]


def pytest_collection_finish(session: pytest.Session) -> None:
    """The test modules hold the swapped names now; ``buffers`` gets its own back, because
    ``DictReplayBuffer`` calls ``super(ReplayBuffer, self)`` by that module's name."""
    sb3_buffers.ReplayBuffer = ORIGINAL_REPLAY  # type: ignore[misc]
    sb3_buffers.NStepReplayBuffer = ORIGINAL_N_STEP  # type: ignore[misc]
    sb3_buffers.DictReplayBuffer = ORIGINAL_DICT  # type: ignore[misc]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    SWAP.test = item.nodeid


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    plugin_outcomes.record(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--mmreplay-report")
    if path is None:
        return
    tests = {nodeid: {**outcome, **SWAP.built.get(nodeid, {"mmreplay": 0, "sb3": [], "used": []})} for nodeid, outcome in plugin_outcomes.OUTCOMES.items()}
    Path(path).write_text(json.dumps(tests, indent=1))
