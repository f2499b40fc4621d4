"""One env's add at nearly every step takes the fast path's shortest form (``Writer._add_one_env``): its
obs is compared with the env's episode and its next_obs in place by ``continuing_frame``, which must say
exactly what the longer form's parse and continuation check say (``_new_frames`` and ``continuations``):
the new frame where the obs continues the episode and a stacked next_obs is the obs shifted by one frame,
else None, so that the general path decides (and names what is wrong). test_fast_add checks that stores
written through it hold the general path's bytes.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from atari_data import load_stream

from mmreplay import ReplayStore, extensions

_lz4batch = extensions.load("_lz4batch")
pytestmark = pytest.mark.skipif(_lz4batch is None, reason="needs mmreplay._lz4batch")


def model(obs: np.ndarray, next_obs: np.ndarray, frames: list[bytes], stacked: bool) -> bytes | None:
    """What the longer form decides: the obs's bytes equal the episode's frames joined (stacked) or its
    newest frame, and a stacked next_obs without its newest frame equals the obs without its oldest."""
    if obs.shape != next_obs.shape or not frames:
        return None
    obs_bytes, next_bytes = obs.tobytes(), next_obs.tobytes()
    if not stacked:
        return next_bytes if obs_bytes == frames[-1] else None
    frame = len(obs_bytes) // len(frames)
    if obs_bytes != b"".join(frames) or next_bytes[: len(next_bytes) - frame] != obs_bytes[frame:]:
        return None
    return next_bytes[len(next_bytes) - frame :]


def test_a_continuing_stack_gives_its_new_frame() -> None:
    frames = load_stream("pong", ("frames",), 8)["frames"]
    episode = deque((frames[i].tobytes() for i in range(4)), maxlen=4)
    obs, next_obs = frames[0:4], frames[1:5]
    assert _lz4batch.continuing_frame(obs, next_obs, episode, True) == frames[4].tobytes()
    assert _lz4batch.continuing_frame(frames[3], frames[4], episode, False) == frames[4].tobytes()


@pytest.mark.parametrize("position", [0, 1, 2, 3])
def test_an_obs_that_differs_from_the_episode_in_any_frame_is_not_continuing(position: int) -> None:
    frames = load_stream("pong", ("frames",), 8)["frames"]
    episode = deque((frames[i].tobytes() for i in range(4)), maxlen=4)
    obs, next_obs = frames[0:4].copy(), frames[1:5].copy()
    obs[position, -1, -1] ^= 1  # one pixel, the frame's last byte
    if position > 0:
        next_obs[position - 1, -1, -1] ^= 1  # next_obs still obs shifted: only the episode differs
    assert _lz4batch.continuing_frame(obs, next_obs, episode, True) is None


@pytest.mark.parametrize("position", [0, 1, 2])
def test_a_next_obs_that_is_not_the_obs_shifted_is_not_continuing(position: int) -> None:
    frames = load_stream("pong", ("frames",), 8)["frames"]
    episode = deque((frames[i].tobytes() for i in range(4)), maxlen=4)
    next_obs = frames[1:5].copy()
    next_obs[position, 0, 0] ^= 1  # the first byte of a frame the obs already holds
    assert _lz4batch.continuing_frame(frames[0:4], next_obs, episode, True) is None


def test_buffers_that_are_not_c_contiguous_or_of_other_lengths_are_left_to_the_longer_form() -> None:
    frames = load_stream("pong", ("frames",), 8)["frames"]
    episode = deque((frames[i].tobytes() for i in range(4)), maxlen=4)
    strided = np.stack([frames[0:4], frames[0:4]], axis=-1)[..., 0]
    assert not strided.flags.c_contiguous
    assert _lz4batch.continuing_frame(strided, frames[1:5], episode, True) is None
    assert _lz4batch.continuing_frame(frames[0:4], frames[1:5][:, ::-1], episode, True) is None
    assert _lz4batch.continuing_frame(frames[0:4], frames[1:4], episode, True) is None  # next_obs shorter
    assert _lz4batch.continuing_frame(frames[0:3], frames[1:4], episode, True) is None  # shorter than the episode
    assert _lz4batch.continuing_frame(frames[0:4], frames[1:5], deque(), True) is None  # no frames yet
    assert _lz4batch.continuing_frame(frames[0], frames[1], deque(), False) is None


def test_an_episode_that_holds_no_bytes_or_the_wrong_arguments_are_refused() -> None:
    frames = load_stream("pong", ("frames",), 8)["frames"]
    assert _lz4batch.continuing_frame(frames[0:4], frames[1:5], [1, 2, 3, 4], True) is None
    with pytest.raises(TypeError, match="4 arguments"):
        _lz4batch.continuing_frame(frames[0:4], frames[1:5], [])
    with pytest.raises(TypeError):
        _lz4batch.continuing_frame(frames[0:4], frames[1:5], 7, True)  # not iterable


@settings(max_examples=300, deadline=None)
@given(
    stack_size=st.integers(1, 4), frame_bytes=st.integers(1, 12), stacked=st.booleans(),
    seed=st.integers(0, 2**32 - 1), obs_flip=st.integers(-1, 40), next_flip=st.integers(-1, 40),
    episode_len=st.integers(0, 5),
)
def test_continuing_frame_equals_the_model(
    stack_size: int, frame_bytes: int, stacked: bool, seed: int, obs_flip: int, next_flip: int, episode_len: int
) -> None:
    """Any small frames, stacked or not, with one byte of obs or next_obs changed (or none), and an
    episode of any length: the in-place check gives what the model gives."""
    rng = np.random.default_rng(seed)
    shape = (stack_size, frame_bytes) if stacked else (frame_bytes,)
    pixels = rng.integers(0, 3, (stack_size + 1, frame_bytes), dtype=np.uint8)  # few values: equal bytes often
    obs = np.ascontiguousarray(pixels[:stack_size] if stacked else pixels[stack_size - 1]).reshape(shape)
    next_obs = np.ascontiguousarray(pixels[1:] if stacked else pixels[stack_size]).reshape(shape)
    if 0 <= obs_flip < obs.size:
        obs.reshape(-1)[obs_flip] ^= 1
    if 0 <= next_flip < next_obs.size:
        next_obs.reshape(-1)[next_flip] ^= 1
    episode = deque((pixels[i].tobytes() for i in range(stack_size)), maxlen=stack_size)
    while len(episode) > episode_len:
        episode.popleft()
    assert _lz4batch.continuing_frame(obs, next_obs, episode, stacked) == model(obs, next_obs, list(episode), stacked)


def test_one_envs_adds_take_the_one_env_form_and_read_back(tmp_path: Path) -> None:
    """A one-env store fed real Pong stacks with Python scalars: every add but an episode's first takes the
    one-env form, and sampling rebuilds what was added."""
    frames = load_stream("pong", ("frames",), 120)["frames"]
    store = ReplayStore.create(tmp_path / "s.mmr", frame_shape=frames.shape[1:], capacity=1_000)
    taken = 0
    add_one_env = store._role._add_one_env

    def counted(*args: object) -> bool:
        nonlocal taken
        result = add_one_env(*args)
        taken += result
        return result

    store._role._add_one_env = counted  # type: ignore[method-assign]
    stacks = np.stack([frames[np.maximum(np.arange(t - 3, t + 1), 0)] for t in range(len(frames))])
    for t in range(len(frames) - 1):
        store.add(stacks[t], t % 6, float(t), stacks[t + 1], False, t == len(frames) - 2)
    assert taken == len(frames) - 2  # the first add starts the episode: the general path
    batch = store.sample(64, rng=np.random.default_rng(0))
    steps = batch.reward.astype(np.int64)
    np.testing.assert_array_equal(batch.obs, stacks[steps])
    np.testing.assert_array_equal(batch.next_obs, stacks[steps + 1])
    np.testing.assert_array_equal(batch.action, steps % 6)
    store.close()


def test_a_one_env_add_whose_row_cannot_be_reserved_raises_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one-env form reserves its rows' blocks as the general path does (a store into the map of a full
    disk would be a SIGBUS): once the rows run past what is reserved, a refused reservation raises the
    OSError before anything of the add is written (its frame neither), and the same add goes in once
    there is space, every transition read back exact."""
    import errno
    import os

    import mmreplay.disk.files as files

    frames = np.random.default_rng(0).integers(0, 255, (6000, 16, 16), dtype=np.uint8)
    store = ReplayStore.create(tmp_path / "s", capacity=20_000, frame_shape=(16, 16), stack_size=1)
    real = files.os.posix_fallocate
    full = {"on": True}

    def fallocate(descriptor: int, offset: int, length: int) -> None:
        if full["on"] and os.readlink(f"/proc/self/fd/{descriptor}").endswith("transitions.tbl") and offset > 0:
            raise OSError(errno.ENOSPC, "No space left on device (test)")
        real(descriptor, offset, length)

    store.add(frames[0], 0, 0.0, frames[1], False, False)  # the episode's first add: the general path
    monkeypatch.setattr(files.os, "posix_fallocate", fallocate)
    added = 1
    with pytest.raises(OSError) as refused:
        for t in range(1, len(frames) - 1):
            store.add(frames[t], t % 4, float(t), frames[t + 1], False, False)
            added += 1
    assert refused.value.errno == errno.ENOSPC
    assert 1 < added < len(frames) - 2  # refused where the rows ran past the first reservation
    assert len(store) == added
    assert store._role._frames.frames_written == added + 1  # the refused add's frame was not written
    full["on"] = False
    for t in range(added, added + 10):
        store.add(frames[t], t % 4, float(t), frames[t + 1], False, False)
    store.flush()
    batch = store.read(np.arange(len(store)))
    np.testing.assert_array_equal(batch.obs[:, -1], frames[: len(store)])  # stacks of one frame
    np.testing.assert_array_equal(batch.next_obs[:, -1], frames[1 : len(store) + 1])
    np.testing.assert_array_equal(batch.action, np.arange(len(store)) % 4)
    store.close()
