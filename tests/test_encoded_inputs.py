"""The encoded path's public inputs are normalised or refused once, where they enter:
``EncodedFrames.data`` of any buffer shape or item size is its bytes, what ``add_encoded``
checks is what it writes, a decode never lands in a copy of ``out``, and malformed arguments get errors
that name them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmreplay import EncodedFrames, ReplayStore, decode_blocks, encode_frames
from mmreplay.store.writing import encoded_adds

FRAME = (6, 7)


def distinct_frames(count: int, seed: int, *, multiple_of: int = 1) -> tuple[np.ndarray, EncodedFrames]:
    """``count`` or more random frames whose blocks add up to a multiple of ``multiple_of`` bytes (so that
    they can be viewed as items of that size)."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 4, (count, *FRAME), dtype=np.uint8)
    for _ in range(1024):
        encoded = encode_frames(pixels)
        if len(encoded.data) % multiple_of == 0:
            return pixels, encoded
        pixels = np.concatenate([pixels, rng.integers(0, 4, (1, *FRAME), dtype=np.uint8)])
    raise AssertionError("no frames found whose blocks fill whole items")


def send(store: ReplayStore, frames: EncodedFrames, steps: int) -> None:
    """Steps 0..steps-1 of one episode: step t goes from frame t to frame t + 1."""
    store.add_encoded(frames, np.arange(steps), np.zeros(steps, np.int64), np.ones(steps, np.float32),
                      np.arange(1, steps + 1), np.zeros(steps, bool), np.zeros(steps, bool))


def assert_holds(store: ReplayStore, pixels: np.ndarray, steps: int) -> None:
    batch = store.read(np.arange(steps))
    np.testing.assert_array_equal(batch.obs[:, 0], pixels[:steps])
    np.testing.assert_array_equal(batch.next_obs[:, 0], pixels[1 : steps + 1])


def like(frames: EncodedFrames, data: object) -> EncodedFrames:
    return EncodedFrames(data, frames.lengths, frames.checksums, frames.seeds, frames.frame_shape)  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", ["uint8", "uint32"])
def test_add_encoded_of_a_two_dimensional_buffer_writes_the_blocks_it_checked(tmp_path: Path, dtype: str) -> None:
    # The case: frames received into an (n, k) buffer, sent on as ndarray.data.
    pixels, frames = distinct_frames(21, seed=1, multiple_of=8)
    received = np.frombuffer(frames.data, np.uint8).view(dtype).reshape(2, -1)
    with ReplayStore.create(tmp_path / "s", frame_shape=FRAME, capacity=64, stack_size=1) as store:
        send(store, like(frames, received.data), 20)
    with ReplayStore.open(tmp_path / "s") as store:
        assert_holds(store, pixels, 20)


@settings(max_examples=40)
@given(seed=st.integers(0, 2**16), itemsize=st.sampled_from([1, 2, 4, 8]), rows=st.sampled_from([1, 2, 4]),
       kind=st.sampled_from(["ndarray", "memoryview", "bytearray", "strided"]))
def test_any_buffer_of_the_blocks_stores_what_add_stores(
    tmp_path_factory: pytest.TempPathFactory, seed: int, itemsize: int, rows: int, kind: str
) -> None:
    pixels, frames = distinct_frames(9, seed, multiple_of=8 * 4)
    flat = np.frombuffer(frames.data, np.uint8)
    if kind == "strided":  # every other byte of a buffer twice the size: not contiguous, copied in C order
        wide = np.zeros(2 * len(flat), np.uint8)
        wide[::2] = flat
        data: object = memoryview(wide[::2])
    elif kind == "bytearray":
        data = bytearray(frames.data)
    else:
        array = flat.view(f"u{itemsize}").reshape(rows, -1)
        data = array if kind == "ndarray" else array.data
    steps = len(pixels) - 1
    directory = tmp_path_factory.mktemp("any")
    with ReplayStore.create(directory / "encoded", frame_shape=FRAME, capacity=steps, stack_size=1) as encoded:
        send(encoded, like(frames, data), steps)
        with ReplayStore.create(directory / "added", frame_shape=FRAME, capacity=steps, stack_size=1) as added:
            for t in range(steps):
                added.add(pixels[t], 0, 1.0, pixels[t + 1], False, False)
            for name in ("obs", "next_obs", "action", "reward"):
                np.testing.assert_array_equal(getattr(encoded.read(np.arange(steps)), name),
                                              getattr(added.read(np.arange(steps)), name))


def test_encoded_frames_view_their_buffer_as_flat_read_only_bytes() -> None:
    _, frames = distinct_frames(5, seed=2, multiple_of=8)
    buffer = np.frombuffer(frames.data, np.uint8).view(np.uint32).reshape(2, -1).copy()
    viewed = like(frames, buffer)
    assert isinstance(viewed.data, memoryview)
    assert (viewed.data.ndim, viewed.data.format, viewed.data.readonly) == (1, "B", True)
    assert bytes(viewed.data) == frames.data and np.shares_memory(np.asarray(viewed.data), buffer)


def test_add_encoded_writes_what_it_checked_when_the_callers_buffer_changes_after_the_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sender that reuses its receive buffer (another thread, or Ray handing it on) while the add runs.
    pixels, frames = distinct_frames(11, seed=3)
    buffer = bytearray(frames.data)
    checked = encoded_adds.step_joins  # the send's last check

    def checks_then_buffer_reused(*arguments: object) -> object:
        joins = checked(*arguments)  # type: ignore[arg-type]
        buffer[:] = bytes(len(buffer))
        return joins

    monkeypatch.setattr(encoded_adds, "step_joins", checks_then_buffer_reused)
    with ReplayStore.create(tmp_path / "s", frame_shape=FRAME, capacity=64, stack_size=1) as store:
        send(store, like(frames, memoryview(buffer)), 10)
    assert buffer == bytes(len(buffer))
    with ReplayStore.open(tmp_path / "s") as store:
        assert_holds(store, pixels, 10)


@pytest.mark.parametrize("layout", ["fortran", "left half", "read-only"])
def test_decode_blocks_refuses_an_out_it_cannot_decode_into_in_place(layout: str) -> None:
    pixels, frames = distinct_frames(4, seed=4)
    refs = frames.blocks(np.arange(4))
    if layout == "fortran":
        out = np.zeros((4, *FRAME), np.uint8, order="F")
        strides = r"\(1, 4, 24\)"
    elif layout == "left half":
        out = np.zeros((4, FRAME[0], 2 * FRAME[1]), np.uint8)[:, :, : FRAME[1]]
        strides = r"\(84, 14, 1\)"
    else:
        out = np.zeros((4, *FRAME), np.uint8)
        out.flags.writeable = False
        strides = r"\(42, 7, 1\), read-only"
    with pytest.raises(ValueError, match=r"out must be a writeable C-contiguous array \(np.empty\(\(4, \*frame_shape\), "
                                         rf"np.uint8\)\); got one of strides {strides}"):
        decode_blocks([frames], refs, out)
    assert not out.any()
    contiguous = np.empty((4, *FRAME), np.uint8)
    decode_blocks([frames], refs, contiguous)
    np.testing.assert_array_equal(contiguous, pixels)


def test_decode_blocks_refuses_an_out_whose_frames_have_another_shape() -> None:
    _, frames = distinct_frames(2, seed=5)
    with pytest.raises(ValueError, match=r"out has frames of shape \(7, 6\); the sources' frames have shape \(6, 7\)"):
        decode_blocks([frames], frames.blocks(np.arange(2)), np.empty((2, 7, 6), np.uint8))


def test_an_empty_add_encoded_send_is_refused_naming_obs(tmp_path: Path) -> None:
    _, frames = distinct_frames(2, seed=6)
    none = np.zeros(0, np.int64)
    with ReplayStore.create(tmp_path / "s", frame_shape=FRAME, capacity=8, stack_size=1) as store:
        with pytest.raises(ValueError, match=r"obs has shape \(0,\); expected at least one step \(a send of T >= 1 "
                                             r"steps\)"):
            store.add_encoded(frames, none, none, np.zeros(0, np.float32), none, np.zeros(0, bool), np.zeros(0, bool))
        assert store.transitions_added == 0


@pytest.mark.parametrize(("change", "message"), [
    ({"checksums": "short"}, r"checksums has shape \(2,\); expected \(3,\), one per frame, as lengths"),
    ({"seeds": "short"}, r"seeds has shape \(2,\); expected \(3,\), one per frame, as lengths"),
    ({"lengths": "long"}, r"lengths add up to \d+ bytes; expected \d+, the bytes of data \(the 3 blocks back to back\)"),
    ({"lengths": "negative"}, r"lengths holds -1; expected block lengths >= 0"),
    ({"lengths": "float"}, r"lengths must be an integer array \(one per frame\); got float64"),
    ({"checksums": "too big"}, r"checksums holds values outside \[0, 4294967295\] \(uint32\)"),
    ({"data": "text"}, r"data must be bytes or a buffer of the lz4 blocks back to back; got str"),
])
def test_malformed_encoded_frames_are_refused_naming_the_argument(change: dict[str, str], message: str) -> None:
    _, frames = distinct_frames(3, seed=7)
    fields = {"data": frames.data, "lengths": frames.lengths, "checksums": frames.checksums, "seeds": frames.seeds,
              "frame_shape": frames.frame_shape}
    (name, how), = change.items()
    value = fields[name]
    if how == "short":
        fields[name] = value[:2]  # type: ignore[index]
    elif how == "long":
        fields[name] = value + np.array([1, 0, 0])  # type: ignore[operator]
    elif how == "negative":
        fields[name] = np.array([-1, value[1] + 1, value[2]])  # type: ignore[index]
    elif how == "float":
        fields[name] = value.astype(np.float64)  # type: ignore[union-attr]
    elif how == "too big":
        fields[name] = value.astype(np.int64) + 2**32  # type: ignore[union-attr]
    else:
        fields[name] = "not bytes"
    with pytest.raises((TypeError, ValueError), match=message):
        EncodedFrames(**fields)  # type: ignore[arg-type]


def test_an_encoded_batch_whose_frame_index_points_past_its_frames_is_refused_naming_it(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "s", frame_shape=FRAME, capacity=16, stack_size=2) as store:
        for t in range(6):
            store.add(np.full(FRAME, t, np.uint8), 0, 0.0, np.full(FRAME, t + 1, np.uint8), False, False)
        batch = store.sample_encoded(4, rng=0)
        windows = store.sample_sequences_encoded(2, 3, rng=0)
    count = len(batch.frames)
    past = dataclasses.replace(batch, frame_index=batch.frame_index + count)
    with pytest.raises(ValueError, match=rf"frame_index holds {int(batch.frame_index.max()) + count}; expected "
                                         rf"indices 0 <= i < {count} \(len\(frames\)\)"):
        past.decode()
    with pytest.raises(ValueError, match=r"stack_size is 9; expected an int in \[1, 3\] \(frame_index's columns\)"):
        dataclasses.replace(batch, stack_size=9).decode()
    with pytest.raises(ValueError, match=r"frame_index holds -1"):
        dataclasses.replace(windows, frame_index=windows.frame_index - windows.frame_index.min() - 1).decode()
    with pytest.raises(ValueError, match=r"order holds 99; expected indices 0 <= i < \d+ \(len\(frames\)\)"):
        batch.frames.decode(np.array([0, 99]))
