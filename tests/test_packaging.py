"""What a user learns about the compiled extensions: one warning at import when one could not be imported,
``mmreplay --version`` and ``mmreplay info`` saying whether compiled code is in use.

Each case runs in a fresh interpreter, where an import hook makes the extensions' import fail the way a
missing build (or a missing liblz4) does, before ``mmreplay`` is first imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mmreplay
from mmreplay import ReplayStore
from mmreplay.extensions import INTERFACES

REPO = Path(mmreplay.__file__).resolve().parent.parent  # where the package under test is imported from
SOURCES = Path(__file__).resolve().parent.parent  # the checkout or unpacked sdist holding these tests
EXTENSIONS = ("mmreplay._lz4batch", "mmreplay._sumtree")

# Run before anything else in the child: the named extensions fail to import, with the given error.
BLOCK = """
import sys
FAIL = {fail!r}
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name in FAIL:
            if FAIL[name] is None:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            raise ImportError(FAIL[name])
sys.meta_path.insert(0, Blocker())
"""

IMPORT_AND_RECORD = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import mmreplay
    import mmreplay.frames.lz4_codec, mmreplay.sampling.sum_tree, mmreplay.frames.reference_codec, mmreplay.cli
print(json.dumps({"warnings": [[w.category.__name__, str(w.message), w.filename] for w in caught],
                  "accelerated": [mmreplay.frames.lz4_codec.ACCELERATED, mmreplay.sampling.sum_tree.ACCELERATED,
                                  mmreplay.frames.reference_codec.ACCELERATED]}))
"""

RUN_CLI = """
import runpy
sys.argv = ["mmreplay", *{argv!r}]
runpy.run_module("mmreplay", run_name="__main__")
"""


def run_python(code: str, *, hide: bool = False) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    environment.pop("MMREPLAY_PURE_PYTHON", None)
    if hide:
        environment["MMREPLAY_PURE_PYTHON"] = "1"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment,
                          cwd=REPO, timeout=120)


def import_with(fail: dict[str, str | None], *, hide: bool = False) -> dict[str, list[object]]:
    done = run_python(BLOCK.format(fail=fail) + IMPORT_AND_RECORD, hide=hide)
    assert done.returncode == 0, done.stderr
    result: dict[str, list[object]] = json.loads(done.stdout)
    return result


def performance_warnings(result: dict[str, list[object]]) -> list[str]:
    return [message for category, message, _ in result["warnings"] if category == "PerformanceWarning"]  # type: ignore[misc]


def test_extensions_that_are_not_built_give_one_warning_at_import_naming_what_is_slower_and_the_fix() -> None:
    result = import_with({name: None for name in EXTENSIONS})

    assert result["accelerated"] == [False, False, False]
    [message] = performance_warnings(result)
    assert message.startswith("mmreplay is using its pure-Python code: the compiled extension(s) _lz4batch, "
                              "_sumtree could not be imported (not built). Results are identical, but "
                              "adding transitions is about 2-4x slower and sampling about 2-3x slower.\n")
    for fix in ("Debian/Ubuntu:  sudo apt-get install build-essential liblz4-dev zlib1g-dev",
                "Fedora:         sudo dnf install gcc lz4-devel zlib-devel",
                "macOS:          xcode-select --install && brew install lz4",
                "pip install --force-reinstall --no-deps -e .", "MMREPLAY_PURE_PYTHON=1"):
        assert fix in message


def test_the_warning_points_at_the_line_that_imported_mmreplay() -> None:
    result = import_with({name: None for name in EXTENSIONS})

    [filename] = [name for category, _, name in result["warnings"] if category == "PerformanceWarning"]  # type: ignore[misc]
    assert filename == "<string>"  # the child's -c code, not mmreplay's own files


def test_an_extension_whose_library_cannot_be_loaded_is_named_with_the_loaders_error() -> None:
    error = "liblz4.so.1: cannot open shared object file: No such file or directory"
    result = import_with({"mmreplay._lz4batch": error})

    assert result["accelerated"] == [False, True, False]  # both codecs are _lz4batch's
    [message] = performance_warnings(result)
    assert message.startswith(f"mmreplay is using its pure-Python code: the compiled extension(s) _lz4batch "
                              f"could not be imported ({error}).")


def test_an_extension_built_from_older_sources_is_refused_and_its_fallback_used_with_a_warning_to_rebuild() -> None:
    # An update that did not rebuild leaves the old module in place: it would lack the newer functions.
    stale = "import sys, types\nsys.modules['mmreplay._sumtree'] = types.ModuleType('mmreplay._sumtree')\n"
    done = run_python(stale + IMPORT_AND_RECORD)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)

    assert result["accelerated"] == [True, False, True]
    [message] = performance_warnings(result)
    assert ("the compiled extension(s) _sumtree could not be imported (built from other sources than this "
            f"mmreplay's (interface None, expected {INTERFACES['_sumtree']}): rebuild it)") in message
    assert "pip install --force-reinstall --no-deps -e ." in message


def test_extensions_hidden_by_mmreplay_pure_python_give_no_warning() -> None:
    result = import_with({}, hide=True)

    assert result["accelerated"] == [False, False, False]
    assert performance_warnings(result) == []


def test_version_says_the_extensions_are_not_built() -> None:
    done = run_python(BLOCK.format(fail={name: None for name in EXTENSIONS}) + RUN_CLI.format(argv=["--version"]))

    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"mmreplay {mmreplay.__version__}: pure Python for _lz4batch, _sumtree "
                           f"(not built): adding transitions is about 2-4x slower and sampling about 2-3x slower\n")


def test_version_says_when_the_extensions_are_hidden() -> None:
    done = run_python("import sys" + RUN_CLI.format(argv=["--version"]), hide=True)

    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (f"mmreplay {mmreplay.__version__}: pure Python (the compiled extensions are hidden "
                           f"by MMREPLAY_PURE_PYTHON=1)\n")


def test_python_dash_m_mmreplay_version_says_compiled_code_is_in_use_when_it_is() -> None:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    environment.pop("MMREPLAY_PURE_PYTHON", None)
    probe = subprocess.run([sys.executable, "-c", "import mmreplay.frames.lz4_codec as c, mmreplay.sampling.sum_tree as t, "
                            "mmreplay.frames.reference_codec as r; print(c.ACCELERATED and t.ACCELERATED and r.ACCELERATED)"],
                           capture_output=True, text=True, env=environment, cwd=REPO)
    if probe.stdout.strip() != "True":
        pytest.skip("the compiled extensions are not built here (scripts/setup.sh builds them)")

    done = subprocess.run([sys.executable, "-m", "mmreplay", "--version"], capture_output=True, text=True,
                          env=environment, cwd=REPO)

    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (f"mmreplay {mmreplay.__version__}: compiled extensions in use "
                           f"(_lz4batch, _sumtree)\n")


def test_info_says_whether_compiled_code_is_in_use(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(8, 8), capacity=4, stack_size=1) as store:
        frame = np.zeros((8, 8), np.uint8)
        store.add(frame, 0, 0.0, frame, True, False)
    done = run_python("import sys" + RUN_CLI.format(argv=["info", str(tmp_path / "s.mmr"), "--json"]), hide=True)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["compiled_code"] == (
        "pure Python (the compiled extensions are hidden by MMREPLAY_PURE_PYTHON=1)")


def test_the_version_is_written_once_in_the_package_and_read_by_pyproject() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    project = tomllib.loads((SOURCES / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "mmreplay.__version__"}
    assert isinstance(mmreplay.__version__, str) and mmreplay.__version__.count(".") == 2


def test_every_folder_of_the_package_is_listed_as_a_package_in_pyproject() -> None:
    # setuptools ships only the packages listed: a folder left out installs from a checkout but is
    # missing from the wheel, and its imports fail only for users.
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    listed = set(tomllib.loads((SOURCES / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(path.parent.relative_to(SOURCES).parts) for path in (SOURCES / "mmreplay").rglob("__init__.py")}
    assert folders == listed


# What setup.py declares, under a liblz4 lookup patched to each answer it can get; setup() itself is
# replaced, so that nothing is built.
SETUP_PROBE = """
import ctypes.util, json, os, runpy, subprocess, sys, setuptools, setuptools.command.build_ext  # before sys.platform changes
ctypes.util.find_library = lambda name: {found!r}
sys.platform = {platform!r}
if {brew!r} is not None:
    os.makedirs(os.path.join({brew!r}, "lib"), exist_ok=True)
    subprocess.run = lambda *args, **kwargs: subprocess.CompletedProcess(args, 0, stdout={brew!r} + "\\n")
declared = {{}}
setuptools.setup = lambda **kwargs: declared.update(kwargs)
runpy.run_path("setup.py", run_name="__main__")
print(json.dumps({{ext.name: [ext.libraries, ext.extra_link_args, ext.extra_objects, ext.library_dirs, ext.optional]
                  for ext in declared["ext_modules"]}}))
"""


@pytest.mark.parametrize(
    ("found", "platform", "link"),
    [
        (None, "linux", [["lz4", "z"], [], [], []]),  # no liblz4: the link fails, the extension is skipped
        ("liblz4.so", "linux", [["lz4", "z"], [], [], []]),  # the development symlink
        ("liblz4.so.1", "linux", [["z"], ["-l:liblz4.so.1"], [], []]),  # only the runtime library
        ("/usr/lib/liblz4.1.dylib", "darwin", [["z"], [], ["/usr/lib/liblz4.1.dylib"], []]),  # no Homebrew
        ("liblz4.1.dylib", "darwin-brew", [["lz4", "z"], [], [], ["{brew}/lib"]]),  # Homebrew's lz4
    ],
)
def test_setup_py_declares_the_lz4_extension_whatever_the_liblz4_lookup_finds(
    tmp_path: Path, found: str | None, platform: str, link: list[list[str]]
) -> None:
    """liblz4 linked by name (not found, a development symlink, Homebrew) and zlib are one list of
    libraries: setup.py once passed them as two, a TypeError that stopped the whole install where an
    optional extension should have been skipped."""
    pytest.importorskip("setuptools")
    brew = str(tmp_path / "homebrew") if platform == "darwin-brew" else None
    code = SETUP_PROBE.format(found=found, platform=platform.removesuffix("-brew"), brew=brew)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=SOURCES, timeout=120)

    assert done.returncode == 0, done.stderr
    declared = json.loads(done.stdout.splitlines()[-1])
    expected = [[entry.format(brew=brew) for entry in entries] for entries in link]
    assert declared["mmreplay._lz4batch"] == [*expected, True]
    assert declared["mmreplay._sumtree"] == [["m"], [], [], [], True]  # the C library's pow, and nothing of lz4
