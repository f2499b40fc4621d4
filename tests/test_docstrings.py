"""The API reference a user reads: every public callable documents its parameters, what it returns and the
errors it raises in Google-style sections (``Args:``, ``Returns:`` or ``Yields:``, ``Raises:``), which the
manual's mkdocstrings renders as tables; each docstring opens with one sentence and keeps figures out
(timings and machine names belong on the benchmarks page, with the machine and the date).

Public: the names in ``__all__`` of the package and of each integration that imports here (an integration
whose library is not installed is skipped, with the reason), a class's methods and properties defined in
mmreplay, its own or inherited from a base class of mmreplay's (not those it inherits from another
library), and its constructor's parameters, documented in the
class docstring (``merge_init_into_class``).

The figure check was widened after its first version: it also catches ratios (``0.9x``, not a shape's
``84x84``) and ``on N cores``, which it missed in ``create``'s and ``sample_encoded``'s docstrings.
Members a class inherits from a base of mmreplay's (``ReplayStore``'s from ``StoreLayout``, a batch's
``to_torch``) are checked too: the API page shows them, and the first version looked at ``vars(cls)`` only.
A class raises when constructing one does (its own ``__init__``, a dataclass's ``__post_init__``); the first
version parsed a class without an ``__init__`` of its own whole, so that a method's ``raise`` was the class's.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import pytest

PUBLIC_MODULES = [
    "mmreplay", "mmreplay.hdf5", "mmreplay.sb3", "mmreplay.torchrl", "mmreplay.tianshou", "mmreplay.ray",
    "mmreplay.rllib", "mmreplay.d3rlpy", "mmreplay.jax", "mmreplay.testing.atari_frames",
]
SECTION = re.compile(r"^(Args|Arguments|Returns|Yields|Raises|Attributes|Examples?|Notes?|Warns|See Also):\s*$")
# A figure measured on a machine: a rate, a time, a ratio (``0.9x``, ``3x``, not a shape's ``84x84``), a
# machine's name or its core count (``on 2 cores``). The ratio and ``on N cores`` patterns were added to the
# lead's first version, which let ``create``'s "0.7x-0.9x from 8 envs ... on 2 cores" through.
FIGURE = re.compile(
    r"\b\d[\d,.]*\s?(us|µs|ms|ns|batches/s|adds/s|transitions/s|GB/s|MB/s)\b|\b\d+-core\b|\bH200\b|development VM"
    r"|(?<![\dx])\d+(\.\d+)?x\b|\bon \d+ cores\b",
)
ABBREVIATIONS = re.compile(r"\b(e\.g|i\.e|etc|vs|cf|approx|No|et al)\.|\d\.\d|\.\.\.|\.[a-z_]")


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        pytest.skip(f"{name} needs a library not installed here: {error}")


def _is_ours(obj: Any) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "mmreplay"


def _callables(module_name: str) -> Iterator[tuple[str, Callable[..., Any], str]]:
    """(qualified name, the function, its kind: function, class, method or property) of each public callable."""
    module = _module(module_name)
    for name in module.__all__:
        obj = getattr(module, name)
        if not _is_ours(obj):
            continue
        if inspect.isclass(obj):
            yield f"{module_name}.{name}", obj, "class"
            members: dict[str, Any] = {}  # inherited from a base of mmreplay's too: the API page shows them
            for base in reversed(obj.__mro__):
                if _is_ours(base):
                    members.update(vars(base))
            for attribute, value in members.items():
                if attribute.startswith("_"):
                    continue
                if isinstance(value, property) and value.fget is not None:
                    yield f"{module_name}.{name}.{attribute}", value.fget, "property"
                elif isinstance(value, (classmethod, staticmethod)):
                    yield f"{module_name}.{name}.{attribute}", value.__func__, "method"
                elif inspect.isfunction(value):
                    yield f"{module_name}.{name}.{attribute}", value, "method"
        elif inspect.isfunction(obj):
            yield f"{module_name}.{name}", obj, "function"


def _sections(doc: str) -> dict[str, list[str]]:
    """The docstring's sections by title, each its lines (the body under the title)."""
    sections: dict[str, list[str]] = {"": []}
    current = ""
    for line in doc.splitlines():
        match = SECTION.match(line)
        if match:
            current = match.group(1)
            sections[current] = []
        else:
            sections[current].append(line)
    return sections


def _documented_names(lines: list[str]) -> set[str]:
    """The names an ``Args:`` section documents: ``name:`` or ``name (type):`` at the section's first indent."""
    body = textwrap.dedent("\n".join(lines)).splitlines()
    names = set()
    for line in body:
        match = re.match(r"^(\*{0,2}[A-Za-z_][A-Za-z0-9_]*)(\s*\([^)]*\))?:", line)
        if match:
            names.add(match.group(1).lstrip("*"))
    return names


def _parameters(function: Callable[..., Any], kind: str) -> list[str]:
    target = function.__init__ if kind == "class" else function  # type: ignore[misc]
    if kind == "class" and not _is_ours(target):
        return []
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return []
    names = [name for name in signature.parameters if name not in ("self", "cls")]
    return [] if kind == "property" else names


def _raises(function: Callable[..., Any]) -> bool:
    """Whether the function's own body raises an exception by name (a bare ``raise`` re-raises)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return False
    body = tree.body[0]
    return any(isinstance(node, ast.Raise) and node.exc is not None for node in ast.walk(body))


def _returns_value(function: Callable[..., Any]) -> bool:
    annotation = inspect.signature(function).return_annotation
    return annotation not in (inspect.Signature.empty, None, "None") and annotation is not type(None)


def _problems(name: str, function: Callable[..., Any], kind: str) -> list[str]:
    doc = inspect.getdoc(function)
    if not doc:
        return [f"{name}: no docstring"]
    problems = []
    summary = doc.split("\n\n", 1)[0]
    sentences = len(re.findall(r"[.!?](\s|$)", ABBREVIATIONS.sub("", summary)))
    if sentences != 1:
        problems.append(f"{name}: opens with {sentences} sentences, not one: {summary[:80]!r}")
    figure = FIGURE.search(doc)
    if figure:
        problems.append(f"{name}: holds a figure ({figure.group(0)!r}); figures belong on the benchmarks page")
    sections = _sections(doc)
    parameters = _parameters(function, kind)
    if parameters:
        documented = _documented_names(sections.get("Args", []) + sections.get("Arguments", [])
                                       + (sections.get("Attributes", []) if kind == "class" else []))
        missing = [parameter for parameter in parameters if parameter not in documented]
        if missing:
            problems.append(f"{name}: Args does not document {missing}")
    if kind in ("function", "method") and _returns_value(function):
        if inspect.isgeneratorfunction(function):
            if "Yields" not in sections and "Returns" not in sections:
                problems.append(f"{name}: no Yields section")
        elif "Returns" not in sections:
            problems.append(f"{name}: no Returns section")
    if kind == "class":  # what constructing one runs: its own __init__ or a dataclass's __post_init__
        raisers = [vars(function)[name] for name in ("__init__", "__post_init__")
                   if inspect.isfunction(vars(function).get(name)) and _is_ours(vars(function)[name])]
    else:
        raisers = [function]
    if kind != "property" and any(_raises(raiser) for raiser in raisers) and "Raises" not in sections:
        problems.append(f"{name}: raises, and has no Raises section")
    return problems


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_callable_documents_its_parameters_returns_and_raises(module_name: str) -> None:
    problems = [problem for name, function, kind in _callables(module_name)
                for problem in _problems(name, function, kind)]
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)


def test_the_checker_finds_each_kind_of_problem() -> None:
    """The checks above can fail: a docstring missing each part is reported for that part."""

    def bare(x: int, *, y: str) -> int:
        """Two sentences here. The second one."""
        if x:
            raise ValueError(y)
        return x

    def good(x: int, *, y: str) -> int:
        """One sentence.

        Args:
            x: a number.
            y (str): a word.

        Returns:
            x.

        Raises:
            ValueError: when x is not 0.
        """
        if x:
            raise ValueError(y)
        return x

    def timed() -> None:
        """Runs at 40 us a call on the 2-core machine."""

    problems = _problems("bare", bare, "function")
    assert any("2 sentences" in problem for problem in problems)
    assert any("Args does not document ['x', 'y']" in problem for problem in problems)
    assert any("no Returns section" in problem for problem in problems)
    assert any("no Raises section" in problem for problem in problems)
    assert _problems("good", good, "function") == []
    assert any("holds a figure" in problem for problem in _problems("timed", timed, "function"))

    def ratio() -> None:
        """Adds at 0.7x-0.9x of plain's rate on 2 cores, frames of 84x84."""

    def shape() -> None:
        """Frames of 84x84 pixels, stacks of 4."""

    assert any("'0.7x'" in problem for problem in _problems("ratio", ratio, "function"))
    assert _problems("shape", shape, "function") == []
