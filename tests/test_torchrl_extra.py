"""Importing mmreplay.torchrl without its extra names the extra (runs whether TorchRL is installed or not:
the child process hides it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_importing_mmreplay_torchrl_without_torchrl_names_the_extra() -> None:
    code = "import sys; sys.modules['torchrl'] = None; import mmreplay.torchrl"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO, check=False)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: mmreplay.torchrl needs TorchRL and tensordict (")
    assert last.endswith("): pip install 'mmreplay[torchrl]'")


def test_the_store_imports_without_torchrl() -> None:
    code = "import sys; sys.modules['torchrl'] = None; sys.modules['tensordict'] = None; import mmreplay; print('ok')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO, check=False)
    assert result.stdout.strip() == "ok", result.stderr
