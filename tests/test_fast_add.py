"""``add``'s fast path (``ReplayStore._add_single_frames``: each env continues its episode with one new
frame, given alone or as the newest of a stack) writes exactly what the general path writes: a store fed
with it on and one fed the same adds with it off hold the same files, byte for byte, and both equal the
in-memory reference model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lz4
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from atari_data import load_stream
from reference import ReferenceStore, assert_store_matches
from strategies import FrameSource, draw_add, store_configs

from mmreplay import PrioritizedSampler, ReplayStore, extensions

_lz4batch = extensions.load("_lz4batch")
# Byte-identical segments need the system's liblz4 (the extension's compressor) and python-lz4's
# bundled one to compress alike; the rows and the decoded frames must agree whatever they are.
SAME_COMPRESSOR = _lz4batch is None or _lz4batch.LZ4_VERSION == lz4.library_version_number()


class CountingStore:
    """Two stores fed the same adds, the first with the fast path on and the second with it off."""

    def __init__(self, directory: Path, *, prioritized: bool = False, **config: Any) -> None:
        sampler = (lambda: PrioritizedSampler(alpha=0.6)) if prioritized else (lambda: None)
        self.fast = ReplayStore.create(directory / "fast.mmr", sampler=sampler(), **config)
        self.general = ReplayStore.create(directory / "general.mmr", sampler=sampler(), **config)
        self.general._fast_add = False
        self.fast_adds = 0
        take_fast_path = self.fast._add_single_frames

        def counted(*args: Any) -> bool:
            taken = take_fast_path(*args)
            self.fast_adds += taken
            return taken

        self.fast._add_single_frames = counted  # type: ignore[method-assign]

    def add(self, *args: Any, **kwargs: Any) -> None:
        self.fast.add(*args, **kwargs)
        self.general.add(*args, **kwargs)

    def close_and_compare(self) -> None:
        self.fast.close()
        self.general.close()
        fast_files, general_files = files_of(self.fast.path), files_of(self.general.path)
        assert fast_files.keys() == general_files.keys()
        for name in fast_files:
            if SAME_COMPRESSOR or name == "transitions.tbl":
                assert fast_files[name] == general_files[name], f"{name} differs"


def files_of(path: Path) -> dict[str, bytes]:
    return {str(file.relative_to(path)): file.read_bytes() for file in sorted(path.rglob("*")) if file.is_file()}


def fast_path_form(args: tuple[Any, ...], num_envs: int) -> tuple[Any, ...]:
    """One env's drawn add with a numpy scalar action and a float reward, the form the fast path takes."""
    obs, action, reward, next_obs, terminated, truncated = args
    if num_envs == 1 and np.ndim(action) == 0:
        action = action[()]
    return obs, action, float(reward) if num_envs == 1 else reward, next_obs, terminated, truncated


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=store_configs(), data=st.data())
def test_the_fast_path_writes_what_the_general_path_writes(tmp_path_factory, config, data) -> None:
    pair = CountingStore(tmp_path_factory.mktemp("fast"), **config)
    ref = ReferenceStore(**config)
    frames = FrameSource.of(config)
    try:
        for _ in range(data.draw(st.integers(1, 40), label="adds")):
            args = fast_path_form(draw_add(data, ref, frames).as_tuple(), config["num_envs"])
            pair.add(*args)
            ref.add(*args)
        assert_store_matches(pair.fast, ref)
    finally:
        pair.close_and_compare()


@pytest.mark.parametrize(
    "num_envs,stacked,prioritized",
    [(1, False, False), (8, False, False), (300, False, False), (1, True, False), (8, True, False), (8, False, True)],
)
def test_real_frames_take_the_fast_path_across_segments_eviction_and_episode_ends(
    tmp_path: Path, num_envs: int, stacked: bool, prioritized: bool
) -> None:
    """Pong frames and noise (which does not compress: a 1 MiB segment fills every ~150 frames), evicted
    many times over, with episode ends; given as single frames or as stacks of 4 (an episode's first
    stack repeats its first frame, as gymnasium's FrameStackObservation pads it)."""
    frames = load_stream("pong", ("frames",), 600)["frames"]
    noise = np.random.default_rng(num_envs).integers(0, 256, (400, *frames.shape[1:]), dtype=np.uint8)
    frames = np.concatenate([frames, noise])
    capacity = 40 * num_envs
    pair = CountingStore(tmp_path, frame_shape=frames.shape[1:], capacity=capacity, num_envs=num_envs,
                         prioritized=prioritized)
    rng = np.random.default_rng(0)
    position = rng.integers(0, len(frames) - 1, num_envs)
    episode_start = position.copy()

    def observed(at: np.ndarray) -> np.ndarray:
        if not stacked:
            return frames[at]
        return frames[np.maximum(at[:, None] + np.arange(-3, 1), episode_start[:, None])]

    adds = 1200 if num_envs == 1 else 300
    for _ in range(adds):
        ended = rng.random(num_envs) < 0.05 / num_envs  # an env's new episode takes the general path
        terminated, truncated = ended & (rng.random(num_envs) < 0.5), ended & (rng.random(num_envs) >= 0.5)
        obs, next_obs = observed(position), observed(position + 1)
        if num_envs == 1:
            pair.add(obs[0], np.int64(rng.integers(6)), float(rng.random()), next_obs[0], terminated[0], truncated[0])
        else:
            # gymnasium's next-step autoreset recipe passes env_mask at every step, nearly always all True
            # (which the fast path takes); now and then one env is masked out (which it does not).
            choice = rng.random()
            env_mask = None if choice < 0.3 else np.ones(num_envs, bool)
            if choice > 0.97:
                env_mask[rng.integers(num_envs)] = False
            pair.add(obs, rng.integers(0, 6, num_envs), rng.random(num_envs), next_obs, terminated, truncated,
                     env_mask=env_mask)
        restart = ended | (position + 2 >= len(frames))
        position = np.where(restart, rng.integers(0, len(frames) - 1, num_envs), position + 1)
        episode_start = np.where(restart, position, episode_start)
    # The rest: new episodes, masked envs, commits, and segment ends (with 300 envs, nearly every other add).
    assert pair.fast_adds > adds // 3, pair.fast_adds
    pair.close_and_compare()
    header = json.loads((pair.fast.path / "header.json").read_text())
    assert header["commit"]["bytes_written"] > 3 * header["layout"]["segment_bytes"]  # crossed segment ends
