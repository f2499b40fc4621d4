"""The manual says what the code is: the code map names every file of the package, the API reference
covers every public name, and the paths and links of README.md and docs/ lead to files that exist.

``mkdocs build --strict`` (CI) checks the links between pages and their anchors; these checks need no
MkDocs and run with the suite, so that a renamed module fails here, naming the page that still has the
old name. The package is read as source (``ast``), never imported: its Ray and RLlib modules need Ray.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "mmreplay"
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
CODE_MAP = REPO / "docs" / "code-map.md"

# The modules whose public names the API reference must cover, and its pages.
DOCUMENTED_MODULES = ["mmreplay", "mmreplay.hdf5", "mmreplay.dopamine", "mmreplay.sb3", "mmreplay.torchrl",
                      "mmreplay.ray", "mmreplay.rllib", "mmreplay.recorder", "mmreplay.cli",
                      "mmreplay.tianshou", "mmreplay.jax", "mmreplay.testing.atari_frames"]
API_PAGES = sorted((REPO / "docs" / "api").glob("*.md"))

# Paths the pages name that are not this repository's: SB3's own test files, which
# benchmarks/sb3_own_tests.py fetches and runs.
FOREIGN_PATHS = {
    "tests/test_buffers.py": "Stable-Baselines3's own tests",
    "tests/test_save_load.py": "Stable-Baselines3's own tests",
    "tests/test_n_step_replay.py": "Stable-Baselines3's own tests",
}

LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")
REPOSITORY_PATH = re.compile(r"(?<![\w/.$<-])((?:mmreplay|scripts|benchmarks|tests|docs)/[\w./-]*\w)")
FENCED = re.compile(r"^ {0,3}```.*?^ {0,3}```", re.MULTILINE | re.DOTALL)


def relative(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def package_files() -> list[Path]:
    """Every Python module, C source and header of the package but the folders' ``__init__.py``."""
    found = [path for suffix in ("*.py", "*.c", "*.h") for path in PACKAGE.rglob(suffix)]
    return sorted(path for path in found if "__pycache__" not in path.parts
                  and not (path.name == "__init__.py" and path.parent != PACKAGE))


def code_map_rows() -> dict[str, str]:
    """The code map's table: folder (``mmreplay/store/``) -> the row's text."""
    rows = {}
    for line in CODE_MAP.read_text().splitlines():
        match = re.match(r"\| `(mmreplay/(?:[\w/]+/)?)` \|(.*)\|\s*$", line)
        if match:
            assert match.group(1) not in rows, f"docs/code-map.md has two rows for {match.group(1)}"
            rows[match.group(1)] = match.group(2)
    return rows


def test_the_code_map_names_every_file_of_the_package_in_its_folders_row() -> None:
    rows = code_map_rows()
    missing = []
    for path in package_files():
        folder = path.parent.relative_to(REPO).as_posix() + "/"
        if folder not in rows or f"`{path.name}`" not in rows[folder]:
            missing.append(path.relative_to(REPO).as_posix())
    assert not missing, f"docs/code-map.md does not name these files in their folder's row: {missing}"


def test_the_code_map_names_no_file_that_is_gone() -> None:
    names = {path.name for path in package_files()} | {"__init__.py"}
    gone = [(folder, name) for folder, text in code_map_rows().items()
            for name in re.findall(r"`([\w.]+\.(?:py|c|h))`", text) if name not in names]
    assert not gone, f"docs/code-map.md names files the package does not have: {gone}"
    folders = {path.parent.relative_to(REPO).as_posix() + "/" for path in package_files()}
    assert set(code_map_rows()) == folders, "docs/code-map.md has a row for a folder the package lacks, or the reverse"


def public_names(module: str) -> list[str]:
    """``__all__`` of a module or package, read from its source; without one, the public classes and
    functions it defines."""
    path = REPO / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = REPO / module.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return [node.name for node in tree.body
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and not node.name.startswith("_")]


@pytest.mark.parametrize("module", DOCUMENTED_MODULES)
def test_the_api_reference_covers_every_public_name_of(module: str) -> None:
    directives = {line.split()[1] for page in API_PAGES for line in page.read_text().splitlines()
                  if line.startswith("::: ")}
    names = public_names(module)
    assert names, f"{module} has no public names to document"
    missing = [name for name in names if f"{module}.{name}" not in directives and module not in directives]
    assert not missing, f"docs/api/ has no '::: {module}.NAME' for {missing}"


def test_every_api_reference_directive_names_a_public_name() -> None:
    documented = {f"{module}.{name}" for module in DOCUMENTED_MODULES for name in public_names(module)}
    stray = [(relative(page), line) for page in API_PAGES for line in page.read_text().splitlines()
             if line.startswith("::: ") and line.split()[1] not in documented | set(DOCUMENTED_MODULES)]
    assert not stray, f"API reference entries that are no public name: {stray}"


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_every_relative_link_of_the_page_leads_to_a_file_that_exists(page: Path) -> None:
    text = FENCED.sub("", page.read_text())
    targets = [target for target in LINK.findall(text) if not re.match(r"^[a-zA-Z][\w+.-]*:", target)]
    broken = [target for target in targets if not (page.parent / target).exists()]
    assert not broken, f"{relative(page)} links files that do not exist: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_every_repository_path_the_page_names_exists(page: Path) -> None:
    named = set(REPOSITORY_PATH.findall(page.read_text()))
    gone = sorted(path for path in named if path not in FOREIGN_PATHS and not (REPO / path).exists())
    assert not gone, f"{relative(page)} names paths the repository does not have: {gone}"
