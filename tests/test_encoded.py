"""Encoded frames in and out of a store: ``encode_frames`` + ``add_encoded`` write what ``add`` writes,
and ``sample_encoded(...).decode()`` is what ``sample`` returns for the same draw."""

from __future__ import annotations

import filecmp
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmreplay import (
    CorruptStoreError,
    EncodedBatch,
    EncodedSequenceBatch,
    PrioritizedSampler,
    ReplayStore,
    UniformSampler,
    BlockRefs,
    decode_batch,
    decode_blocks,
    decode_sequences,
    encode_frames,
)

FRAME = (3, 4)


def same_files(left: Path, right: Path) -> bool:
    """Whether two store directories hold the same files with the same bytes (the lock file aside)."""
    comparison = filecmp.dircmp(left, right)
    names = set(comparison.left_list) | set(comparison.right_list)
    for root, _, files in os.walk(left):
        for name in files:
            mine = Path(root) / name
            theirs = right / mine.relative_to(left)
            if name.endswith(".lock"):
                continue
            if not theirs.exists() or mine.read_bytes() != theirs.read_bytes():
                return False
    return bool(names)


@st.composite
def chunks(draw: st.DrawFn) -> dict[str, object]:
    """A store's shape and a list of chunks: (env, stacked, steps), each step (obs, next_obs, action,
    reward, terminated, truncated) as pixels, episodes continuing across an env's chunks."""
    stack_size = draw(st.integers(1, 4))
    num_envs = draw(st.integers(1, 3))
    palette = draw(st.integers(2, 6))  # few distinct pixel values: repeated frames, as in Atari stacks
    stacked = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    stacks: dict[int, np.ndarray | None] = {env: None for env in range(num_envs)}
    ended_with: dict[int, np.ndarray | None] = {env: None for env in range(num_envs)}  # an ended episode's next_obs
    result = []
    for _ in range(draw(st.integers(1, 8))):
        env = draw(st.integers(0, num_envs - 1))
        steps = []
        for _ in range(draw(st.integers(1, 6))):
            current = stacks[env]
            if current is None and ended_with[env] is not None and draw(st.integers(0, 3)) == 0:
                current = ended_with[env]  # a reset obs equal to the final one: a new episode all the same
            elif current is None or draw(st.integers(0, 9)) == 0:  # an episode start (or a cut)
                current = rng.integers(0, palette, (stack_size, *FRAME), dtype=np.uint8)
                if draw(st.booleans()):
                    current[:] = current[-1]  # a reset stack: one frame repeated
            new = rng.integers(0, palette, (1, *FRAME), dtype=np.uint8)
            following = np.concatenate([current[1:], new])
            terminated, truncated = draw(st.sampled_from([(False, False)] * 6 + [(True, False), (False, True)]))
            if (terminated or truncated) and stacked and draw(st.booleans()):
                following = rng.integers(0, palette, (stack_size, *FRAME), dtype=np.uint8)  # a final obs as given
            reward = draw(st.sampled_from([0.0, 1.0, -1.0]))
            steps.append((current, following, draw(st.integers(0, 5)), reward, terminated, truncated))
            stacks[env] = None if terminated or truncated else following
            ended_with[env] = following if terminated or truncated else None
        result.append((env, steps))
    return {"stack_size": stack_size, "num_envs": num_envs, "stacked": stacked, "chunks": result,
            "capacity": draw(st.integers(max(num_envs, 3), 40)),
            "commit_every": draw(st.one_of(st.none(), st.integers(1, 7))),
            # whether a chunk sends a repeated frame once (indices equal where pixels are) or again
            "dedup": draw(st.booleans())}


def fill_both(tmp: Path, case: dict[str, object], sampler: object = None) -> tuple[ReplayStore, ReplayStore]:
    """Store "added" through ``add`` step by step, store "encoded" through ``add_encoded`` chunk by chunk."""
    num_envs, stack_size, stacked = case["num_envs"], case["stack_size"], case["stacked"]
    options = dict(frame_shape=FRAME, capacity=case["capacity"], stack_size=stack_size, num_envs=num_envs,
                   commit_interval_s=None, commit_every=case.get("commit_every"))
    added = ReplayStore.create(tmp / "added", sampler=sampler() if sampler else None, **options)
    encoded = ReplayStore.create(tmp / "encoded", sampler=sampler() if sampler else None, **options)
    for env, steps in case["chunks"]:
        mask = np.arange(num_envs) == env
        pixels: list[bytes] = []
        index: dict[bytes, int] = {}

        def indices(stack: np.ndarray) -> list[int]:
            found = []
            for frame in (stack if stacked else stack[-1:]):
                key = frame.tobytes()
                if key not in index or not case.get("dedup", True):
                    index[key] = len(pixels)
                    pixels.append(key)
                found.append(index[key])
            return found if stacked else found[:1]

        obs, next_obs = [], []
        for current, following, action, reward, terminated, truncated in steps:
            obs.append(indices(current))
            next_obs.append(indices(following))
            shape = (stack_size, *FRAME) if stacked else FRAME
            o = np.zeros((num_envs, *shape), np.uint8)
            n = np.zeros((num_envs, *shape), np.uint8)
            o[env] = current if stacked else current[-1]
            n[env] = following if stacked else following[-1]
            flag = lambda value: np.where(mask, value, False)  # noqa: E731
            squeeze = (lambda a: a[0]) if num_envs == 1 else (lambda a: a)  # noqa: E731
            added.add(squeeze(o), squeeze(np.full(num_envs, action)), squeeze(np.full(num_envs, reward, np.float32)),
                      squeeze(n), squeeze(flag(terminated)), squeeze(flag(truncated)),
                      env_mask=None if num_envs == 1 else mask)
        frames = encode_frames(np.frombuffer(b"".join(pixels), np.uint8).reshape(-1, *FRAME))
        columns = list(zip(*[step[2:] for step in steps]))
        shape_of = (lambda rows: np.array(rows)) if stacked else (lambda rows: np.array(rows)[:, 0])  # noqa: E731
        encoded.add_encoded(frames, shape_of(obs), np.array(columns[0]), np.array(columns[1], np.float32),
                            shape_of(next_obs), np.array(columns[2]), np.array(columns[3]), env_index=env)
        # The same commits at the same steps: what a crash would leave is the same too.
        assert (tmp / "added" / "header.json").read_bytes() == (tmp / "encoded" / "header.json").read_bytes()
    return added, encoded


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=chunks())
def test_add_encoded_writes_the_same_files_as_add(tmp_path_factory: pytest.TempPathFactory, case: dict) -> None:
    tmp = tmp_path_factory.mktemp("case")
    added, encoded = fill_both(tmp, case)
    assert len(added) == len(encoded)
    added.close()
    encoded.close()
    assert same_files(tmp / "added", tmp / "encoded")


def test_add_encoded_past_the_row_slack_and_frame_table_growth_writes_the_same_files_as_add(tmp_path: Path) -> None:
    # 3,000 steps into capacity 60: the adds run out of row slack (1,024 slots past capacity) and frame
    # slots, so runs of steps written at once must stop where a step-by-step add commits first.
    rng = np.random.default_rng(5)
    steps = []
    current = rng.integers(0, 4, (4, *FRAME), dtype=np.uint8)
    for t in range(3000):
        following = np.concatenate([current[1:], rng.integers(0, 4, (1, *FRAME), dtype=np.uint8)])
        ended = t % 97 == 96
        steps.append((current, following, t % 4, float(t % 3), ended, False))
        current = rng.integers(0, 4, (4, *FRAME), dtype=np.uint8) if ended else following
    chunks = [(0, steps[first : first + 32]) for first in range(0, len(steps), 32)]
    for commit_every in (None, 50):
        tmp = tmp_path / str(commit_every)
        case = {"stack_size": 4, "num_envs": 1, "stacked": True, "chunks": chunks, "capacity": 60,
                "commit_every": commit_every}
        added, encoded = fill_both(tmp, case)
        assert len(added) == len(encoded) == 60
        added.close()
        encoded.close()
        assert same_files(tmp / "added", tmp / "encoded")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=chunks(), n_step=st.integers(1, 3), seed=st.integers(0, 2**16), prioritized=st.booleans())
def test_sample_encoded_decodes_to_what_sample_returns(
    tmp_path_factory: pytest.TempPathFactory, case: dict, n_step: int, seed: int, prioritized: bool
) -> None:
    tmp = tmp_path_factory.mktemp("case")
    sampler = (lambda: PrioritizedSampler(alpha=0.6)) if prioritized else UniformSampler
    _, store = fill_both(tmp, case, sampler)
    if prioritized:
        steps = np.array(store.stored_steps)
        store.update_priorities(steps, (steps % 7 + 1).astype(np.float64))
    expected = store.sample(9, rng=np.random.default_rng(seed), beta=0.5, n_step=n_step)
    encoded = store.sample_encoded(9, rng=np.random.default_rng(seed), beta=0.5, n_step=n_step)
    assert isinstance(encoded, EncodedBatch)
    for decoded in (encoded.decode(), decode_batch(encoded)):
        for name in ("obs", "next_obs", "action", "reward", "terminated", "truncated", "index", "env_index",
                     "weight", "discount"):
            np.testing.assert_array_equal(getattr(decoded, name), getattr(expected, name), err_msg=name)
            assert getattr(decoded, name).dtype == getattr(expected, name).dtype
    assert_each_frame_sent_is_needed(encoded)


def assert_each_frame_sent_is_needed(encoded: EncodedBatch | EncodedSequenceBatch) -> None:
    """Every frame an encoded batch carries is one its transitions show, or one that such a frame's block
    is compressed against (a reference store's batch): no frame sent for nothing."""
    frames = encoded.frames
    needed = set(np.asarray(encoded.frame_index)[np.asarray(encoded.frame_index) >= 0].tolist())
    references = frames.references
    if references is not None:
        needed |= set(references[references >= 0].tolist())
    else:
        assert len(frames) <= encoded.frame_index.size
    assert needed == set(range(len(frames)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=chunks(), length=st.integers(1, 5), seed=st.integers(0, 2**16), prioritized=st.booleans())
def test_sample_sequences_encoded_decodes_to_what_sample_sequences_returns(
    tmp_path_factory: pytest.TempPathFactory, case: dict, length: int, seed: int, prioritized: bool
) -> None:
    tmp = tmp_path_factory.mktemp("case")
    sampler = (lambda: PrioritizedSampler(alpha=0.6)) if prioritized else UniformSampler
    _, store = fill_both(tmp, case, sampler)
    if prioritized:
        steps = np.array(store.stored_steps)
        store.update_priorities(steps, (steps % 7 + 1).astype(np.float64))
    expected = store.sample_sequences(7, length, rng=np.random.default_rng(seed), beta=0.5)
    encoded = store.sample_sequences_encoded(7, length, rng=np.random.default_rng(seed), beta=0.5)
    assert isinstance(encoded, EncodedSequenceBatch)
    for decoded in (encoded.decode(), decode_sequences(encoded)):
        for name in ("obs", "next_obs", "action", "reward", "terminated", "truncated", "mask", "index", "env_index",
                     "weight"):
            actual, wanted = getattr(decoded, name), getattr(expected, name)
            assert actual.dtype == wanted.dtype and actual.shape == wanted.shape, name
            assert actual.tobytes() == wanted.tobytes(), name  # byte for byte
    assert_each_frame_sent_is_needed(encoded)


def test_encoded_sequences_of_real_sized_frames_are_many_times_smaller(tmp_path: Path) -> None:
    store = filled_store(tmp_path / "s")
    encoded = store.sample_sequences_encoded(8, 10, rng=0)
    decoded = encoded.decode()
    assert decoded.obs.shape == (8, 10, 4, 84, 84)
    assert encoded.nbytes * 20 < decoded.obs.base.nbytes
    assert "EncodedSequenceBatch(windows=8" in repr(encoded)
    with pytest.raises(TypeError, match="encoded must be an EncodedSequenceBatch; got EncodedBatch"):
        decode_sequences(store.sample_encoded(2, rng=0))


def filled_store(path: Path, steps: int = 50) -> ReplayStore:
    store = ReplayStore.create(path, frame_shape=(84, 84), capacity=1000, commit_interval_s=None)
    frames = np.zeros((steps + 1, 84, 84), np.uint8)
    for t in range(steps + 1):
        frames[t, 10 + t % 60, 10:20] = 200  # a moving bar: compressible, like an Atari frame
    for t in range(steps):
        store.add(frames[t], np.int64(t % 6), np.float32(t % 3 - 1), frames[t + 1], np.bool_(False), np.bool_(False))
    return store


def test_an_encoded_batch_is_many_times_smaller_than_the_decoded_one(tmp_path: Path) -> None:
    store = filled_store(tmp_path / "s")
    encoded = store.sample_encoded(32, rng=0)
    decoded = encoded.decode()
    assert encoded.nbytes * 20 < decoded.obs.base.nbytes
    assert "EncodedBatch(transitions=32" in repr(encoded)


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_an_encoded_batch_pickles_in_band_with_every_protocol(tmp_path: Path, protocol: int) -> None:
    store = filled_store(tmp_path / "s")
    encoded = store.sample_encoded(32, rng=0)
    copy = pickle.loads(pickle.dumps(encoded, protocol=protocol))
    assert isinstance(copy.frames.data, bytes) and copy.frames.data == encoded.frames.data
    assert np.array_equal(copy.decode().obs, store.sample(32, rng=0).obs)


def test_an_encoded_batch_sends_its_blocks_out_of_band_and_the_receiver_decodes_them_in_place(tmp_path: Path) -> None:
    # Protocol 5 with a buffer callback (Ray's transport): the blocks are one buffer beside the pickle,
    # not inside it, and the receiver views the buffer it is handed instead of copying it.
    store = filled_store(tmp_path / "s")
    encoded = store.sample_encoded(32, rng=1)
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(encoded, protocol=5, buffer_callback=buffers.append)
    assert encoded.frames.data not in payload  # the blocks are not in the pickle
    raw = [bytearray(buffer.raw()) for buffer in buffers]  # the receiver's memory
    blocks = next(memory for memory in raw if len(memory) == len(encoded.frames.data))
    copy = pickle.loads(payload, buffers=raw)
    assert isinstance(copy.frames.data, memoryview) and bytes(copy.frames.data) == encoded.frames.data
    assert np.array_equal(copy.decode().obs, store.sample(32, rng=1).obs)
    blocks[len(blocks) // 2] ^= 0xFF  # a view, not a copy: damage in the received memory is seen and refused
    with pytest.raises(CorruptStoreError, match="fails its checksum or does not decode"):
        copy.decode()


def test_a_damaged_block_fails_decode_with_corrupt_store_error(tmp_path: Path) -> None:
    store = filled_store(tmp_path / "s")
    encoded = store.sample_encoded(4, rng=0)
    data = bytearray(encoded.frames.data)
    data[len(data) // 2] ^= 0xFF
    frames = type(encoded.frames)(bytes(data), encoded.frames.lengths, encoded.frames.checksums,
                                  encoded.frames.seeds, encoded.frames.frame_shape)
    damaged = EncodedBatch(**{**encoded.__dict__, "frames": frames})
    with pytest.raises(CorruptStoreError, match="fails its checksum or does not decode"):
        damaged.decode()


@pytest.mark.parametrize("mode", ["r", "r+"])
def test_a_damaged_stored_frame_is_never_sent_encoded(tmp_path: Path, mode: str) -> None:
    # A reader ("r") checks each block as it gathers it and raises; the writer's own process ("r+")
    # gathers unchecked, and decoding the batch checks every block.
    filled_store(tmp_path / "s").close()
    written = json.loads((tmp_path / "s" / "header.json").read_text())["commit"]["bytes_written"]
    with open(tmp_path / "s" / "frames" / "0000000000.seg", "r+b") as segment:
        segment.seek(written // 2)
        byte = segment.read(1)[0]
        segment.seek(written // 2)
        segment.write(bytes([byte ^ 0x10]))
    with ReplayStore.open(tmp_path / "s", mode) as store:
        with pytest.raises(CorruptStoreError, match="fails its checksum"):
            store.sample_encoded(500, rng=0).decode()  # 500 draws of 50 transitions reach every frame


def test_add_encoded_rejects_an_index_outside_the_frames_and_writes_nothing(tmp_path: Path) -> None:
    store = ReplayStore.create(tmp_path / "s", frame_shape=FRAME, capacity=10, stack_size=2)
    frames = encode_frames(np.arange(3 * 12, dtype=np.uint8).reshape(3, *FRAME))
    good = dict(action=np.array([0, 1]), reward=np.zeros(2, np.float32), terminated=np.zeros(2, bool),
                truncated=np.zeros(2, bool))
    with pytest.raises(ValueError, match=r"next_obs holds 3; expected indices 0 <= i < 3 \(len\(frames\)\)"):
        store.add_encoded(frames, np.array([0, 1]), next_obs=np.array([1, 3]), **good)
    with pytest.raises(ValueError, match=r"env_index is 1; expected 0 <= env_index < 1 \(num_envs\)"):
        store.add_encoded(frames, np.array([0, 1]), next_obs=np.array([1, 2]), env_index=1, **good)
    with pytest.raises(TypeError, match="frames must be EncodedFrames"):
        store.add_encoded(b"", np.array([0, 1]), next_obs=np.array([1, 2]), **good)
    assert len(store) == 0
    store.add_encoded(frames, np.array([0, 1]), next_obs=np.array([1, 2]), **good)
    assert len(store) == 2


def test_add_encoded_names_the_step_it_refuses_and_writes_none_of_the_send(tmp_path: Path) -> None:
    store = ReplayStore.create(tmp_path / "s", frame_shape=FRAME, capacity=10, stack_size=2, action_dtype="uint8")
    frames = encode_frames(np.arange(6 * 12, dtype=np.uint8).reshape(6, *FRAME))
    obs, next_obs = np.arange(5), np.arange(1, 6)
    flags = dict(terminated=np.zeros(5, bool), truncated=np.zeros(5, bool))
    with pytest.raises(ValueError, match="step 3 of the send: reward must be finite"):
        store.add_encoded(frames, obs, np.zeros(5, np.int64), np.array([0, 1, 0, np.nan, 0], np.float32), next_obs, **flags)
    with pytest.raises(ValueError, match="step 1 of the send: action has values out of range for uint8"):
        store.add_encoded(frames, obs, np.array([0, 256, 1, 2, 3]), np.zeros(5, np.float32), next_obs, **flags)
    stacks = np.stack([np.arange(4), np.arange(1, 5)], axis=1)  # (4, 2): stacks of two frames
    shifted = stacks + 1
    shifted[2, 0] = 0  # step 2's next_obs is no shifted stack, and step 2 goes on
    with pytest.raises(ValueError, match=r"step 2 of the send: next_obs\[:-1\] must equal obs\[1:\]"):
        store.add_encoded(frames, stacks, np.zeros(4, np.int64), np.zeros(4, np.float32), shifted,
                          terminated=np.zeros(4, bool), truncated=np.zeros(4, bool))
    assert len(store) == 0 and store.transitions_added == 0


def test_add_encoded_refuses_a_damaged_frame_before_writing(tmp_path: Path) -> None:
    store = ReplayStore.create(tmp_path / "s", frame_shape=FRAME, capacity=10, stack_size=2)
    frames = encode_frames(np.arange(2 * 12, dtype=np.uint8).reshape(2, *FRAME))
    damaged = type(frames)(frames.data, frames.lengths, frames.checksums ^ np.uint32(1), frames.seeds, FRAME)
    with pytest.raises(CorruptStoreError, match="encoded frame 0 fails its checksum"):
        store.add_encoded(damaged, np.array([0]), np.array([0]), np.zeros(1, np.float32), np.array([1]),
                          np.zeros(1, bool), np.zeros(1, bool))
    assert len(store) == 0


def test_decode_blocks_decodes_frames_of_several_sources_in_any_order_and_checks_its_out() -> None:
    rng = np.random.default_rng(0)
    pixels = [rng.integers(0, 4, (3, *FRAME), dtype=np.uint8), rng.integers(0, 4, (2, *FRAME), dtype=np.uint8)]
    sources = [encode_frames(frames) for frames in pixels]
    refs = BlockRefs.join([sources[0].blocks(np.array([2, 0])).from_source(0),
                           sources[1].blocks(np.array([1, 1, 0])).from_source(1)], np.array([4, 0, 3, 1, 2]))
    out = np.empty((5, *FRAME), np.uint8)
    decode_blocks(sources, refs, out)
    expected = np.stack([pixels[1][0], pixels[0][2], pixels[1][1], pixels[0][0], pixels[1][1]])
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(ValueError, match=r"out must be a uint8 array of shape \(5, \*frame_shape\), a frame for each "
                                         r"of refs' 5 references; got ndarray uint8 of shape \(4, 3, 4\)"):
        decode_blocks(sources, refs, np.empty((4, *FRAME), np.uint8))
