"""``disk.files.remove_tree``: the stores' own directory removal (``shutil.rmtree`` can turn an interrupt into
``OSError: [Errno 9]``, see test_interrupts.py): it removes a whole tree, never follows a link, and is quiet
or loud about what it cannot remove as asked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mmreplay.disk.files import remove_tree


def test_a_nested_tree_is_removed_whole(tmp_path: Path) -> None:
    root = tmp_path / "store.mmr"
    (root / "a" / "b").mkdir(parents=True)
    for name in ("x", "a/y", "a/b/z"):
        (root / name).write_bytes(b"data")
    remove_tree(root)
    assert not root.exists() and list(tmp_path.iterdir()) == []


def test_links_are_removed_and_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_bytes(b"keep")
    root = tmp_path / "store.mmr"
    root.mkdir()
    os.symlink(outside, root / "to_directory")
    os.symlink(outside / "keep", root / "to_file")
    remove_tree(root)
    assert not root.exists()
    assert (outside / "keep").read_bytes() == b"keep"
    link = tmp_path / "link.mmr"
    os.symlink(outside, link)
    remove_tree(link)  # the link itself, not what it points at
    assert not link.is_symlink() and (outside / "keep").exists()


def test_nothing_there_is_quiet_unless_errors_are_asked_for(tmp_path: Path) -> None:
    remove_tree(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        remove_tree(tmp_path / "missing", ignore_errors=False)


def test_what_cannot_be_removed_is_left_or_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store.mmr"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "file").write_bytes(b"data")
    (root / "other").write_bytes(b"data")
    unlink = os.unlink

    def refuse(path: str | Path, *args: object, **kwargs: object) -> None:
        if Path(path).name == "file":
            raise PermissionError(13, "Permission denied", str(path))
        unlink(path)

    monkeypatch.setattr(os, "unlink", refuse)
    remove_tree(root)  # the rest goes
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == ["sub", "sub/file"]
    with pytest.raises(PermissionError):
        remove_tree(root, ignore_errors=False)
