"""The package's layers point one way, read from the import statements of ``mmreplay/*.py`` and of the
family folders (``mmreplay/hdf5/``, ``mmreplay/dopamine/``, ``mmreplay/sb3/``; a module there is named
``family.module``, its ``__init__.py`` by the family's name).

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
API = {"store", "reading", "episodes", "windows", "prefetch", "autocommit", "encoded", "encoded_batches", "passes", "creating"}
SERIALIZATION = {
    "hdf5", "hdf5.conversion", "hdf5.checks", "hdf5.datasets", "hdf5.minari_layout", "hdf5.mmreplay_layout",
    "hdf5.replay", "dopamine", "dopamine.checkpoints", "dopamine.episodes", "dopamine.importing",
}
INTEGRATIONS = {"cli", "drawing", "verification", "sb3", "sb3.buffer", "sb3.observations", "recorder"}
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
    # The command line refuses output paths as imports and exports do (building.check_new_path) and
    # names their leftovers.
    "integrations": {"store", "episodes", "building"} | SERIALIZATION,
}
# Only these modules import a third-party codec or file format directly.
THIRD_PARTY_OWNERS = {
    "lz4": {"codec", "reference_codec"},
    "h5py": {"hdf5.conversion", "hdf5.checks", "hdf5.datasets", "hdf5.minari_layout", "hdf5.mmreplay_layout"},
}
# Folders of one family of modules, read like the top-level modules (mmreplay/ray/ and mmreplay/rllib/
# are integration packages, checked by the last test).
FAMILIES = ("dopamine", "hdf5", "sb3")


def modules() -> list[str]:
    names = [path.stem for path in PACKAGE.glob("*.py")]
    for family in FAMILIES:
        names += [family if path.stem == "__init__" else f"{family}.{path.stem}" for path in (PACKAGE / family).glob("*.py")]
    return sorted(names)


def source_of(module: str) -> Path:
    if module in FAMILIES:
        return PACKAGE / module / "__init__.py"
    return PACKAGE / (module.replace(".", "/") + ".py")


def module_name(parts: list[str]) -> str:
    """The module named by ``mmreplay.<parts>``: ``family.module`` inside a family folder, else the first part."""
    if parts[0] in FAMILIES and len(parts) > 1 and (PACKAGE / parts[0] / f"{parts[1]}.py").exists():
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


def imports_of(module: str) -> tuple[set[str], set[str]]:
    """The package modules and the top-level third-party packages that ``module`` imports, anywhere in it
    (also inside functions: a lazy import is a dependency too)."""
    path = source_of(module)
    tree = ast.parse(path.read_text(), filename=str(path))
    package_modules: set[str] = set()
    others: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "mmreplay":
                    if len(parts) > 1:
                        package_modules.add(module_name(parts[1:]))
                else:
                    others.add(parts[0])
        elif isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level:
                raise AssertionError(f"{module}: relative imports are not used in this package")
            if name.split(".")[0] == "mmreplay":
                parts = name.split(".")[1:]
                if parts:
                    package_modules.add(module_name(parts))
                    if len(parts) == 1 and parts[0] in FAMILIES:  # ``from mmreplay.hdf5 import checks``
                        package_modules.update(f"{parts[0]}.{alias.name}" for alias in node.names
                                               if (PACKAGE / parts[0] / f"{alias.name}.py").exists())
                else:  # ``from mmreplay import format``: the names are modules (or __init__'s public names)
                    package_modules.update(alias.name for alias in node.names
                                           if (PACKAGE / f"{alias.name}.py").exists() or alias.name in FAMILIES)
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
    # a family folder's modules are read too, under their ``family.module`` names
    assert {"hdf5.checks", "hdf5.datasets", "store"} <= imports_of("hdf5.conversion")[0]
    assert "hdf5.conversion" in imports_of("hdf5")[0]
    assert "h5py" in imports_of("hdf5.checks")[1]


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
