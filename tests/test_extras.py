"""Importing an optional part of mmreplay without its dependencies names the extra that installs them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from mmreplay.extras import require

REPO = Path(__file__).resolve().parent.parent


def import_without(module: str, missing: list[str]) -> subprocess.CompletedProcess[str]:
    """Import ``module`` in a fresh interpreter where the ``missing`` packages cannot be found."""
    hide = "; ".join(f"sys.modules[{name!r}] = None" for name in missing)  # find_spec then finds nothing
    code = f"import sys; {hide}; import {module}"
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    ("module", "missing", "message"),
    [
        ("mmreplay.sb3", ["stable_baselines3"], r"mmreplay.sb3 needs stable_baselines3, not installed here: pip install 'mmreplay\[sb3\]'"),
        ("mmreplay.sb3", ["torch"], r"mmreplay.sb3 needs torch, not installed here: pip install 'mmreplay\[sb3\]' \(in a clone: pip install '.\[sb3\]'\); for the CPU-only torch wheel, install torch first: pip install torch --index-url https://download.pytorch.org/whl/cpu"),
        ("mmreplay.recorder", ["gymnasium"], r"mmreplay.recorder needs gymnasium, not installed here: pip install 'mmreplay\[recorder\]'"),
        ("mmreplay.ray", ["ray"], r"mmreplay.ray needs ray, not installed here: pip install 'mmreplay\[ray\]'"),
        ("mmreplay.rllib", ["ray", "torch"], r"mmreplay.rllib needs ray and torch, not installed here: pip install 'mmreplay\[rllib\]'"),
        ("mmreplay.torchrl", ["tensordict", "torchrl"], r"mmreplay.torchrl needs tensordict and torchrl, not installed here: pip install 'mmreplay\[torchrl\]' \(in a clone: pip install '.\[torchrl\]'\)$"),
        ("mmreplay.jax", ["jax"], r"mmreplay.jax needs jax, not installed here: pip install 'mmreplay\[jax\]' \(in a clone: pip install '.\[jax\]'\)$"),
        ("mmreplay.torchrl", ["torch", "tensordict", "torchrl"], r"mmreplay.torchrl needs torch and tensordict and torchrl, not installed here: pip install 'mmreplay\[torchrl\]' \(in a clone: pip install '.\[torchrl\]'\); for the CPU-only torch wheel"),
    ],
)
def test_an_optional_module_imported_without_its_dependencies_names_its_extra(module, missing, message):
    result = import_without(module, missing)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: ") and re.search(message, last), result.stderr


def test_the_core_package_imports_without_any_extra():
    result = import_without("mmreplay", ["stable_baselines3", "torch", "gymnasium", "ray", "torchrl", "tensordict"])
    assert result.returncode == 0, result.stderr


def test_require_names_the_missing_module_as_the_error_does():
    with pytest.raises(ModuleNotFoundError, match=r"^demo needs no_such_module_mmreplay, not installed here") as caught:
        require("demo", extra="demo", modules=("numpy", "no_such_module_mmreplay"))
    assert caught.value.name == "no_such_module_mmreplay"
    require("demo", extra="demo", modules=("numpy",))  # installed: nothing raised
