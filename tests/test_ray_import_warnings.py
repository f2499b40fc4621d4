"""Importing mmreplay's Ray and RLlib integrations warns of nothing of mmreplay's own (they used the
deprecated ``mmreplay.Sampler``, so every ``import mmreplay.ray`` printed a DeprecationWarning)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("ray", reason="Ray is not installed: pip install 'mmreplay[ray]' to run the Ray tests")


@pytest.mark.parametrize("module", ["mmreplay.ray", "mmreplay.rllib"])
def test_importing_the_integration_gives_no_deprecation_warning_of_mmreplays(module: str) -> None:
    code = (
        "import warnings\n"
        "warnings.filterwarnings('error', category=DeprecationWarning, module='mmreplay')\n"
        f"import {module}\n"
    )
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
