"""A first hour without surprises: the manual's install lines keep an editable install editable, every
torch install takes PyTorch's CPU-only index, the package config installs without setuptools' banners,
the apt and dnf lines work as root, the test command says each long stage before it starts, and what
the demo writes is ignored by git."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MANUAL = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
SCRIPTS = [REPO / "scripts" / "setup.sh", REPO / "scripts" / "test.sh"]
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# A pip command in a code block or in inline code (`pip install -e '.[sb3]'`).
PIP_COMMAND = re.compile(r"(?:^|`|\s)((?:\S*python\S* -m )?pip install [^`#\n]*)")


def pip_commands(text: str) -> list[list[str]]:
    """The words of each ``pip install`` command in ``text`` (a page, or a script)."""
    found = []
    for line in text.splitlines():
        for match in PIP_COMMAND.finditer(line):
            words = shlex.split(match.group(1).split("  #")[0].replace("$", "\\$"))
            found.append(words[words.index("install") + 1:])
    return found


def installs_the_clone(arguments: list[str]) -> bool:
    """Whether pip's arguments install the project from its directory: ``.`` or ``.[extras]``."""
    return any(re.fullmatch(r"\.(\[[\w,$\\-]*\])?", word) for word in arguments)


def installs_torch(arguments: list[str]) -> bool:
    return any(re.fullmatch(r"torch([=<>!~].*)?", word) for word in arguments)


def readme_block(title: str) -> str:
    """The first bash block after the README's heading ``title``."""
    text = (REPO / "README.md").read_text()
    section = text[text.index(f"### {title}\n"):]
    return section[section.index("```bash\n") + len("```bash\n"):section.index("\n```\n")]


def test_the_readme_s_own_environment_block_installs_the_clone_editable_on_every_line() -> None:
    block = readme_block("Installing into your own environment")
    commands = pip_commands(block)
    clone = [arguments for arguments in commands if installs_the_clone(arguments)]
    assert len(clone) >= 3, block  # the project, then its sb3 and torchrl extras
    assert [arguments for arguments in clone if "-e" not in arguments] == []
    assert [arguments[arguments.index("-e") + 1] for arguments in clone] == [".", ".[sb3]", ".[torchrl]"]


def test_torch_comes_first_in_the_readme_s_block_from_pytorch_s_cpu_index() -> None:
    commands = pip_commands(readme_block("Installing into your own environment"))
    assert installs_torch(commands[0]) and commands[0][-2:] == ["--index-url", TORCH_CPU_INDEX]


@pytest.mark.parametrize("page", MANUAL, ids=lambda page: str(page.relative_to(REPO)))
def test_every_pip_line_of_the_manual_that_installs_the_clone_is_editable(page: Path) -> None:
    copies = [" ".join(arguments) for arguments in pip_commands(page.read_text())
              if installs_the_clone(arguments) and "-e" not in arguments]
    assert copies == [], f"{page.relative_to(REPO)}: these replace an editable install with a copy: {copies}"


@pytest.mark.parametrize("path", [*MANUAL, *SCRIPTS], ids=lambda path: str(path.relative_to(REPO)))
def test_every_torch_install_takes_pytorch_s_cpu_index(path: Path) -> None:
    text = path.read_text()
    index = re.search(r"^TORCH_CPU_INDEX=(\S+)", text, re.MULTILINE)
    wrong = []
    for arguments in pip_commands(text):
        if not installs_torch(arguments):
            continue
        given = arguments[arguments.index("--index-url") + 1] if "--index-url" in arguments else None
        if given == "\\$TORCH_CPU_INDEX" and index is not None:
            given = index.group(1)
        if given != TORCH_CPU_INDEX:
            wrong.append(" ".join(arguments))
    assert wrong == [], f"{path.relative_to(REPO)}: torch installed without PyTorch's CPU index: {wrong}"


def test_the_scripts_install_torch_at_all() -> None:
    """The check above is not empty: each script installs torch (setup.sh for .venv, test.sh for .venv-ray)."""
    for script in SCRIPTS:
        assert any(installs_torch(arguments) for arguments in pip_commands(script.read_text())), script


@pytest.mark.parametrize("page", MANUAL, ids=lambda page: str(page.relative_to(REPO)))
def test_no_install_line_of_the_manual_needs_sudo_to_exist(page: Path) -> None:
    bare = [line.strip() for line in page.read_text().splitlines()
            if re.search(r"(?<![\w-])sudo (apt-get|apt|dnf|yum)\b", line.replace("$(command -v sudo)", ""))]
    assert bare == [], f"{page.relative_to(REPO)}: a bare sudo fails as root where sudo is absent: {bare}"


def test_the_readme_s_apt_line_runs_as_root_without_sudo(tmp_path: Path) -> None:
    """``$(command -v sudo)`` expands to nothing where there is no sudo: the line is the bare command."""
    line = next(re.search(r"`(\$\(command -v sudo\) apt-get install [^`]+)`", l).group(1)  # type: ignore[union-attr]
                for l in (REPO / "README.md").read_text().splitlines() if "apt-get install build-essential" in l)
    (tmp_path / "apt-get").write_text("#!/bin/sh\necho apt-get \"$@\"\n")
    (tmp_path / "apt-get").chmod(0o755)
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run([bash, "-c", line], capture_output=True, text=True, env={"PATH": str(tmp_path)})
    assert done.returncode == 0 and done.stdout == "apt-get install build-essential liblz4-dev zlib1g-dev\n"


def test_the_package_config_builds_without_setuptools_banners(tmp_path: Path) -> None:
    """setuptools warns of each folder under mmreplay/_c that package data would install as a package
    it was not told of ("Package 'mmreplay._c' is absent from the `packages` configuration"): none."""
    pytest.importorskip("setuptools")
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path / "lib")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "is absent from the `packages` configuration" not in done.stdout + done.stderr
    assert "Package would be ignored" not in done.stdout + done.stderr
    built = tmp_path / "lib" / "mmreplay"
    assert (built / "py.typed").is_file() and not (built / "_c").exists()


def test_the_test_command_says_each_long_stage_before_it_with_its_expected_time() -> None:
    """Every pip install and pytest run of scripts/test.sh (and setup.sh's pip installs) comes after an
    echo of what it is about to do, with an expected time, since each is silent for minutes."""
    silent, stages = [], 0
    for script in SCRIPTS:
        said = None  # the latest echo: a stage's line covers the commands after it, up to the next one
        for line in (line.strip() for line in script.read_text().splitlines()):
            if line.startswith("echo "):
                said = line
            elif re.search(r"-m (pip install|pytest)\b", line) or line.startswith("bash scripts/setup.sh"):
                stages += 1
                if said is None or not re.search(r"expected: [^)]*(second|minute)", said):
                    silent.append(f"{script.name}: {line}")
    assert silent == [] and stages >= 9


def test_the_demo_s_outputs_are_ignored_by_git(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout (an sdist)")
    block = readme_block("Demo and tests")
    drawn = re.findall(r"-o (\S+)", (REPO / "README.md").read_text())
    assert "episode0.gif" in drawn, block
    outputs = ["demo.mmr/header.json", ".demo.mmr.creating-1a2b3c4d/header.json", *drawn, "episode1200.png"]
    done = subprocess.run(["git", "check-ignore", "--no-index", "-v", *outputs], cwd=REPO, capture_output=True,
                          text=True)
    ignored = {line.split("\t")[-1] for line in done.stdout.splitlines()}
    assert sorted(set(outputs) - ignored) == []
