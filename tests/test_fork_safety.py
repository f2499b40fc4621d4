"""A writer belongs to the process that opened it: a forked child's inherited copy is closed, writes nothing.

Each test runs a script in a fresh interpreter that forks, so that the child's exit is a real one (its
``atexit`` commit, its garbage collection, its module teardown), and reads back what the script prints.
The child of a writer (an env worker or a data loader started with ``fork``) must not commit its stale
copy of the header over the parent's, must be refused every write with an error that names the fork, and
must exit without waiting for a thread it does not have.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mmreplay import ReplayStore

REPO = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT_S = 60  # a child that waits for a thread it does not have never exits; generous for a loaded CI

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

PRELUDE = """
import json, os, sys, threading, time
import numpy as np
from mmreplay import ReplayStore, PrioritizedSampler

def frame(i, shape=(8, 8)):
    return np.full(shape, i % 251, np.uint8)

def wait_child(pid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hung"
"""


def run_script(body: str, *args: str, timeout: float = 240) -> dict:
    """Run PRELUDE + ``body`` in a new interpreter (``sys.argv[1:]`` = ``args``); its last stdout line, as JSON."""
    script = PRELUDE + f"TIMEOUT = {CHILD_TIMEOUT_S}\n" + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=REPO)
    assert done.returncode == 0, f"the script failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    lines = done.stdout.strip().splitlines()
    assert lines, f"the script printed nothing:\n{done.stderr}"
    result = json.loads(lines[-1])
    result["stderr"] = done.stderr
    return result


def test_a_forked_child_that_exits_normally_leaves_the_parents_commits(tmp_path: Path) -> None:
    """The child forked after 10 commits tries an add and a flush and then exits normally;
    the parent commits 20 more meanwhile. Today the child's exit commit wrote its stale header (11
    transitions) over the parent's 30."""
    path = tmp_path / "store.mmr"
    result = run_script(
        """
        path = sys.argv[1]
        store = ReplayStore.create(path, frame_shape=(8, 8), capacity=100, stack_size=1)
        for i in range(10):
            store.add(frame(i), i, 0.0, frame(i + 1), False, False)
        store.flush()
        go = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.read(go[0], 1)  # the parent has committed 30
            outcome = []
            for call in (lambda: store.add(frame(100), 100, 0.0, frame(101), False, False), store.flush):
                try:
                    call()
                    outcome.append("ok")
                except Exception as error:
                    outcome.append(f"{type(error).__name__}: {error}")
            print(json.dumps(outcome), file=sys.stderr)
            sys.exit(0)  # a normal exit: atexit, then the store's __del__
        for i in range(10, 30):
            store.add(frame(i), i, 0.0, frame(i + 1), False, False)
        store.flush()
        os.write(go[1], b"x")
        code = wait_child(pid, TIMEOUT)
        with open(os.path.join(path, "header.json")) as header:
            after_child = json.load(header)["commit"]["transitions_added"]
        store.close()
        print(json.dumps({"child": code, "after_child": after_child}))
        """,
        str(path),
    )
    assert result["child"] == 0
    assert result["after_child"] == 30, result["stderr"]
    with ReplayStore.open(path) as store:
        assert store.transitions_added == 30
        batch = store.read(np.arange(30))
        np.testing.assert_array_equal(batch.action, np.arange(30))
        np.testing.assert_array_equal(batch.obs[:, -1, 0, 0], np.arange(30))


def test_a_forked_childs_calls_are_refused_naming_the_fork(tmp_path: Path) -> None:
    """Every call but ``close`` raises ClosedStoreError naming the fork and saying to open the store in the
    child; the child's store reads as closed; ``close`` and ``with`` end quietly; nothing is written."""
    path = tmp_path / "store.mmr"
    result = run_script(
        """
        path = sys.argv[1]
        store = ReplayStore.create(path, frame_shape=(8, 8), capacity=100, stack_size=1,
                                   sampler=PrioritizedSampler())
        for i in range(10):
            store.add(frame(i), i, 0.0, frame(i + 1), False, False)
        store.add(frame(10), 10, 0.0, frame(11), False, False)  # added, not committed: the child must not commit it
        before = open(os.path.join(path, "header.json"), "rb").read()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            calls = {
                "add": lambda: store.add(frame(11), 11, 0.0, frame(12), False, False),
                "flush": store.flush,
                "clear": store.clear,
                "update_priorities": lambda: store.update_priorities([0], [1.0]),
                "sample": lambda: store.sample(2, rng=0),
                "read": lambda: store.read([0]),
                "episodes": store.episodes,
            }
            outcome = {"closed": store.closed}
            for name, call in calls.items():
                try:
                    call()
                    outcome[name] = "returned"
                except Exception as error:
                    outcome[name] = f"{type(error).__name__}: {error}"
            try:
                with store:
                    pass
                store.close()
                outcome["close"] = "returned"
            except Exception as error:
                outcome["close"] = f"{type(error).__name__}: {error}"
            os.write(write, json.dumps(outcome).encode())
            sys.exit(0)
        os.close(write)
        code = wait_child(pid, TIMEOUT)
        outcome = json.loads(os.read(read, 1 << 20))
        after = open(os.path.join(path, "header.json"), "rb").read()
        store.add(frame(11), 11, 0.0, frame(12), False, False)
        store.close()
        print(json.dumps({"child": code, "outcome": outcome, "header_unchanged": before == after}))
        """,
        str(path),
    )
    assert result["child"] == 0
    assert result["header_unchanged"]
    outcome = result["outcome"]
    assert outcome.pop("closed") is True
    assert outcome.pop("close") == "returned"
    for name, message in outcome.items():
        operation = "list episodes" if name == "episodes" else name
        assert message.startswith(f"ClosedStoreError: cannot {operation}: "), (name, message)
        assert "is a fork of" in message and "open the store in this process" in message, (name, message)
    with ReplayStore.open(path) as store:
        assert store.transitions_added == 12  # the parent's 11 and its one after the fork
        np.testing.assert_array_equal(store.read(np.arange(12)).action, np.arange(12))


def test_a_store_dropped_in_a_forked_child_writes_nothing(tmp_path: Path) -> None:
    """The child drops the store (``__del__``) and exits by ``os._exit``: the header stays the parent's."""
    path = tmp_path / "store.mmr"
    result = run_script(
        """
        import gc
        path = sys.argv[1]
        store = ReplayStore.create(path, frame_shape=(8, 8), capacity=100, stack_size=1)
        for i in range(5):
            store.add(frame(i), i, 0.0, frame(i + 1), False, False)
        before = open(os.path.join(path, "header.json"), "rb").read()
        pid = os.fork()
        if pid == 0:
            del store
            gc.collect()
            os._exit(0)
        code = wait_child(pid, TIMEOUT)
        after = open(os.path.join(path, "header.json"), "rb").read()
        store.close()
        print(json.dumps({"child": code, "header_unchanged": before == after}))
        """,
        str(path),
    )
    assert result == {"child": 0, "header_unchanged": True, "stderr": result["stderr"]}
    with ReplayStore.open(path) as store:
        assert store.transitions_added == 5


def test_children_forked_while_another_thread_adds_and_samples_exit_normally(tmp_path: Path) -> None:
    """A thread of the parent adds vector steps (their frames shared out to the pool's helpers) and samples
    batches large enough to decode on two threads, while the main thread forks children: each child opens
    the store read-only, samples from it, and exits normally, never waiting for the parent's threads or
    locks. The parent's store then holds every add that returned."""
    path = tmp_path / "store.mmr"
    result = run_script(
        """
        from mmreplay.store import internals
        path = sys.argv[1]
        shape = (84, 84)
        store = ReplayStore.create(path, frame_shape=shape, capacity=5000, stack_size=4, num_envs=8,
                                   frame_encoding="lz4", commit_interval_s=0.05)
        internals.writer_of(store).append_threads = 4  # fan out even on a machine of 2 cores
        rng = np.random.default_rng(0)
        frames = (rng.integers(0, 4, (64, 8) + shape) * 60).astype(np.uint8)
        adds, stop = [0], threading.Event()

        def adding():
            t = 0
            while not stop.is_set():
                store.add(frames[t % 63], np.zeros(8, np.int64) + t, np.zeros(8, np.float32), frames[t % 63 + 1],
                          np.zeros(8, bool), np.zeros(8, bool))
                t += 1
                adds[0] = t
                if t % 4 == 0:
                    store.sample(64, rng=t)  # 64 stacks of 84x84x5: decoded on two threads

        worker = threading.Thread(target=adding)
        worker.start()
        while adds[0] < 5:
            time.sleep(0.001)
        codes = []
        for n in range(12):
            time.sleep(0.002 * (n % 4))
            pid = os.fork()
            if pid == 0:
                reader = ReplayStore.open(path, "r")
                if len(reader):
                    reader.sample(64, rng=n)
                sys.exit(0)  # atexit, the inherited writer's __del__, module teardown
            codes.append(wait_child(pid, TIMEOUT))
        stop.set()
        worker.join()
        added = store.transitions_added
        store.close()
        print(json.dumps({"codes": codes, "added": added, "adds": adds[0]}))
        """,
        str(path),
    )
    assert result["codes"] == [0] * 12, result["stderr"]
    assert result["added"] == 8 * result["adds"]
    with ReplayStore.open(path) as store:
        assert store.transitions_added == result["added"]


def test_a_read_only_store_goes_on_reading_in_a_forked_child(tmp_path: Path) -> None:
    """A reader belongs to no process: a data loader forked from the process that opened it samples it."""
    path = tmp_path / "store.mmr"
    with ReplayStore.create(path, frame_shape=(8, 8), capacity=100, stack_size=2) as store:
        for i in range(20):
            store.add(np.full((8, 8), i, np.uint8), i, 0.0, np.full((8, 8), i + 1, np.uint8), False, False)
    result = run_script(
        """
        reader = ReplayStore.open(sys.argv[1], "r")
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            batch = reader.sample(16, rng=3)
            ok = bool(np.all(batch.next_obs[:, -1, 0, 0] == batch.action + 1))
            os.write(write, json.dumps({"ok": ok, "closed": reader.closed}).encode())
            sys.exit(0)
        os.close(write)
        code = wait_child(pid, TIMEOUT)
        child = json.loads(os.read(read, 1 << 16))
        reader.close()
        print(json.dumps({"child": code, **child}))
        """,
        str(path),
    )
    assert (result["child"], result["ok"], result["closed"]) == (0, True, False)
