"""Count the words of the public callables' docstrings, as tests/test_docstrings.py lists the callables.

Prints, per public module that imports here, the callables, the docstring words in all, the words of the
prose alone (outside ``Args:``/``Returns:``/``Raises:``... sections), how many docstrings exceed 150
words, and the problems the docstring check finds. Run from the repository root:

    PYTHONPATH=. python scripts/docstring_words.py [--json] [MODULE ...]
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd() / "tests"))
import test_docstrings as check  # noqa: E402  (the test's own listing of public callables)


def count(module_name: str) -> dict[str, object] | None:
    """The counts for one public module, or None when it does not import here."""
    try:
        importlib.import_module(module_name)
    except ModuleNotFoundError:
        return None
    callables = words = prose = long = problems = 0
    for name, function, kind in check._callables(module_name):
        doc = inspect.getdoc(function) or ""
        callables += 1
        words += len(doc.split())
        prose += sum(len(" ".join(lines).split()) for title, lines in check._sections(doc).items() if title == "")
        long += len(doc.split()) > 150
        problems += len(check._problems(name, function, kind))
    return {"module": module_name, "callables": callables, "words": words, "prose_words": prose,
            "over_150_words": long, "problems": problems}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="example: PYTHONPATH=. python scripts/docstring_words.py --json mmreplay")
    parser.add_argument("modules", nargs="*", default=check.PUBLIC_MODULES)
    parser.add_argument("--json", action="store_true", help="one JSON object per module")
    arguments = parser.parse_args()
    for module_name in arguments.modules:
        counts = count(module_name)
        if counts is None:
            counts = {"module": module_name, "skipped": "does not import here"}
        print(json.dumps(counts) if arguments.json else "  ".join(f"{key}={value}" for key, value in counts.items()))


if __name__ == "__main__":
    main()
