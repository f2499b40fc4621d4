"""Fixtures shared by the store's tests: store paths, a store factory that closes what it opened."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parent))  # reference.py, strategies.py

from reference import ReferenceStore, assert_store_matches
from strategies import frame

from mmreplay import ReplayStore

# Stores live on disk, so no example may be held to hypothesis's default 200 ms deadline.
settings.register_profile("mmreplay", deadline=None, max_examples=60)
settings.load_profile("mmreplay")

@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A path where no store exists yet (its parent does)."""
    return tmp_path / "store.mmr"


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    """For the CLI tests: two episodes of env 0 (terminated after 3, in progress after 2) in a store of 40x40 frames."""
    path = tmp_path / "s.mmr"
    with ReplayStore.create(path, frame_shape=(40, 40), capacity=32) as store:
        for n in (1, 2, 3):
            store.add(frame(n * 10, (40, 40)), n, 1.0, frame(n * 10 + 10, (40, 40)), n == 3, False)
        for n in (7, 8):
            store.add(frame(n * 10, (40, 40)), n, 0.5, frame(n * 10 + 10, (40, 40)), False, False)
    return path


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``make_store(**create_kwargs)`` creates a store in a fresh directory; all are closed at teardown."""
    opened: list[Any] = []
    count = 0

    def make(**kwargs: Any) -> Any:
        nonlocal count
        count += 1
        kwargs.setdefault("frame_shape", (3, 4))
        kwargs.setdefault("capacity", 16)
        store = ReplayStore.create(tmp_path / f"store{count}.mmr", **kwargs)
        opened.append(store)
        return store

    yield make
    for store in opened:
        if not store.closed:
            store.close()


class StoreAndReference:
    """A store and the reference model with the same configuration, fed the same adds."""

    def __init__(self, store: Any, ref: ReferenceStore) -> None:
        self.store = store
        self.ref = ref

    def add(self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any = False,
            truncated: Any = False) -> list[int]:
        self.store.add(obs, action, reward, next_obs, terminated, truncated)
        return self.ref.add(obs, action, reward, next_obs, terminated, truncated)

    def check(self) -> None:
        """Every stored transition equals the reference's, and so do the counts."""
        assert_store_matches(self.store, self.ref)

    def reopen(self, mode: str = "r+") -> None:
        path = self.store.path
        self.store.close()
        self.store = ReplayStore.open(path, mode=mode)


@pytest.fixture
def make_pair(make_store: Callable[..., Any]) -> Iterator[Callable[..., StoreAndReference]]:
    """``make_pair(**create_kwargs)``: a new store and a reference model configured alike."""
    pairs: list[StoreAndReference] = []

    def make(**kwargs: Any) -> StoreAndReference:
        kwargs.setdefault("frame_shape", (3, 4))
        kwargs.setdefault("capacity", 16)
        pair = StoreAndReference(make_store(**kwargs), ReferenceStore(**kwargs))
        pairs.append(pair)
        return pair

    yield make
    for pair in pairs:
        if not pair.store.closed:
            pair.store.close()
