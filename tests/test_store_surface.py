"""One name per thing on the store's surface: ``bytes_on_disk`` reads like its neighbours (a property)
while a call still answers, with a ``DeprecationWarning``; the sampler contract is what ``create`` takes
(the two built-in samplers), so ``mmreplay.Sampler`` is no public name (a deprecated alias remains)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from strategies import frame

import mmreplay
from mmreplay import PrioritizedSampler, ReplayStore, UniformSampler


@pytest.fixture
def store(tmp_path: Path) -> ReplayStore:
    opened = ReplayStore.create(tmp_path / "s.mmr", frame_shape=(8, 8), capacity=16)
    for t in range(5):
        opened.add(frame(t, (8, 8)), 0, 1.0, frame(t + 1, (8, 8)), t == 4, False)
    opened.flush()
    yield opened
    opened.close()


def test_bytes_on_disk_is_a_property_that_formats_like_capacity(store: ReplayStore) -> None:
    size = store.bytes_on_disk
    assert isinstance(size, int) and size > 0
    assert f"{size:,}" == f"{int(size):,}" and f"{store.capacity:,}" == "16"
    assert json.dumps({"bytes": size}) == json.dumps({"bytes": int(size)})
    assert size + 1 == int(size) + 1 and type(size + 1) is int
    assert isinstance(type(store).__dict__["bytes_on_disk"], property)


def test_calling_bytes_on_disk_still_answers_with_a_deprecation_warning(store: ReplayStore) -> None:
    with pytest.deprecated_call(match=r"^ReplayStore.bytes_on_disk is a property now, as capacity and frame_shape "
                                      r"are: write store.bytes_on_disk, without the call$"):
        called = store.bytes_on_disk()
    assert called == store.bytes_on_disk and type(called) is int


def test_bytes_on_disk_grows_with_what_is_stored(store: ReplayStore) -> None:
    before = int(store.bytes_on_disk)
    rng = np.random.default_rng(0)
    for _ in range(8):
        store.add(rng.integers(0, 255, (8, 8), np.uint8), 0, 0.0, rng.integers(0, 255, (8, 8), np.uint8), True, False)
    store.flush()
    assert store.bytes_on_disk >= before


def test_sampler_is_not_a_public_name_but_the_old_one_still_imports_with_a_warning() -> None:
    assert "Sampler" not in mmreplay.__all__
    with pytest.deprecated_call(match=r"^mmreplay.Sampler is not public: ReplayStore.create takes "
                                      r"mmreplay.UniformSampler\(\) or mmreplay.PrioritizedSampler\(alpha=...\)"):
        protocol = mmreplay.Sampler
    from mmreplay.sampling.samplers import Sampler

    assert protocol is Sampler
    with pytest.raises(AttributeError, match="has no attribute 'Sampling'"):
        mmreplay.Sampling  # noqa: B018 - another missing name is still an AttributeError


class OwnSampler:
    """Every method of the sampler protocol, as a user would write it from the protocol alone."""

    def config(self) -> dict[str, object]:
        return {"kind": "mine"}

    def open(self, directory: object, *, slots: int, stored: range, writable: bool, state: dict[str, object]) -> None:
        pass

    def added(self, steps: range) -> None:
        pass

    def evicted(self, steps: range) -> None:
        pass

    def sample(self, batch_size: int, *, stored: range, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(stored.start, stored.stop, batch_size)

    def weights(self, steps: np.ndarray, *, beta: float) -> np.ndarray:
        return np.ones(len(steps), np.float32)

    def update_priorities(self, steps: np.ndarray, priorities: np.ndarray) -> None:
        pass

    def state(self) -> dict[str, object]:
        return {}

    def sync(self) -> None:
        pass

    def settle(self, committed: bool) -> None:
        pass

    def close(self) -> None:
        pass


def test_create_takes_the_two_built_in_samplers_and_refuses_a_user_written_one_before_writing(tmp_path: Path) -> None:
    for sampler in (UniformSampler(), PrioritizedSampler(alpha=0.5)):
        with ReplayStore.create(tmp_path / f"{type(sampler).__name__}.mmr", frame_shape=(8, 8), capacity=4,
                                sampler=sampler) as made:
            assert made.sampler is sampler
    with pytest.raises(TypeError, match=r"^sampler must be None, mmreplay.UniformSampler\(\) or "
                                        r"mmreplay.PrioritizedSampler\(alpha=...\); got <.*OwnSampler object"):
        ReplayStore.create(tmp_path / "own.mmr", frame_shape=(8, 8), capacity=4, sampler=OwnSampler())
    assert not (tmp_path / "own.mmr").exists()
