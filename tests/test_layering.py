"""The package's layers point one way, read from the import statements of ``mmreplay/*.py``.

Storage (frames, rows, files, the header) knows nothing of sampling, the public store, serialization or
the command line; samplers deal in integers and know nothing of storage; serialization and the
integrations reach a store through its public API (``mmreplay.store``), not through its files.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mmreplay"

# Every module of the package, by layer. A new module must be placed here (a test checks it).
BASE = {"errors", "extensions", "validation", "batch", "__init__", "__main__"}
STORAGE = {
    "files", "building", "format", "codec", "frame_ring", "transition_table", "stacking",
    "reference_codec", "reference_ring", "frame_encoding", "row_checksum", "header_fields", "field_table",
    "directory_swap",
}
SAMPLING = {"samplers", "sum_tree", "priorities"}
API = {"store", "reading", "episodes", "windows", "prefetch", "autocommit", "encoded"}
SERIALIZATION = {
    "hdf5", "hdf5_checks", "hdf5_datasets", "hdf5_minari", "hdf5_mmreplay_layout", "hdf5_replay", "dopamine",
    "dopamine_episodes",
}
INTEGRATIONS = {"cli", "drawing", "verification", "sb3", "sb3_observations", "recorder"}
LAYERS = {
    "base": BASE, "storage": STORAGE, "sampling": SAMPLING, "api": API,
    "serialization": SERIALIZATION, "integrations": INTEGRATIONS,
}

# What each layer may import from the package (besides its own layer and the base modules).
ALLOWED = {
    "base": set(),
    "storage": set(),
    "sampling": set(),
    "api": STORAGE | SAMPLING,
    # The public API, and the records it returns (Episode, from episodes); files for building an
    # export beside its target (make_sibling_directory, building.SiblingBuild), as the store builds itself.
    "serialization": {"store", "episodes", "files", "building"},
    # The command line prints the on-disk format version (format.FORMAT_VERSION) beside the layout, and
    # refuses output paths as imports and exports do (building.check_new_path) and names their leftovers.
    "integrations": {"store", "episodes", "format", "building"} | SERIALIZATION,
}
# Only these modules import a third-party codec or file format directly.
THIRD_PARTY_OWNERS = {"lz4": {"codec", "reference_codec"}, "h5py": {"hdf5", "hdf5_checks", "hdf5_datasets", "hdf5_minari", "hdf5_mmreplay_layout"}}


def modules() -> list[str]:
    return sorted(path.stem for path in PACKAGE.glob("*.py"))


def imports_of(module: str) -> tuple[set[str], set[str]]:
    """The package modules and the top-level third-party packages that ``module`` imports, anywhere in it
    (also inside functions: a lazy import is a dependency too)."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(), filename=f"{module}.py")
    package_modules: set[str] = set()
    others: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "mmreplay":
                    package_modules.update(parts[1:2])
                else:
                    others.add(parts[0])
        elif isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level or name.split(".")[0] == "mmreplay":
                parts = name.split(".")[0 if node.level else 1 :]
                if parts and parts[0]:
                    package_modules.add(parts[0])
                else:  # ``from mmreplay import format``: the names are modules (or __init__'s public names)
                    package_modules.update(alias.name for alias in node.names if (PACKAGE / f"{alias.name}.py").exists())
            else:
                others.add(name.split(".")[0])
    package_modules.discard(module)
    return package_modules, others


def layer_of(module: str) -> str:
    return next(name for name, members in LAYERS.items() if module in members)


def test_every_module_has_a_layer() -> None:
    placed = set().union(*LAYERS.values())
    assert [module for module in modules() if module not in placed] == []
    assert sorted(placed - set(modules())) == []  # no stale names either


@pytest.mark.parametrize("module", [m for m in modules() if m not in {"__init__", "__main__"}])
def test_a_module_imports_only_from_its_own_layer_and_the_layers_below(module: str) -> None:
    layer = layer_of(module)
    allowed = LAYERS[layer] | BASE | ALLOWED[layer]
    imported, _ = imports_of(module)
    assert sorted(imported - allowed) == [], f"{module} ({layer}) imports outside its layers"


@pytest.mark.parametrize("package, owners", sorted(THIRD_PARTY_OWNERS.items()))
def test_lz4_and_h5py_are_imported_by_their_owning_modules_only(package: str, owners: set[str]) -> None:
    importers = {module for module in modules() if package in imports_of(module)[1]}
    assert importers <= owners, f"{sorted(importers - owners)} import {package}"


def test_the_import_reader_sees_each_form_of_import() -> None:
    # store.py uses ``from mmreplay import format``, ``from mmreplay.batch import ...`` and numpy:
    # a reader that missed a form would pass every test above for the wrong reason.
    imported, others = imports_of("store")
    assert {"format", "batch", "frame_ring", "samplers"} <= imported
    assert "numpy" in others
    assert {"lz4"} <= imports_of("codec")[1]


# The integration packages (mmreplay/ray/, mmreplay/rllib/) build on the public API: the package's own
# names (``from mmreplay import ...``), its records and samplers, and the validators; never storage.
INTEGRATION_PACKAGES = {"ray": {"samplers", "validation", "ray"}, "rllib": {"rllib"}}


@pytest.mark.parametrize("package", sorted(INTEGRATION_PACKAGES))
def test_the_integration_packages_use_only_the_public_api(package: str) -> None:
    for path in sorted((PACKAGE / package).glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        used = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mmreplay."):
                used.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                used.update(a.name.split(".")[1] for a in node.names if a.name.startswith("mmreplay."))
        assert sorted(used - INTEGRATION_PACKAGES[package]) == [], f"{path.name} reaches past the public API"
