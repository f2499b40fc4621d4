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
    # the refused add's frame was not written (the add before's may still be left behind, to be written)
    role = store._role  # type: ignore[attr-defined]
    assert role._frames.frames_written + (role._continuing.behind is not None) == added + 1
    full["on"] = False
    for t in range(added, added + 10):
        store.add(frames[t], t % 4, float(t), frames[t + 1], False, False)
    store.flush()
    batch = store.read(np.arange(len(store)))
    np.testing.assert_array_equal(batch.obs[:, -1], frames[: len(store)])  # stacks of one frame
    np.testing.assert_array_equal(batch.next_obs[:, -1], frames[1 : len(store) + 1])
    np.testing.assert_array_equal(batch.action, np.arange(len(store)) % 4)
    store.close()


def _helped_store(path: Path, **config: object) -> ReplayStore:
    """A one-env reference store whose every new frame goes to a helper, as from 2 usable cores (so the
    add leaves it behind, ``ContinuingFrames.settle``) on any machine."""
    store = ReplayStore.create(path, frame_shape=(16, 16), stack_size=4, frame_encoding="lz4-reference", **config)
    store._role._continuing.ahead_threads = 2  # type: ignore[attr-defined]
    return store


_OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(["continue", "continue", "continue", "terminate", "cut"])),
        st.tuples(st.sampled_from(["read", "sample", "flush", "episodes"]), st.just("")),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(operations=_OPERATIONS, seed=st.integers(0, 2**16))
def test_frames_left_behind_read_back_though_the_caller_reuses_its_buffers(
    tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[str, str]], seed: int
) -> None:
    """Model test of write-behind: a one-env store whose adds leave their new frame for the next call, fed
    by a caller that overwrites its obs and next_obs buffers in place after each add (a vector env's
    reused arrays), with reads, samples, flushes and episode lists in between, gives back what the model
    holds at each read, and after reopening."""
    from reference import ReferenceStore, assert_batch_matches

    path = tmp_path_factory.mktemp("behind") / "s.mmr"
    rng = np.random.default_rng(seed)
    store = _helped_store(path, capacity=40)
    ref = ReferenceStore(frame_shape=(16, 16), capacity=40, stack_size=4)
    obs, next_obs = np.empty((4, 16, 16), np.uint8), np.empty((4, 16, 16), np.uint8)
    obs[:] = rng.integers(0, 4, (16, 16), dtype=np.uint8)  # an episode's first stack: one frame repeated
    adds = 0
    for t, (operation, how) in enumerate(operations):
        if operation == "add":
            next_obs[:-1] = obs[1:]
            next_obs[-1] = rng.integers(0, 4, (16, 16), dtype=np.uint8)
            arguments = (obs, t % 5, float(t), next_obs, how == "terminate", how == "cut")
            ref.add(*(a.copy() if isinstance(a, np.ndarray) else a for a in arguments))
            store.add(*arguments)
            adds += 1
            # the caller's buffers, rewritten in place: the next obs, or a new episode's first stack
            obs[:] = next_obs if how == "continue" else rng.integers(0, 4, (16, 16), dtype=np.uint8)
            next_obs[:] = 255
        elif adds and operation == "read":
            stored = ref.stored_steps()
            assert_batch_matches(store.read(stored), ref, stored)
        elif adds and operation == "sample":
            assert_batch_matches(store.sample(8, rng=t), ref)
        elif operation == "flush":
            store.flush()
        elif operation == "episodes":
            assert sum(e.length for e in store.episodes()) == len(ref)
    store.close()
    with ReplayStore.open(path, "r") as reopened:
        assert reopened.transitions_added == adds
        if adds:
            stored = ref.stored_steps()
            assert_batch_matches(reopened.read(stored), ref, stored)


def test_a_helped_add_leaves_its_frame_behind_and_the_next_read_writes_it(tmp_path: Path) -> None:
    """The second add of an episode (the first its one-env form takes) leaves its frame behind, counted;
    a read writes it first and gives it back; so do a flush and the next add."""
    frames = np.random.default_rng(1).integers(0, 8, (8, 16, 16), dtype=np.uint8)
    store = _helped_store(tmp_path / "s.mmr", capacity=100)
    store.add(frames[0], 0, 0.0, frames[1], False, False)  # the episode's first add: the general path
    store.add(frames[1], 1, 1.0, frames[2], False, False)
    assert store._role._continuing.behind is not None and len(store) == 2  # type: ignore[attr-defined]
    written = store._role._frames.frames_written  # type: ignore[attr-defined]
    np.testing.assert_array_equal(store.read([1]).next_obs[0, -1], frames[2])
    assert store._role._continuing.behind is None  # type: ignore[attr-defined]
    assert store._role._frames.frames_written == written + 1  # type: ignore[attr-defined]
    store.add(frames[2], 2, 2.0, frames[3], False, False)
    assert store._role._continuing.behind is not None  # type: ignore[attr-defined]
    store.flush()
    assert store._role._continuing.behind is None  # type: ignore[attr-defined]
    store.add(frames[3], 3, 3.0, frames[4], False, False)
    store.add(frames[4], 4, 4.0, frames[5], False, False)  # writes the frame its predecessor left
    store.close()
    with ReplayStore.open(tmp_path / "s.mmr", "r") as reopened:
        batch = reopened.read(np.arange(5))
        np.testing.assert_array_equal(batch.next_obs[:, -1], frames[1:6])
        np.testing.assert_array_equal(batch.obs[:, -1], frames[0:5])


def test_a_left_behind_frame_whose_write_fails_fails_the_next_call_and_is_written_by_a_later_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame left behind whose write fails (a full disk) fails the call that writes it (the next add,
    read or flush), which writes nothing of its own; the add that left it stays counted, the frame stays
    behind, and once the write can go on the next call writes it (encoded again) and every transition
    reads back. The disk is made full by handing the frame writes /dev/full's descriptor (ENOSPC on every
    write), so the compiled calls fail where they really write."""
    import errno
    import os

    frames = np.random.default_rng(2).integers(0, 8, (12, 16, 16), dtype=np.uint8)
    store = _helped_store(tmp_path / "s.mmr", capacity=100)
    ring = store._role._frames  # type: ignore[attr-defined]
    real = ring._descriptor_of
    full = {"on": False}
    device = os.open("/dev/full", os.O_WRONLY)

    def descriptor_of(segment: int) -> int:
        return device if full["on"] else real(segment)

    monkeypatch.setattr(ring, "_descriptor_of", descriptor_of)
    for t in range(4):
        store.add(frames[t], t, float(t), frames[t + 1], False, False)
    assert store._role._continuing.behind is not None  # type: ignore[attr-defined]
    full["on"] = True
    for call in (lambda: store.add(frames[4], 4, 4.0, frames[5], False, False), lambda: store.read([0]), store.flush):
        with pytest.raises(OSError) as failed:
            call()
        assert failed.value.errno == errno.ENOSPC
        assert len(store) == 4 and store._role._continuing.behind is not None  # type: ignore[attr-defined]
    full["on"] = False
    os.close(device)
    for t in range(4, 11):
        store.add(frames[t], t, float(t), frames[t + 1], False, False)
    store.close()
    with ReplayStore.open(tmp_path / "s.mmr", "r") as reopened:
        batch = reopened.read(np.arange(11))
        np.testing.assert_array_equal(batch.next_obs[:, -1], frames[1:12])
        np.testing.assert_array_equal(batch.action, np.arange(11))


def test_samples_in_another_thread_see_every_counted_adds_frames(tmp_path: Path) -> None:
    """A thread sampling while another adds (each add leaving its frame behind) gets, in every batch, the
    frames of the steps it drew: a read writes the frame left behind in the same hold of the store's lock as
    it reads, so no add comes between."""
    import threading
    import time

    frames = np.random.default_rng(3).integers(0, 8, (1500, 16, 16), dtype=np.uint8)
    store = _helped_store(tmp_path / "s.mmr", capacity=2_000)
    store.add(frames[0], 0, 0.0, frames[1], False, False)
    failures: list[str] = []
    done = threading.Event()
    sampled = [0]

    def sample() -> None:
        rng, deadline, batches = np.random.default_rng(0), time.monotonic() + 60, 0
        while not done.is_set() and time.monotonic() < deadline and batches < 5_000:
            try:
                batch = store.sample(8, rng=rng)
            except Exception as error:  # a frame read before it was written: its CRC
                failures.append(repr(error))
                return
            steps = np.asarray(batch.index)
            if not (np.array_equal(batch.next_obs[:, -1], frames[steps + 1]) and np.array_equal(batch.obs[:, -1], frames[steps])):
                failures.append(f"steps {steps.tolist()}")
            batches += 1
            sampled[0] = batches
        if batches < 50:
            failures.append(f"only {batches} batches sampled")

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for t in range(1, len(frames) - 1):
            store.add(frames[t], t % 3, float(t), frames[t + 1], False, False)
            if t % 20 == 0:  # let the sampler in between adds (at most 1 s for each batch)
                seen, wait_until = sampled[0], time.monotonic() + 1
                while sampled[0] == seen and time.monotonic() < wait_until and not failures:
                    time.sleep(0.0002)
    finally:
        done.set()
        sampler.join(90)
    assert not sampler.is_alive() and not failures, failures[:3]
    store.close()


def test_the_one_compiled_call_checks_every_argument_before_writing_the_frame_left_behind(tmp_path: Path) -> None:
    """``continue_one_env`` refuses arguments out of range (a frame of another size than the one left behind
    or the groups', a previous step that is not before the row's) with a ValueError before anything is
    written: the frame left behind is still behind and unwritten, and the adds that follow read back."""
    frames = np.random.default_rng(4).integers(0, 8, (10, 16, 16), dtype=np.uint8)
    store = _helped_store(tmp_path / "s.mmr", capacity=100)
    for t in range(3):
        store.add(frames[t], t, float(t), frames[t + 1], False, False)
    role = store._role  # type: ignore[attr-defined]
    continuing, written = role._continuing, role._frames.frames_written
    assert continuing.behind is not None
    step, previous = len(store), len(store) - 1
    action = np.zeros((), role._add_shapes.action_dtype).tobytes()  # the row's action bytes, as they should be
    for frame, previous_step in ((frames[4].tobytes()[:-1], previous), (frames[4].tobytes(), step)):
        with role._lock, pytest.raises(ValueError, match="continue_one_env"):
            continuing._continue_compiled(frame, 1, step, 0.0, 0, action, previous_step)
        assert continuing.behind is not None and role._frames.frames_written == written
    store.flush()  # nothing left behind: the frame's size is checked against the groups' own
    assert continuing.behind is None
    with role._lock, pytest.raises(ValueError, match="continue_one_env"):
        continuing._continue_compiled(frames[4].tobytes()[:-1], 1, step, 0.0, 0, action, previous)
    assert continuing.behind is None and role._frames.frames_written == written + 1
    for t in range(3, 9):
        store.add(frames[t], t, float(t), frames[t + 1], False, False)
    np.testing.assert_array_equal(store.read(np.arange(9)).next_obs[:, -1], frames[1:10])
    store.close()
