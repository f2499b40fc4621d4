"""Frames of any numeric or bool dtype (``ReplayStore.create(..., frame_dtype=...)``): stored bit-exact,
little-endian, through every read path, the HDF5 layouts, torch, the command line and the recorder.

The state machine (test_store_model.py) and the n-step, sequence and fast-add properties already run
over float32, float16, int16 and bool frames; these are the named cases.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import store_files
from reference import bits

import mmreplay
from mmreplay import ReplayStore
from mmreplay.cli import main

NAN_PAYLOAD = np.uint32(0x7FC12345)  # a quiet NaN with a payload: it must come back with it
SIGNALING_NAN = np.uint32(0x7F800001)


def special_floats() -> np.ndarray:
    """A CartPole-shaped (4,) float32 frame of the values that a careless store would mangle."""
    frame = np.array([0.0, np.inf, -np.inf, -0.0], np.float32)
    frame.view(np.uint32)[0] = NAN_PAYLOAD
    return frame


def cartpole_states(count: int, seed: int = 0) -> np.ndarray:
    """``count`` CartPole-like float32 states (4,), each distinct."""
    return np.random.default_rng(seed).normal(size=(count, 4)).astype(np.float32)


def fill(store: ReplayStore, frames: np.ndarray, *, end_every: int = 0) -> None:
    """Add consecutive frames as single-frame transitions of one env; an episode ends (terminated) after
    every ``end_every`` transitions, and the next starts from the following frame."""
    obs = frames[0]
    for i, next_obs in enumerate(frames[1:], start=1):
        ended = bool(end_every) and i % end_every == 0
        store.add(obs, np.int64(i % 2), 1.0, next_obs, ended, False)
        obs = next_obs


def test_a_float32_store_gives_back_nan_payloads_infinities_and_negative_zero_bit_for_bit(store_path: Path) -> None:
    frames = cartpole_states(12)
    frames[3] = special_floats()
    frames[5].view(np.uint32)[1] = SIGNALING_NAN
    with ReplayStore.create(store_path, frame_shape=(4,), capacity=32, stack_size=2, frame_dtype=np.float32) as store:
        fill(store, frames)
        batch = store.read(range(11))
        assert batch.obs.dtype == batch.next_obs.dtype == np.float32
        np.testing.assert_array_equal(bits(batch.next_obs[:, -1]), bits(frames[1:]))
        np.testing.assert_array_equal(bits(batch.obs[:, -1]), bits(frames[:-1]))
    with ReplayStore.open(store_path) as store:
        assert store.frame_dtype == np.float32
        assert store.read([2]).next_obs[0, -1].view(np.uint32)[0] == NAN_PAYLOAD
        assert store.read([4]).next_obs[0, -1].view(np.uint32)[1] == SIGNALING_NAN
        window = store.sample(64, rng=0, n_step=3)
        np.testing.assert_array_equal(bits(window.obs[:, -1]), bits(frames[window.index]))
        sequences = store.sample_sequences(8, 3, rng=0)
        starts = sequences.index[:, 0]
        np.testing.assert_array_equal(bits(sequences.obs[:, 0, -1]), bits(frames[starts]))


def test_an_obs_that_is_a_nan_frame_continues_the_episode_that_gave_it_as_next_obs(store_path: Path) -> None:
    frames = np.stack([special_floats()] * 2 + [cartpole_states(1)[0]])
    with ReplayStore.create(store_path, frame_shape=(4,), capacity=8, stack_size=2, frame_dtype=np.float32) as store:
        fill(store, frames)
        assert [episode.length for episode in store.episodes()] == [2]


@pytest.mark.parametrize("stack_size", [1, 4])
def test_a_cartpole_like_float32_store_builds_its_stacks_and_restarts_them_at_episode_starts(
    store_path: Path, stack_size: int
) -> None:
    states = cartpole_states(30)
    with ReplayStore.create(
        store_path, frame_shape=(4,), capacity=100, stack_size=stack_size, frame_dtype=np.float32
    ) as store:
        fill(store, states, end_every=10)  # episodes of transitions 1-10, 11-20 (obs 10 repeats), 21-29
        batch = store.read(range(29))
    assert batch.obs.shape == (29, stack_size, 4) and batch.obs.dtype == np.float32
    for step in range(29):
        start = 0 if step < 10 else 10 if step < 20 else 20  # the frame each episode's stacks pad with
        wanted = [states[max(start, step - stack_size + 1 + k)] for k in range(stack_size)]
        np.testing.assert_array_equal(batch.obs[step], wanted, err_msg=f"obs of step {step}")
        wanted_next = [states[max(start, step - stack_size + 2 + k)] for k in range(stack_size)]
        np.testing.assert_array_equal(batch.next_obs[step], wanted_next, err_msg=f"next_obs of step {step}")


@pytest.mark.parametrize("dtype", [np.bool_, np.int16, np.float16, np.uint16, np.int64, np.float64])
def test_frames_of_each_numeric_dtype_round_trip_through_sample_and_reopen(store_path: Path, dtype: Any) -> None:
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, (20, 3, 5 * np.dtype(dtype).itemsize), dtype=np.uint8)
    frames = (raw & 1).astype(np.bool_) if dtype == np.bool_ else raw.view(dtype)
    with ReplayStore.create(store_path, frame_shape=(3, 5), capacity=64, stack_size=3, frame_dtype=dtype) as store:
        fill(store, frames)
        batch = store.sample(32, rng=0)
    with ReplayStore.open(store_path) as store:
        again = store.sample(32, rng=0)
    assert batch.obs.dtype == np.dtype(dtype) and batch.obs.shape == (32, 3, 3, 5)
    np.testing.assert_array_equal(bits(batch.next_obs[:, -1]), bits(frames[batch.index + 1]))
    np.testing.assert_array_equal(bits(again.obs), bits(batch.obs))


def test_frames_larger_than_a_u2_length_allows_round_trip_incompressible(store_path: Path) -> None:
    # 16,316 float32 values are 65,264 bytes: lz4's worst case no longer fits a u2 length (65,260 does).
    noise = np.random.default_rng(2).integers(0, 2**32, (6, 16316), dtype=np.uint32).view(np.float32)
    with ReplayStore.create(
        store_path, frame_shape=(16316,), capacity=8, stack_size=2, frame_dtype=np.float32
    ) as store:
        fill(store, noise)
        batch = store.read(range(5))
    np.testing.assert_array_equal(bits(batch.next_obs[:, -1]), bits(noise[1:]))


def test_obs_of_another_dtype_is_refused_naming_expected_and_received_and_changes_nothing(store_path: Path) -> None:
    states = cartpole_states(3)
    with ReplayStore.create(store_path, frame_shape=(4,), capacity=8, stack_size=2, frame_dtype=np.float32) as store:
        store.add(states[0], 0, 1.0, states[1], False, False)
        with pytest.raises(TypeError, match=r"^obs must have dtype float32; got float64$"):
            store.add(states[1].astype(np.float64), 0, 1.0, states[2], False, False)
        with pytest.raises(TypeError, match=r"^next_obs must have dtype float32; got uint8$"):
            store.add(states[1], 0, 1.0, np.zeros(4, np.uint8), False, False)
        with pytest.raises(TypeError, match=r"^obs must have dtype float32; got int64$"):
            store.add([1, 2, 3, 4], 0, 1.0, states[2], False, False)  # a list becomes int64: refused, not cast
        assert store.transitions_added == 1
        store.add(states[1], 0, 1.0, states[2], False, False)
        assert [episode.length for episode in store.episodes()] == [2]


def test_a_uint8_store_refuses_float_frames_as_before(store_path: Path) -> None:
    with ReplayStore.create(store_path, frame_shape=(4,), capacity=8) as store:
        with pytest.raises(TypeError, match=r"^obs must have dtype uint8; got float32$"):
            store.add(np.zeros(4, np.float32), 0, 1.0, np.zeros(4, np.float32), False, False)


@pytest.mark.parametrize(
    "frame_dtype, error, message",
    [
        (object, TypeError, r"^frame_dtype must be a bool, integer or float dtype \(uint8, float32, bool, \.\.\.\); got object$"),
        (np.complex64, TypeError, r"^frame_dtype must be a bool, integer or float dtype \(uint8, float32, bool, \.\.\.\); got complex64$"),
        ("U4", TypeError, r"^frame_dtype must be a bool, integer or float dtype \(uint8, float32, bool, \.\.\.\); got <U4$"),
        ([("a", "f4")], TypeError, r"frame_dtype must be a bool, integer or float dtype .*; got \[\('a', '<f4'\)\]$"),
        ("no such dtype", TypeError, r"^frame_dtype must be a numpy dtype; got 'no such dtype'$"),
    ],
)
def test_a_frame_dtype_that_is_not_numeric_is_refused_before_anything_is_created(
    store_path: Path, frame_dtype: Any, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        ReplayStore.create(store_path, frame_shape=(4,), capacity=8, frame_dtype=frame_dtype)
    assert not store_path.exists()


def test_frames_compressed_against_references_must_be_uint8(store_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^frame_encoding='lz4-reference' takes uint8 frames only; got frame_dtype=float32$"):
        ReplayStore.create(store_path, frame_shape=(4,), capacity=8, frame_dtype=np.float32, frame_encoding="lz4-reference")
    assert not store_path.exists()


def test_big_endian_frames_are_stored_as_their_values_little_endian(store_path: Path) -> None:
    states = cartpole_states(3)
    with ReplayStore.create(store_path, frame_shape=(4,), capacity=8, stack_size=2, frame_dtype=">f4") as store:
        assert store.frame_dtype == np.dtype("<f4")
        store.add(states[0].astype(">f4"), 0, 1.0, states[1].astype(">f4"), False, False)
        store.add(states[1], 0, 1.0, states[2].astype(">f4"), False, False)  # continues the episode
        batch = store.read([0, 1])
    assert batch.obs.dtype == np.dtype("<f4")
    np.testing.assert_array_equal(batch.next_obs[:, -1], states[1:])
    assert [json.loads((store_path / "header.json").read_text())["layout"]["frame_dtype"]] == ["<f4"]


def test_a_uint8_store_header_has_no_frame_dtype_and_another_records_it(tmp_path: Path) -> None:
    for name, dtype in (("u8", np.uint8), ("bool", np.bool_), ("f2", np.float16)):
        ReplayStore.create(tmp_path / name, frame_shape=(4,), capacity=8, frame_dtype=dtype).close()
    layouts = {name: json.loads((tmp_path / name / "header.json").read_text())["layout"] for name in ("u8", "bool", "f2")}
    assert "frame_dtype" not in layouts["u8"]
    assert (layouts["bool"]["frame_dtype"], layouts["f2"]["frame_dtype"]) == ("|b1", "<f2")


def _rewrite_header(path: Path, change: Any) -> None:
    header = json.loads((path / "header.json").read_text())
    body = {key: value for key, value in header.items() if key != "checksum"}
    change(body)
    body["checksum"] = zlib.crc32(json.dumps(body, sort_keys=True).encode())
    (path / "header.json").write_text(json.dumps(body))


def _as_version_3(path: Path) -> None:
    """Rewrite a store's rows with format version 3's checksum (their bytes after the first 8 weighted
    1, 3, 5, ..., plus the step times 2654435761, mod 2**32) and its header as version 3."""
    header = json.loads((path / "header.json").read_text())
    slots, added = header["layout"]["row_slots"], header["commit"]["transitions_added"]
    table = np.fromfile(path / "transitions.tbl", np.uint8)
    rows = table[: slots * (len(table) // slots)].reshape(slots, -1)
    weights = np.arange(1, 2 * (rows.shape[1] - 8), 2, dtype=np.uint64)
    for step in range(added):
        total = int(rows[step % slots, 8:].astype(np.uint64) @ weights) + step * 2654435761
        rows[step % slots, :4] = np.frombuffer((total & 0xFFFFFFFF).to_bytes(4, "little"), np.uint8)
    table.tofile(path / "transitions.tbl")
    _rewrite_header(path, lambda body: body.update(format_version=3))


def test_a_version_3_store_opens_with_uint8_frames(store_path: Path) -> None:
    with store_files.writing_version(4):  # version 3's rows are version 4's, with another checksum
        store = ReplayStore.create(store_path, frame_shape=(3, 4), capacity=8, stack_size=2)
    with store:
        store.add(np.full((3, 4), 1, np.uint8), 0, 0.0, np.full((3, 4), 2, np.uint8), False, False)
    _as_version_3(store_path)
    with ReplayStore.open(store_path, "r") as reader:
        assert reader.frame_dtype == np.uint8
        np.testing.assert_array_equal(reader.read([0]).next_obs[0, -1], np.full((3, 4), 2, np.uint8))


def test_a_header_with_a_frame_dtype_that_is_not_one_is_corrupt(store_path: Path) -> None:
    ReplayStore.create(store_path, frame_shape=(4,), capacity=8, frame_dtype=np.float32).close()
    _rewrite_header(store_path, lambda body: body["layout"].update(frame_dtype=">f4"))
    with pytest.raises(mmreplay.CorruptStoreError, match=r"header field frame_dtype is '>f4'; expected a little-endian numeric or bool dtype string"):
        ReplayStore.open(store_path)


def test_out_prefetch_and_torch_give_the_frame_dtype(store_path: Path) -> None:
    torch = pytest.importorskip("torch")
    halves = cartpole_states(40).astype(np.float16)
    with ReplayStore.create(store_path, frame_shape=(4,), capacity=64, stack_size=4, frame_dtype=np.float16) as store:
        fill(store, halves, end_every=9)
        batch = store.sample(16, rng=np.random.default_rng(5))
        refilled = store.sample(16, rng=np.random.default_rng(5), out=store.sample(16, rng=1))
        np.testing.assert_array_equal(bits(refilled.obs), bits(batch.obs))
        with store.batches(16, prefetch=2, rng=np.random.default_rng(5)) as batches:
            np.testing.assert_array_equal(bits(next(iter(batches)).next_obs), bits(batch.next_obs))
        tensors = batch.to_torch()
    assert tensors["obs"].dtype == torch.float16 and tensors["obs"].shape == (16, 4, 4)
    assert np.shares_memory(tensors["obs"].numpy(), batch.obs)


def test_a_bool_store_round_trips_and_converts_to_torch_bool(store_path: Path) -> None:
    torch = pytest.importorskip("torch")
    frames = np.random.default_rng(3).integers(0, 2, (30, 2, 6)).astype(bool)
    with ReplayStore.create(store_path, frame_shape=(2, 6), capacity=32, stack_size=2, frame_dtype=bool) as store:
        fill(store, frames)
        batch = store.read(range(29))
    np.testing.assert_array_equal(batch.next_obs[:, -1], frames[1:])
    assert batch.obs.view(np.uint8).max() == 1  # only 0 and 1 bytes: valid bools
    assert batch.to_torch()["next_obs"].dtype == torch.bool


@pytest.mark.parametrize("layout", ["mmreplay", "minari"])
@pytest.mark.parametrize("dtype", [np.float32, np.bool_, np.int16])
def test_hdf5_exports_and_imports_keep_the_frame_dtype_bit_for_bit(tmp_path: Path, layout: str, dtype: Any) -> None:
    pytest.importorskip("h5py")
    rng = np.random.default_rng(4)
    raw = rng.integers(0, 256, (25, 4 * np.dtype(dtype).itemsize), dtype=np.uint8)
    frames = (raw & 1).astype(bool) if dtype == np.bool_ else raw.view(dtype)
    if dtype == np.float32:
        frames[7] = special_floats()
    with ReplayStore.create(tmp_path / "s", frame_shape=(4,), capacity=64, stack_size=3, frame_dtype=dtype) as store:
        fill(store, frames, end_every=8)
        # An episode that terminates with a next_obs stack stored as given (the reset observation).
        store.add(np.stack([frames[24]] * 3), 0, 0.0, np.stack([frames[0]] * 3), True, False)
        before = store.read(store.stored_steps)
        mmreplay.export_hdf5(store, tmp_path / "out-v0", layout=layout)
    mmreplay.import_hdf5(tmp_path / "out-v0", tmp_path / "copy")
    with ReplayStore.open(tmp_path / "copy") as copy:
        after = copy.read(copy.stored_steps)
        assert copy.frame_dtype == np.dtype(dtype)
    for name in ("obs", "next_obs", "action", "reward", "terminated", "truncated"):
        np.testing.assert_array_equal(bits(getattr(after, name)), bits(getattr(before, name)), err_msg=name)


def test_cli_info_shows_the_frame_dtype_and_show_refuses_frames_that_are_not_uint8_images(
    store_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("PIL.Image")
    with ReplayStore.create(store_path, frame_shape=(4,), capacity=16, stack_size=2, frame_dtype=np.float32) as store:
        fill(store, np.concatenate([cartpole_states(5), special_floats()[None]]))
    assert main(["info", str(store_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["frame_dtype"] == "float32"
    assert main(["show", str(store_path), "0", "-o", str(tmp_path / "e.png")]) == 1
    assert capsys.readouterr().err == (
        "mmreplay: error: show draws uint8 image frames; this store's frames are float32 (4,) "
        "(read them with ReplayStore.read, or export them)\n"
    )
    assert main(["verify", str(store_path)]) == 0  # NaN frames continue their episode: no problem


def test_the_recorder_records_cartpole_into_a_float32_store(store_path: Path) -> None:
    gym = pytest.importorskip("gymnasium")
    from mmreplay.recorder import RecordEpisodes

    with ReplayStore.create(store_path, frame_shape=(4,), capacity=500, stack_size=1, frame_dtype=np.float32) as store:
        env = RecordEpisodes(gym.make("CartPole-v1"), store)
        obs, _ = env.reset(seed=0)
        seen = [obs]
        for step in range(60):
            obs, _, terminated, truncated, _ = env.step(step % 2)
            seen.append(obs)
            if terminated or truncated:
                break
        batch = store.read(store.stored_steps)
    np.testing.assert_array_equal(batch.obs[:, 0], seen[:-1])
    np.testing.assert_array_equal(batch.next_obs[:, 0], seen[1:])


def test_the_recorder_refuses_an_observation_space_of_another_dtype(store_path: Path) -> None:
    gym = pytest.importorskip("gymnasium")
    from mmreplay.recorder import RecordEpisodes

    with ReplayStore.create(store_path, frame_shape=(4,), capacity=8, stack_size=1) as store:
        with pytest.raises(TypeError, match=r"^observation_space must have the store's frame dtype uint8; got float32$"):
            RecordEpisodes(gym.make("CartPole-v1"), store)


def test_sb3_buffer_takes_a_float32_box_and_samples_it_back(tmp_path: Path) -> None:
    pytest.importorskip("stable_baselines3")
    torch = pytest.importorskip("torch")
    from gymnasium import spaces

    from mmreplay.sb3 import MmreplayBuffer

    space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    buffer = MmreplayBuffer(64, space, spaces.Discrete(2), device="cpu", path=tmp_path / "cartpole.mmr")
    states = cartpole_states(6)
    states[2] = special_floats()
    for i in range(5):
        buffer.add(states[i][None], states[i + 1][None], np.array([i % 2]), np.array([1.0], np.float32),
                   np.array([False]), [{}])
    assert buffer.store.frame_dtype == np.float32 and buffer.store.stack_size == 1
    got = buffer.samples_at(list(range(5)), [0] * 5)
    assert got.observations.dtype == torch.float32
    np.testing.assert_array_equal(bits(got.observations.numpy()), bits(states[:5]))
    np.testing.assert_array_equal(bits(got.next_observations.numpy()), bits(states[1:]))
    buffer.close()


def test_sb3_dqn_learns_on_cartpole_with_the_buffer(tmp_path: Path) -> None:
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import DQN

    from mmreplay.sb3 import MmreplayBuffer

    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=1000, learning_starts=64, batch_size=32, train_freq=4,
                replay_buffer_class=MmreplayBuffer, replay_buffer_kwargs=dict(path=tmp_path / "dqn.mmr"), seed=0)
    model.learn(total_timesteps=300)
    assert model.replay_buffer.store.frame_dtype == np.float32
    assert model.replay_buffer.store.transitions_added == 300


def test_encoded_frames_in_and_out_are_for_uint8_stores_only(store_path: Path) -> None:
    with ReplayStore.create(store_path, frame_shape=(4,), capacity=8, stack_size=1, frame_dtype=np.float32) as store:
        fill(store, cartpole_states(3))
        with pytest.raises(ValueError, match=r"^sample_encoded gives uint8 frames; this store's frame_dtype is float32: use sample$"):
            store.sample_encoded(2, rng=0)
        with pytest.raises(ValueError, match=r"^add_encoded takes uint8 frames; this store's frame_dtype is float32: use add$"):
            store.add_encoded(None, None, None, None, None, None, None)  # type: ignore[arg-type]
