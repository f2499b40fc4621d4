"""An export that runs out of space ends with one line and exit status 1: every HDF5 object closed on
the error path (one left open crashes libhdf5's exit handler), nothing left beside the target.

The disk fills under a file-size limit (``RLIMIT_FSIZE``; Python ignores SIGXFSZ, so writes fail with
EFBIG as they would with ENOSPC) in a subprocess running the command line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mmreplay import ReplayStore

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def noisy_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("full") / "s.mmr"
    rng = np.random.default_rng(0)
    with ReplayStore.create(path, frame_shape=(84, 84), capacity=600, stack_size=4) as store:
        obs = rng.integers(0, 255, (4, 84, 84), np.uint8)
        for t in range(500):  # incompressible frames: ~3.5 MB of HDF5
            next_obs = np.concatenate([obs[1:], rng.integers(0, 255, (1, 84, 84), np.uint8)])
            store.add(obs, t % 4, 1.0, next_obs, t % 200 == 199, False)
            obs = next_obs
    return path


@pytest.mark.parametrize("layout", ["mmreplay", "minari"])
@pytest.mark.parametrize("limit", [600_000, 2_000_000])
def test_an_export_onto_a_full_disk_prints_one_line_and_exits_1(
    noisy_store: Path, tmp_path: Path, layout: str, limit: int
) -> None:
    target = tmp_path / ("out.h5" if layout == "mmreplay" else "out-v0")
    code = (
        "import resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
        "from mmreplay.cli import main\n"
        f"sys.exit(main(['export', {str(noisy_store)!r}, {str(target)!r}, '--layout', {layout!r}, '--no-progress']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mmreplay: error: ") and "File too large" in lines[0], done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
