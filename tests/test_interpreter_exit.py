"""Nothing prints at interpreter exit, whatever was left open and whenever the teardown reaches it.

A store that something keeps alive until the interpreter tears its modules down (jax did) was
dropped after ``mmreplay``'s modules were cleared, and its ``__del__`` printed "Exception ignored
in ReplayStore.__del__". The scripts here hold the store in a module imported before mmreplay, which the
teardown clears after mmreplay's (modules are cleared newest first), so the store's ``__del__`` runs
with mmreplay's globals gone: the same order, without jax.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mmreplay import ReplayStore

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import collections, sys
import numpy as np
from mmreplay import ReplayStore
path, mode, hold = sys.argv[1:4]
store = ReplayStore.open(path, mode)
if mode == "r+":
    store.add(np.full((4, 4), 5, np.uint8), 5, 0.0, np.full((4, 4), 6, np.uint8), False, False)  # continues the episode
store.sample(2, rng=0)
if hold == "late-module":
    collections._held_store = store  # cleared after mmreplay's modules at teardown
elif hold == "cycle":
    class Holder:
        pass
    holder = Holder()
    holder.self, holder.store = holder, store
    del holder
    import gc
    gc.disable()  # the cycle is left for the interpreter's last collection
del store
"""


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "store.mmr"
    with ReplayStore.create(path, frame_shape=(4, 4), capacity=10, stack_size=1) as store:
        for i in range(5):
            store.add(np.full((4, 4), i, np.uint8), i, 0.0, np.full((4, 4), i + 1, np.uint8), False, False)
    return path


@pytest.mark.parametrize("hold", ["late-module", "cycle", "global"])
@pytest.mark.parametrize("mode", ["r", "r+"])
def test_a_store_left_open_prints_nothing_at_exit(store_path: Path, mode: str, hold: str) -> None:
    """Read-only and writer stores, kept alive by a module the teardown clears late, by a reference cycle,
    or by nothing: the exit prints nothing, and a writer's last add is committed (by the exit commit)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), str(store_path), mode, hold],
                          capture_output=True, text=True, env=env, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    with ReplayStore.open(store_path) as store:
        assert store.transitions_added == (6 if mode == "r+" else 5)
