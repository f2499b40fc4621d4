"""MkDocs hook: links from the manual to the repository's other files (benchmark results, scripts, sources).

A page links a file outside ``docs/`` by its path relative to the page (``../benchmarks/results/REPORT.md``),
so that the link also works where the Markdown is read in the repository itself. MkDocs knows only
``docs/``: this hook adds each linked file to the site under ``repo/`` (and, in turn, what a linked
Markdown file links) and points the link there. A link to a file that does not exist fails the build,
as ``--strict`` fails a broken link inside ``docs/``.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.pages import Page

# An inline link or image, ``[text](target#anchor)``; targets with a scheme or an absolute path are left alone.
LINK = re.compile(r"(?P<head>\]\()(?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?(?P<tail>\))")
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1", re.MULTILINE | re.DOTALL)
PREFIX = "repo"  # where the repository's files appear in the site


def _root(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


def _real_dir(src_uri: str, config: MkDocsConfig) -> Path:
    """The folder a page's relative links start from: in docs/, or where a file added here really is."""
    if src_uri.startswith(PREFIX + "/"):
        return (_root(config) / src_uri[len(PREFIX) + 1 :]).parent
    return (Path(config.docs_dir) / src_uri).parent


def _virtual(target: str, src_uri: str, config: MkDocsConfig) -> str | None:
    """The site path (relative to docs/) of a link's target, or None for a link this hook leaves alone."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("/"):
        return None
    real = Path(posixpath.normpath((_real_dir(src_uri, config) / target).as_posix()))
    docs, root = Path(config.docs_dir).resolve(), _root(config)
    if real.is_relative_to(docs):
        return real.relative_to(docs).as_posix()
    if not real.is_relative_to(root):
        raise PluginError(f"{src_uri} links {target!r}, which is outside the repository")
    if not real.is_file():
        raise PluginError(f"{src_uri} links {target!r}: {real.relative_to(root)} is not a file of the repository")
    return f"{PREFIX}/{real.relative_to(root).as_posix()}"


def _links(markdown: str) -> list[re.Match[str]]:
    """The links of a Markdown text outside fenced code blocks."""
    fenced = [match.span() for match in FENCE.finditer(markdown)]
    return [match for match in LINK.finditer(markdown) if not any(a <= match.start() < b for a, b in fenced)]


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    """Add every repository file that a page links (and that a linked Markdown file links), once."""
    pending = [file for file in files if file.is_documentation_page()]
    while pending:
        file = pending.pop()
        text = file.content_string
        for match in _links(text):
            uri = _virtual(match["target"], file.src_uri, config)
            if uri is None or not uri.startswith(PREFIX + "/") or files.get_file_from_path(uri) is not None:
                continue
            added = File.generated(config, uri, abs_src_path=str(_root(config) / uri[len(PREFIX) + 1 :]),
                                   inclusion=InclusionLevel.NOT_IN_NAV)
            files.append(added)
            if added.is_documentation_page():
                pending.append(added)
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, **_: Any) -> str:
    """Point each link to a repository file at the copy ``on_files`` added."""
    here = posixpath.dirname(page.file.src_uri)
    pieces, end = [], 0
    for match in _links(markdown):
        uri = _virtual(match["target"], page.file.src_uri, config)
        if uri is None:
            continue
        pieces += [markdown[end : match.start("target")], posixpath.relpath(uri, here or ".")]
        end = match.end("target")
    return "".join(pieces) + markdown[end:]
