"""The package's layers point one way, read from the import statements of every module of ``mmreplay/``
(a module in a folder is named ``folder.module``, the folder's ``__init__.py`` by the folder's name).

The layers are folders. ``disk`` (files, the header) is the ground; ``rows`` (the transition and field
tables) and ``frames`` (codecs and rings) stand on it; ``sampling`` deals in integers and knows nothing of
storage; the ``store`` package is built on all of them; serialization (``hdf5``, ``dopamine``) and the
integrations (``cli``, ``sb3``, ``recorder``) reach a store through its public face (``mmreplay.store``),
never through its files; ``ray``, ``rllib``, ``torchrl`` and ``jax`` use only the package's public names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mmreplay"

# The top-level modules, each placed in a layer; every folder is a layer of its own (or part of one).
TOP_LEVEL = {
    "base": {"errors", "extensions", "extras", "validation", "limits", "process_memory", "batch", "__init__",
             "__main__"},
    "integrations": {"recorder"},
}
FOLDER_LAYERS = {
    "disk": "disk", "rows": "rows", "frames": "frames", "sampling": "sampling", "gpu": "gpu", "store": "store",
    "hdf5": "serialization", "dopamine": "serialization", "copying": "serialization",
    "cli": "integrations", "sb3": "integrations",
    "ray": "public-api", "rllib": "public-api", "torchrl": "public-api",
    "tianshou": "public-api",
    "d3rlpy": "public-api",
    "jax": "public-api",
    # real ALE frame streams for tests and benchmarks: beside the package, imported by none of it
    "testing": "testing",
}
# What each layer may import from the package besides its own layer and the base modules: whole folders
# (``"disk/"``), single modules (``"store.reading.episode_list"``; ``"store"`` is the folder's __init__, its public
# face), or whole layers (``"layer:serialization"``).
ALLOWED = {
    "base": set(),
    "disk": set(),
    "rows": {"disk/"},
    # frames rebuild stacks with the rows' index arithmetic
    "frames": {"disk/", "rows.stacking"},
    # the priorities file is a store file: opened as every one is (relative to the store's directory)
    "sampling": {"disk.store_directory"},
    # torch and nvCOMP: staging, the device records, decoding blocks on the GPU (frames' encoded blocks)
    "gpu": {"frames/"},
    "store": {"disk/", "rows/", "frames/", "sampling/", "gpu/"},
    # The public store and the records it returns (Episode); files for building an export beside its
    # target (make_sibling_directory, atomic_builds.SiblingBuild), as the store builds itself.
    # (A store written again takes the old one's sampler, made anew from its config.)
    "serialization": {"store", "store.reading.episode_list", "disk.files", "disk.atomic_builds", "sampling.samplers"},
    # The command line refuses output paths as imports and exports do (atomic_builds.check_new_path) and
    # names their leftovers.
    "integrations": {"store", "store.reading.episode_list", "disk.atomic_builds", "layer:serialization"},
    # The integration packages build on the package's own names (``from mmreplay import ...``), its
    # samplers and the validators; never storage. A load builds its copy beside the store it replaces
    # (atomic_builds.SiblingBuild), as imports do.
    "public-api": {"sampling.samplers", "validation", "disk.atomic_builds"},
    "testing": set(),
}
# Only these modules import a third-party codec or file format directly.
THIRD_PARTY_OWNERS = {
    "lz4": {"frames.lz4_codec", "frames.reference_codec", "frames.legacy_frames"},
    "h5py": {"hdf5.conversion", "hdf5.checks", "hdf5.datasets", "hdf5.minari_layout", "hdf5.mmreplay_layout",
             "tianshou.persistence"},
    # torch is optional: the batch records' to_torch, SB3's buffers, the device batches (whole folders as
    # "folder/"; the façade and batch_streams name torch.device in their annotations only)
    "torch": {"batch", "sb3/", "gpu/", "store/feeds/", "store.replay_store", "torchrl/"},
    # TorchRL's storage and samplers (the torchrl extra)
    "torchrl": {"torchrl/"},
    "tensordict": {"torchrl/"},
    # Tianshou's buffers (the tianshou extra); its HDF5 files through Tianshou's own converters
    "tianshou": {"tianshou/"},
    # JAX learners' batches (the jax extra)
    "jax": {"jax/"},
}


def modules() -> list[str]:
    """Every module of the package by its dotted name below ``mmreplay`` (a folder's ``__init__.py`` by the
    folder's name: ``store``, ``store.reading``)."""
    names = [path.stem for path in PACKAGE.glob("*.py")]
    for folder in FOLDER_LAYERS:
        for path in (PACKAGE / folder).rglob("*.py"):
            dotted = path.relative_to(PACKAGE).with_suffix("").parts
            names.append(".".join(dotted[:-1] if dotted[-1] == "__init__" else dotted))
    return sorted(names)


def is_package(parts: list[str]) -> bool:
    return bool(parts) and (PACKAGE.joinpath(*parts) / "__init__.py").exists()


def source_of(module: str) -> Path:
    parts = module.split(".")
    if is_package(parts):
        return PACKAGE.joinpath(*parts) / "__init__.py"
    return PACKAGE.joinpath(*parts[:-1]) / f"{parts[-1]}.py"


def module_name(parts: list[str]) -> str:
    """The module named by ``mmreplay.<parts>``: its longest prefix that is a module or a folder (a name
    imported from a module is the module: ``store.passes.ordered_pass`` is ``store.passes``)."""
    name = parts[0]
    for depth in range(2, len(parts) + 1):
        prefix = parts[:depth]
        if is_package(prefix) or PACKAGE.joinpath(*prefix[:-1], f"{prefix[-1]}.py").exists():
            name = ".".join(prefix)
        else:
            break
    return name


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
                if is_package(parts):
                    # ``from mmreplay.disk import header``: modules or folders of the folder, or names of its __init__
                    folder = ".".join(parts)
                    for alias in node.names:
                        is_module = (PACKAGE.joinpath(*parts) / f"{alias.name}.py").exists() or is_package([*parts, alias.name])
                        package_modules.add(f"{folder}.{alias.name}" if is_module else folder)
                elif parts:
                    package_modules.add(module_name(parts))
                else:  # ``from mmreplay import validation``: the names are modules (or __init__'s public names)
                    package_modules.update(alias.name for alias in node.names
                                           if (PACKAGE / f"{alias.name}.py").exists() or alias.name in FOLDER_LAYERS)
            else:
                others.add(name.split(".")[0])
    package_modules.discard(module)
    return package_modules, others


def layer_of(module: str) -> str:
    folder = module.split(".")[0]
    if folder in FOLDER_LAYERS:
        return FOLDER_LAYERS[folder]
    return next(name for name, members in TOP_LEVEL.items() if module in members)


def allowed_for(layer: str, module: str) -> bool:
    """Whether a module of ``layer`` may import ``module``."""
    target = layer_of(module)
    if target in (layer, "base"):
        return True
    names = ALLOWED[layer]
    parts = module.split(".")
    folders = {"/".join(parts[:depth]) + "/" for depth in range(1, len(parts))} | ({module.replace(".", "/") + "/"}
                                                                                if is_package(parts) else set())
    return module in names or bool(folders & names) or f"layer:{target}" in names


def test_every_module_has_a_layer() -> None:
    top = {path.stem for path in PACKAGE.glob("*.py")}
    placed = set().union(*TOP_LEVEL.values())
    assert sorted(top - placed) == []
    assert sorted(placed - top) == []  # no stale names either
    folders = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}  # the layers' folders (sub-folders are families)
    assert sorted(folders ^ set(FOLDER_LAYERS)) == []


@pytest.mark.parametrize("module", [m for m in modules() if m not in {"__init__", "__main__"}])
def test_a_module_imports_only_from_its_own_layer_and_the_layers_below(module: str) -> None:
    layer = layer_of(module)
    imported, _ = imports_of(module)
    outside = sorted(name for name in imported if not allowed_for(layer, name))
    assert outside == [], f"{module} ({layer}) imports outside its layers"


@pytest.mark.parametrize("package, owners", sorted(THIRD_PARTY_OWNERS.items()))
def test_lz4_h5py_and_torch_are_imported_by_their_owning_modules_only(package: str, owners: set[str]) -> None:
    importers = {module for module in modules() if package in imports_of(module)[1]}
    outside = {module for module in importers
               if module not in owners and not any(owner.endswith("/") and (module + ".").replace(".", "/").startswith(owner)
                                                   for owner in owners)}
    assert not outside, f"{sorted(outside)} import {package}"


def test_the_import_reader_sees_each_form_of_import() -> None:
    # replay_store.py uses ``from mmreplay.store import passes``, ``from mmreplay.batch import ...`` and
    # numpy, follower.py ``from mmreplay.disk import header``: a reader that missed a form would pass every
    # test above for the wrong reason.
    imported, others = imports_of("store.replay_store")
    assert {"batch", "frames.wire", "sampling.samplers", "store.passes", "store.feeds.batch_streams"} <= imported
    assert "numpy" in others
    assert {"disk.header", "frames.ring"} <= imports_of("store.follower")[0]
    assert {"lz4"} <= imports_of("frames.lz4_codec")[1]
    # a folder's modules are read under their ``folder.module`` names, its __init__ by the folder's
    assert {"hdf5.checks", "hdf5.datasets", "store"} <= imports_of("hdf5.conversion")[0]
    assert "hdf5.conversion" in imports_of("hdf5")[0]
    assert "store.replay_store" in imports_of("store")[0]
    assert "h5py" in imports_of("hdf5.checks")[1]
    # and the layer rule itself refuses what it should
    assert not allowed_for("disk", "frames.ring")
    assert not allowed_for("sampling", "rows.transitions")
    assert not allowed_for("serialization", "store.reading.transition_reader")
    assert allowed_for("serialization", "store.reading.episode_list")
    assert allowed_for("frames", "rows.stacking") and not allowed_for("frames", "rows.transitions")


def test_no_module_outside_mmreplay_testing_imports_it() -> None:
    """``mmreplay.testing`` (the frame recorder the tests and benchmarks import) serves the tests and
    benchmarks only: a store, a CLI command or an integration that needed it would need ALE to run."""
    importers = sorted(module for module in modules() if module.split(".")[0] != "testing"
                       and any(name.split(".")[0] == "testing" for name in imports_of(module)[0]))
    assert importers == []
    assert not any(allowed_for(layer, "testing.atari_frames") for layer in ALLOWED if layer != "testing")
    assert "testing.atari_frames" in modules() and imports_of("testing.atari_frames")[0] == set()


# The integration packages (mmreplay/ray/, mmreplay/rllib/, mmreplay/torchrl/) build on the public API: the package's own
# names (``from mmreplay import ...``), its samplers and the validators; never storage.
# They may name their extra when its dependencies are missing (``extras.require``). TorchRL's loads build
# their copy beside the store they replace (``atomic_builds.SiblingBuild``), as imports do.
INTEGRATION_PACKAGES = {"ray": {"sampling.samplers", "validation", "extras"}, "rllib": {"extras"},
                        "torchrl": {"validation", "extras", "disk.atomic_builds"}, "tianshou": {"validation", "extras"}}


@pytest.mark.parametrize("package", sorted(INTEGRATION_PACKAGES))
def test_the_integration_packages_use_only_the_public_api(package: str) -> None:
    for path in sorted((PACKAGE / package).glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        used = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mmreplay."):
                used.add(module_name(node.module.split(".")[1:]))
            elif isinstance(node, ast.Import):
                used.update(module_name(a.name.split(".")[1:]) for a in node.names if a.name.startswith("mmreplay."))
        used = {name for name in used if name.split(".")[0] != package}
        assert sorted(used - INTEGRATION_PACKAGES[package]) == [], f"{path.name} reaches past the public API"


# Inside the store, its families point one way: the façade (``store.replay_store``) over all of them; the
# feeds (``store/feeds/``) over reading, through the seam the façade hands them (``store.batch_source``)
# and the layout's properties; writing over reading; reading over no other part of the store.
STORE_FAMILIES = {
    "store.reading": set(),
    "store.writing": {"store.reading"},
    "store.feeds": {"store.reading", "store.batch_source", "store.store_layout"},
}


@pytest.mark.parametrize("family", sorted(STORE_FAMILIES))
def test_the_stores_families_import_only_the_families_below_them(family: str) -> None:
    members = [m for m in modules() if m == family or m.startswith(family + ".")]
    assert members, family
    may = {family, *STORE_FAMILIES[family]}
    for module in members:
        reached = {name for name in imports_of(module)[0] if name.split(".")[0] == "store"}
        outside = sorted(name for name in reached
                         if not any(name == allowed or name.startswith(allowed + ".") for allowed in may))
        assert outside == [], f"{module} reaches {outside} of the store"


def test_only_the_stores_face_and_its_test_seam_import_the_facade() -> None:
    importers = sorted(m for m in modules() if "store.replay_store" in imports_of(m)[0])
    assert importers == ["store", "store.internals"]
