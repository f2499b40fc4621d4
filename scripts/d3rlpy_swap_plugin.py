"""A pytest plugin that runs d3rlpy's own ``tests/dataset`` with ``MmreplayReplayBuffer`` swapped in
(``scripts/d3rlpy_own_tests.py`` loads it; nothing of d3rlpy's is copied here).

With ``--mmreplay-swap=on``, in every test module of ``tests/dataset``:

* ``create_episode`` (d3rlpy's testing helper) returns its episode written into a store and read back
  as the adapter's episode view, so that d3rlpy's pickers, slicers, buffers, writers and io tests run
  on store episodes;
* ``ReplayBuffer``, ``create_fifo_replay_buffer``, ``create_infinite_replay_buffer`` and ``MDPDataset``
  build an ``MmreplayReplayBuffer`` over a new store from the same arguments.

Each test's outcome, the adapter objects it built and the first line of its error go to
``--mmreplay-report`` (JSON).
"""

from __future__ import annotations

import json
import tempfile
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

BUILT = {"views": 0, "buffers": 0}
ROOM = 100_000  # capacity beyond a buffer's first episodes, for the tests that append after them


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--mmreplay-swap", default="on", choices=("on", "off"))
    parser.addoption("--mmreplay-report", default=None)


def _new_path() -> Path:
    return Path(tempfile.mkdtemp(prefix="d3rlpy-own-")) / "buffer.mmr"


def _frame_stack(picker: Any) -> int:
    from d3rlpy.dataset import FrameStackTransitionPicker

    return int(picker._n_frames) if isinstance(picker, FrameStackTransitionPicker) else 1  # noqa: SLF001 (d3rlpy's)


def swapped_classes() -> dict[str, Any]:
    """The replacements of d3rlpy's buffer constructors."""
    from d3rlpy.dataset import FIFOBuffer
    from d3rlpy.dataset.episode_generator import EpisodeGenerator

    from mmreplay import ReplayStore
    from mmreplay.d3rlpy import MmreplayReplayBuffer

    class ReplayBuffer(MmreplayReplayBuffer):
        """d3rlpy's ``ReplayBuffer(buffer, ...)`` arguments, an ``MmreplayReplayBuffer`` over a new store."""

        def __init__(self, buffer: Any = None, transition_picker: Any = None, trajectory_slicer: Any = None,
                     writer_preprocessor: Any = None, episodes: Any = None, env: Any = None,
                     observation_signature: Any = None, action_signature: Any = None, reward_signature: Any = None,
                     action_space: Any = None, action_size: Any = None, **ignored: Any) -> None:
            if isinstance(buffer, ReplayStore):  # the named constructors' own call
                super().__init__(buffer, action_space=action_space, action_size=action_size, **ignored)
                return
            BUILT["buffers"] += 1
            limit = getattr(buffer, "_limit", None)
            frame_stack = _frame_stack(transition_picker)
            if episodes:
                made = MmreplayReplayBuffer.from_episodes(
                    _new_path(), episodes, frame_stack=frame_stack, action_space=action_space, action_size=action_size,
                    capacity=limit or sum(len(e.actions) for e in episodes) + ROOM)
            else:
                if env is None:
                    if isinstance(observation_signature.shape[0][0], (list, tuple)) or len(observation_signature.shape) > 1:
                        raise TypeError("tuple observations: a store keeps one observation array per step")
                    discrete = action_space is not None and action_space.name == "DISCRETE"
                    env = types.SimpleNamespace(
                        observation_space=types.SimpleNamespace(shape=tuple(observation_signature.shape[0]),
                                                                dtype=observation_signature.dtype[0]),
                        action_space=(types.SimpleNamespace(n=action_size) if discrete else
                                      types.SimpleNamespace(shape=tuple(action_signature.shape[0]),
                                                            dtype=action_signature.dtype[0])))
                made = MmreplayReplayBuffer.create(_new_path(), env=env, capacity=limit or ROOM, frame_stack=frame_stack)
            self.__dict__.update(made.__dict__)

        @classmethod
        def load(cls, f: Any, buffer: Any = None, episode_cls: Any = None, transition_picker: Any = None,
                 trajectory_slicer: Any = None, writer_preprocessor: Any = None, **ignored: Any) -> Any:
            BUILT["buffers"] += 1
            return MmreplayReplayBuffer.load(f, path=_new_path(), frame_stack=_frame_stack(transition_picker))

    def create_fifo_replay_buffer(limit: int, episodes: Any = None, transition_picker: Any = None,
                                  trajectory_slicer: Any = None, writer_preprocessor: Any = None, env: Any = None,
                                  write_at_termination: bool = False) -> Any:
        return ReplayBuffer(FIFOBuffer(limit), transition_picker, trajectory_slicer, None, episodes, env)

    def create_infinite_replay_buffer(episodes: Any = None, transition_picker: Any = None, trajectory_slicer: Any = None,
                                      writer_preprocessor: Any = None, env: Any = None,
                                      write_at_termination: bool = False) -> Any:
        return ReplayBuffer(None, transition_picker, trajectory_slicer, None, episodes, env)

    def MDPDataset(observations: Any, actions: Any, rewards: Any, terminals: Any, timeouts: Any = None,  # noqa: N802
                   transition_picker: Any = None, trajectory_slicer: Any = None, action_space: Any = None,
                   action_size: Any = None) -> Any:
        episodes = EpisodeGenerator(observations, actions, rewards, terminals, timeouts)()
        return ReplayBuffer(None, transition_picker, trajectory_slicer, None, episodes, None, action_space=action_space,
                            action_size=action_size)

    return {"ReplayBuffer": ReplayBuffer, "create_fifo_replay_buffer": create_fifo_replay_buffer,
            "create_infinite_replay_buffer": create_infinite_replay_buffer, "MDPDataset": MDPDataset}


def stored_episode(create_episode: Any) -> Any:
    """``create_episode`` whose episode is written into a store and given back as the store's view."""
    from mmreplay.d3rlpy import MmreplayReplayBuffer

    def create(*args: Any, **kwargs: Any) -> Any:
        episode = create_episode(*args, **kwargs)
        BUILT["views"] += 1
        actions = np.asarray(episode.actions)
        buffer = MmreplayReplayBuffer.from_episodes(
            _new_path(), [episode], action_size=int(actions.max()) + 1 if actions.dtype.kind in "iu" else None)
        # every episode is listed, even one of no transition d3rlpy counts: read it through the index's episode
        return buffer._view(0)  # noqa: SLF001 (the harness's own reach into the adapter)

    return create


@pytest.fixture(autouse=True)
def _swap(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    module = request.module
    if request.config.getoption("--mmreplay-swap") == "off" or ".dataset." not in module.__name__:
        return
    for name, replacement in swapped_classes().items():
        if hasattr(module, name):
            monkeypatch.setattr(module, name, replacement)
    if hasattr(module, "create_episode"):
        monkeypatch.setattr(module, "create_episode", stored_episode(module.create_episode))


RESULTS: dict[str, dict[str, Any]] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    if call.when == "setup":
        BUILT.update(views=0, buffers=0)
    outcome = yield
    report = outcome.get_result()
    record = RESULTS.setdefault(item.nodeid, {"outcome": "passed", "message": "", "views": 0, "buffers": 0})
    if report.failed or report.skipped:
        if record["outcome"] == "passed":
            record["outcome"] = "skipped" if report.skipped else "failed"
            text = str(report.longrepr[2] if report.skipped and isinstance(report.longrepr, tuple) else report.longrepr)
            errors = [line[2:].strip() for line in text.splitlines() if line.startswith("E ")]
            record["message"] = (errors[0] if errors else text.strip().splitlines()[-1])[:300]
    if call.when == "call":
        record.update(views=BUILT["views"], buffers=BUILT["buffers"])


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = session.config.getoption("--mmreplay-report")
    if target:
        Path(target).write_text(json.dumps(RESULTS, indent=1))
