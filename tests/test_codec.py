"""codec.decode_batch: the compiled extension and the python-lz4 fallback agree, bit for bit.

Every test runs on each available path: "fallback" always, "extension" (one thread) and
"extension-2-threads" only when mmreplay._lz4batch is built, else skipped with the reason.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import zlib

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from atari_data import load_stream
from extension_status import absent_reason

from mmreplay import extensions
from mmreplay.frames import lz4_codec as codec
from mmreplay.frames.frame_entries import EntryFormat

_lz4batch = extensions.load("_lz4batch")

FRAME_SHAPE = (84, 84)
NOT_BUILT = absent_reason("_lz4batch")

PATHS = [
    pytest.param({"accelerated": False}, id="fallback"),
    pytest.param(
        {"accelerated": True, "threads": 1},
        id="extension",
        marks=pytest.mark.skipif(not codec.ACCELERATED, reason=NOT_BUILT),
    ),
    pytest.param(
        {"accelerated": True, "threads": 2},
        id="extension-2-threads",
        marks=pytest.mark.skipif(not codec.ACCELERATED, reason=NOT_BUILT),
    ),
]


class Segments:
    """Frames compressed into ``count`` segment buffers, round robin, with the frame step as seed."""

    def __init__(self, frames: npt.NDArray[np.uint8], *, count: int = 1, first_step: int = 0) -> None:
        payloads = [codec.compress(frame) for frame in frames]
        self.frames = frames
        self.steps = np.arange(first_step, first_step + len(frames), dtype=np.int64)
        self.segments = np.arange(len(frames), dtype=np.int64) % count
        self.lengths = np.array([len(p) for p in payloads], np.int64)
        self.checksums = np.array([codec.checksum(p, int(s)) for p, s in zip(payloads, self.steps)], np.uint32)
        self.offsets = np.zeros(len(frames), np.int64)
        contents: list[bytearray] = [bytearray(b"\xa5" * 7) for _ in range(count)]  # frames start unaligned
        for i, payload in enumerate(payloads):
            self.offsets[i] = len(contents[self.segments[i]])
            contents[self.segments[i]] += payload
        self.contents = contents
        self.views = [memoryview(content) for content in contents]

    def decode(self, picks: npt.NDArray[np.int64], *, out: npt.NDArray[np.uint8] | None = None, **path: object) -> tuple[int, npt.NDArray[np.uint8]]:
        if out is None:
            out = np.zeros((len(picks), *self.frames.shape[1:]), np.uint8)
        bad = codec.decode_batch(
            self.segments[picks], self.offsets[picks], self.lengths[picks], self.checksums[picks],
            self.steps[picks], out, views=self.views, **path,  # type: ignore[arg-type]
        )
        return bad, out


@functools.cache
def real_frames(game: str) -> npt.NDArray[np.uint8]:
    frames: npt.NDArray[np.uint8] = load_stream(game, ("frames",), 600)["frames"]  # several episodes' worth
    frames.flags.writeable = False
    return frames


def random_frames(count: int, seed: int) -> npt.NDArray[np.uint8]:
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 256, (count, *FRAME_SHAPE), dtype=np.uint8)
    # mostly-constant frames with noisy rows compress like game frames; pure noise tests lz4 literals
    sparse = np.where(rng.random((count, *FRAME_SHAPE)) < 0.05, noise, np.uint8(87))
    return np.concatenate([noise[: count // 2], sparse[count // 2 :]])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("game", ["pong", "mspacman"])
def test_real_frames_decode_to_the_original_pixels(game: str, path: dict[str, object]) -> None:
    store = Segments(real_frames(game), count=3)
    picks = np.random.default_rng(1).choice(len(store.frames), 160, replace=False)
    bad, out = store.decode(picks, **path)
    assert bad == -1
    np.testing.assert_array_equal(out, store.frames[picks])


@pytest.mark.parametrize("path", PATHS)
def test_random_frames_decode_to_the_original_pixels(path: dict[str, object]) -> None:
    store = Segments(random_frames(200, seed=2), count=5, first_step=2**33 - 100)  # seeds wrap past 2**32
    picks = np.random.default_rng(3).permutation(200)
    bad, out = store.decode(picks, **path)
    assert bad == -1
    np.testing.assert_array_equal(out, store.frames[picks])


@pytest.mark.parametrize("game", ["pong", "mspacman"])
@pytest.mark.skipif(not codec.ACCELERATED, reason=NOT_BUILT)
def test_extension_and_fallback_write_identical_bytes(game: str) -> None:
    store = Segments(real_frames(game), count=2)
    picks = np.random.default_rng(4).choice(len(store.frames), 500, replace=False)
    outputs = [store.decode(picks, **path.values[0])[1] for path in PATHS]  # type: ignore[arg-type]
    for out in outputs[1:]:
        assert out.tobytes() == outputs[0].tobytes()


@pytest.mark.parametrize("path", PATHS)
def test_repeated_frames_and_several_segments_decode_in_the_order_asked(path: dict[str, object]) -> None:
    store = Segments(random_frames(40, seed=5), count=4)
    picks = np.array([3, 3, 39, 0, 17, 3, 22, 0], np.int64)
    bad, out = store.decode(picks, **path)
    assert bad == -1
    np.testing.assert_array_equal(out, store.frames[picks])


@pytest.mark.parametrize("path", PATHS)
def test_an_empty_batch_is_good_and_writes_nothing(path: dict[str, object]) -> None:
    store = Segments(random_frames(4, seed=6))
    bad, out = store.decode(np.zeros(0, np.int64), **path)
    assert bad == -1
    assert out.shape == (0, *FRAME_SHAPE)


# -- corruption: the first bad frame's index, on every path -------------------------------------------


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_flipped_payload_byte_reports_that_frame(where: str, path: dict[str, object]) -> None:
    store = Segments(real_frames("pong"), count=3)
    picks = np.arange(100, 260, dtype=np.int64)
    bad_at = {"first": 0, "middle": 77, "last": 159}[where]
    frame = picks[bad_at]
    store.contents[store.segments[frame]][store.offsets[frame] + store.lengths[frame] // 2] ^= 0x10
    assert store.decode(picks, **path)[0] == bad_at


@pytest.mark.parametrize("path", PATHS)
def test_a_frame_read_at_the_wrong_step_reports_that_frame(path: dict[str, object]) -> None:
    store = Segments(real_frames("mspacman"), count=2)
    picks = np.arange(64, dtype=np.int64)
    store.steps[picks[41]] += 2000  # the slot now holds a later frame
    assert store.decode(picks, **path)[0] == 41


@pytest.mark.parametrize("path", PATHS)
def test_a_truncated_length_reports_that_frame(path: dict[str, object]) -> None:
    store = Segments(random_frames(64, seed=7), count=2)
    picks = np.arange(64, dtype=np.int64)
    store.lengths[picks[50]] -= 1
    assert store.decode(picks, **path)[0] == 50


@pytest.mark.parametrize("path", PATHS)
def test_a_range_outside_its_segment_reports_that_frame(path: dict[str, object]) -> None:
    store = Segments(random_frames(30, seed=8), count=3)
    picks = np.arange(30, dtype=np.int64)
    store.offsets[picks[20]] = len(store.contents[store.segments[20]]) - 3
    store.offsets[picks[25]] = -1
    store.lengths[picks[28]] = -5
    assert store.decode(picks, **path)[0] == 20
    assert store.decode(picks[21:], **path)[0] == 4
    assert store.decode(picks[26:], **path)[0] == 2


@pytest.mark.parametrize("path", PATHS)
def test_a_checksum_that_matches_bytes_of_the_wrong_size_reports_that_frame(path: dict[str, object]) -> None:
    store = Segments(random_frames(8, seed=9))
    small = np.zeros((8, 84, 83), np.uint8)  # every frame decodes to one row too many for this out
    assert store.decode(np.arange(8, dtype=np.int64), out=small, **path)[0] == 0


@pytest.mark.parametrize("path", PATHS)
def test_the_first_of_several_bad_frames_is_reported(path: dict[str, object]) -> None:
    store = Segments(real_frames("pong"), count=2)
    picks = np.arange(300, dtype=np.int64)
    for i in (250, 131, 132, 290):
        store.checksums[picks[i]] ^= 1
    assert store.decode(picks, **path)[0] == 131


# -- arguments -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_a_segment_outside_views_is_a_value_error(path: dict[str, object]) -> None:
    store = Segments(random_frames(6, seed=10), count=2)
    store.segments[4] = 2
    with pytest.raises(ValueError, match=r"^segments\[4\] is 2; expected 0 <= segment < 2 \(len\(views\)\)$"):
        store.decode(np.arange(6, dtype=np.int64), **path)


def test_out_of_the_wrong_dtype_is_a_type_error() -> None:
    store = Segments(random_frames(2, seed=11))
    with pytest.raises(TypeError, match=r"^out must be a numpy uint8 array; got ndarray float32$"):
        store.decode(np.arange(2, dtype=np.int64), out=np.zeros((2, 84, 84), np.float32))  # type: ignore[arg-type]


def test_arrays_of_another_length_than_out_are_a_value_error() -> None:
    store = Segments(random_frames(3, seed=12))
    with pytest.raises(ValueError, match=r"^segments has shape \(3,\); expected \(2,\) for out of shape \(2, 84, 84\)$"):
        store.decode(np.arange(3, dtype=np.int64), out=np.zeros((2, 84, 84), np.uint8))


def test_a_non_contiguous_out_is_a_value_error() -> None:
    store = Segments(random_frames(2, seed=13))
    out = np.zeros((2, 84, 168), np.uint8)[:, :, ::2]
    with pytest.raises(ValueError, match=r"^out must be a writeable C-contiguous"):
        store.decode(np.arange(2, dtype=np.int64), out=out)


def test_asking_for_the_extension_when_it_is_not_built_is_a_value_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "_lz4batch", None)  # as extensions.load leaves it without a build
    store = Segments(random_frames(2, seed=14))
    with pytest.raises(ValueError, match=r"^accelerated=True but mmreplay._lz4batch is not built"):
        store.decode(np.arange(2, dtype=np.int64), accelerated=True)


# -- checksums of every length, and the frame-table fast path ----------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_checksums_of_payloads_of_every_length_and_alignment_are_zlibs(path: dict[str, object]) -> None:
    # The extension folds 16 bytes at a time from 64 bytes on: lengths around each multiple of 16
    # and odd starting offsets exercise its tails.
    rng = np.random.default_rng(15)
    for size in [*range(1, 200), 255, 256, 257, 1000, 4095]:
        frame = rng.integers(0, 256, (1, size), dtype=np.uint8)
        payload = codec.compress(frame)
        offset = int(rng.integers(0, 16))
        view = memoryview(bytes(offset) + payload)
        step = int(rng.integers(0, 2**40))
        arrays = [np.array([value], dtype) for value, dtype in [(0, np.int64), (offset, np.int64),
                  (len(payload), np.int64), (codec.checksum(payload, step), np.uint32), (step, np.int64)]]
        out = np.zeros((1, size), np.uint8)
        assert codec.decode_batch(*arrays, out, views=[view], **path) == -1, size  # type: ignore[arg-type]
        assert out.tobytes() == frame.tobytes()
        arrays[3] ^= np.uint32(1 << (size % 32))
        assert codec.decode_batch(*arrays, out, views=[view], **path) == 0, size  # type: ignore[arg-type]


# Frame table entries of format version 4 with a u4 and with a u2 length (frames.frame_entries.frame_entry), and the
# layout of each as the compiled read takes it (_c/ring/frame_table.h, EntryLayout): size, offsets of position,
# length, checksum and prev_delta, length's width, position's, the link's width and its prev_delta bits, and
# no ref_delta; and format version 5's entries (position's low 32 bits, prev_delta packed in 1 to 3 bytes).
ENTRIES = {
    width: np.dtype([("position", "<u8"), ("length", f"<u{width}"), ("checksum", "<u4"), ("prev_delta", "<u4")])
    for width in (4, 2)
}
LAYOUTS = {4: (20, 0, 8, 12, 16, 4, 8, 4, 32, 0, 0, 0, 0), 2: (18, 0, 8, 10, 14, 2, 8, 4, 32, 0, 0, 0, 0)}
MULTIPLIER = 2654435761
PACKED = 5  # ``length_bytes`` of a Table of format version 5's entries


class Table:
    """Frames in segments of ``segment_bytes`` located by a ring-shaped table, as a frame ring keeps them:
    frame step s at slot s % slots, seeded with s * MULTIPLIER + prev_delta."""

    def __init__(
        self, frames: npt.NDArray[np.uint8], *, first_step: int, slots: int, segment_bytes: int, length_bytes: int = 4
    ) -> None:
        self.frames = frames
        self.steps = np.arange(first_step, first_step + len(frames), dtype=np.int64)
        packed = EntryFormat(frames[0].nbytes, frame_slots=slots, version=5, max_distance=None, extra=0)
        self.table = np.zeros(slots, packed.dtype if length_bytes == PACKED else ENTRIES[length_bytes])
        self.layout = packed.layout if length_bytes == PACKED else LAYOUTS[length_bytes]
        self.segment_bytes = segment_bytes
        contents: dict[int, bytearray] = {}
        position = 7 + segment_bytes * 3  # segments 0-2 hold nothing this table needs
        for step, frame in zip(self.steps.tolist(), frames):
            payload = codec.compress(frame)
            if position % segment_bytes + len(payload) > segment_bytes:
                position += segment_bytes - position % segment_bytes
            segment, offset = divmod(position, segment_bytes)
            contents.setdefault(segment, bytearray(segment_bytes))[offset : offset + len(payload)] = payload
            prev_delta = step % 3
            seed = (step * MULTIPLIER + prev_delta) & 0xFFFFFFFF
            if length_bytes == PACKED:
                packed.pack_into(self.table.view(np.uint8).data, (step % slots) * packed.size, position,
                                 len(payload), codec.checksum(payload, seed), prev_delta, 0)
            else:
                self.table[step % slots] = (position, len(payload), codec.checksum(payload, seed), prev_delta)
            position += len(payload)
        self.bytes_written = position
        self.base = min(contents)
        self.views = [memoryview(contents[k]) for k in range(self.base, max(contents) + 1)]

    def decode(self, picks: npt.NDArray[np.int64], **changes: object) -> tuple[bool, npt.NDArray[np.uint8]]:
        out = np.zeros((len(picks), *self.frames.shape[1:]), np.uint8)
        arguments: dict[str, object] = dict(
            layout=self.layout, seed_multiplier=MULTIPLIER, segment_bytes=self.segment_bytes,
            bytes_written=self.bytes_written, views=self.views, base=self.base, limit=4,
        )
        arguments.update(changes)
        return decode_from_table(self.table, self.steps[picks], out, **arguments), out  # type: ignore[arg-type]


def decode_from_table(
    table: npt.NDArray[np.void], frame_steps: npt.NDArray[np.int64], out: npt.NDArray[np.uint8], *, layout: tuple,
    seed_multiplier: int, segment_bytes: int, bytes_written: int, views: list[memoryview], base: int, limit: int,
) -> bool:
    """A frame ring's compiled read (``FrameRing.decode_compiled``) of a table made here: its geometry made
    from the layout, then ``decode_entries`` of the ``ring`` argument."""
    assert _lz4batch is not None
    geometry = _lz4batch.ring_geometry(layout, len(table), seed_multiplier, segment_bytes, out[0].nbytes)
    ring = (geometry, table, bytes_written, views, base)
    return bool(_lz4batch.decode_entries(ring, np.ascontiguousarray(frame_steps, np.int64), out,
                                         codec.batch_threads(out.nbytes, limit)))


@pytest.mark.skipif(not codec.ACCELERATED, reason=NOT_BUILT)
@pytest.mark.parametrize("game", ["pong", "mspacman"])
@pytest.mark.parametrize("length_bytes", [4, 2, PACKED])
def test_frames_located_through_a_table_decode_to_the_original_pixels(game: str, length_bytes: int) -> None:
    frames = real_frames(game)
    table = Table(
        frames, first_step=2**33 - 50, slots=len(frames) + 13, segment_bytes=40_000, length_bytes=length_bytes
    )
    assert len(table.views) > 2
    picks = np.random.default_rng(16).choice(len(frames), 160)
    ok, out = table.decode(picks)
    assert ok
    np.testing.assert_array_equal(out, frames[picks])


@pytest.mark.skipif(not codec.ACCELERATED, reason=NOT_BUILT)
@pytest.mark.parametrize("length_bytes", [4, 2, PACKED])
def test_the_table_fast_path_declines_every_frame_it_cannot_vouch_for(length_bytes: int) -> None:
    frames = random_frames(40, seed=17)
    table = Table(frames, first_step=100, slots=64, segment_bytes=20_000, length_bytes=length_bytes)
    picks = np.arange(40, dtype=np.int64)
    assert table.decode(picks)[0]
    assert not table.decode(picks, bytes_written=table.bytes_written - 1)[0]  # the newest frame is past it
    assert not table.decode(picks, base=table.base + 1)[0]  # a frame's segment is below the views
    assert not table.decode(picks, views=table.views[:-1])[0]  # or above them
    assert not table.decode(picks, seed_multiplier=MULTIPLIER + 1)[0]  # wrong seeds fail the checksum
    with pytest.raises(ValueError, match="entry layout"):
        table.decode(picks, layout=(*table.layout[:5], 3, *table.layout[6:]))  # a length is 2 or 4 bytes wide
    slot = table.steps[25] % len(table.table)
    position = (table.bytes_written - ((table.bytes_written - int(table.table["position"][slot])) & 0xFFFFFFFF)
                if length_bytes == PACKED else int(table.table["position"][slot]))
    table.views[position // table.segment_bytes - table.base][position % table.segment_bytes + 3] ^= 0x40
    assert not table.decode(picks)[0]
    assert table.decode(picks[26:])[0]
    # a position past everything written (a low 32 bits beyond bytes_written lead 2**32 further back)
    table.table["position"][table.steps[30] % len(table.table)] |= np.array(1 << 31).astype(table.table["position"].dtype)
    assert not table.decode(picks[26:])[0]


def test_checksum_is_zlibs_crc32_for_every_length_and_seed() -> None:
    rng = np.random.default_rng(19)
    data = rng.integers(0, 256, 700, dtype=np.uint8).tobytes()
    for length in range(0, 600):
        for step in (0, 1, 2**32 - 1, 2**32 + 5, int(rng.integers(0, 2**62))):
            start = length % 13
            payload = data[start : start + length]
            assert codec.checksum(payload, step) == zlib.crc32(payload, step & 0xFFFFFFFF), (length, step)
        assert codec.checksum(memoryview(data)[start : start + length], 3) == zlib.crc32(data[start : start + length], 3)


@pytest.mark.skipif(not codec.ACCELERATED, reason=NOT_BUILT)
def test_batches_decoded_at_once_from_several_threads_each_get_their_own_frames() -> None:
    """The extension's helper threads take the newest posted batch: batches posted by four Python
    threads at once replace one another there, and each must still come back whole and right."""
    segments = Segments(real_frames("pong"), count=2)
    failures: list[str] = []

    def decode_many(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(60):
            picks = rng.choice(len(segments.frames), int(rng.integers(8, 200)))
            bad, out = segments.decode(picks, accelerated=True, threads=int(rng.integers(2, 5)))
            if bad != -1 or not np.array_equal(out, segments.frames[picks]):
                failures.append(f"thread {seed}: bad={bad}")

    threads = [threading.Thread(target=decode_many, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


@pytest.mark.skipif(not codec.ACCELERATED, reason=NOT_BUILT)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_decodes_on_two_threads_after_its_parent_did() -> None:
    """A child has none of its parent's helper threads (it starts its own, or decodes alone): its
    two-thread decode must finish, and be right."""
    segments = Segments(random_frames(64, seed=21))
    picks = np.arange(64, dtype=np.int64)
    assert segments.decode(picks, accelerated=True, threads=2)[0] == -1  # the parent's helpers exist now
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only when its two-thread decode is right
        bad, out = segments.decode(picks, accelerated=True, threads=2)
        os._exit(0 if bad == -1 and np.array_equal(out, segments.frames) else 1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.01)
    os.kill(pid, 9)
    pytest.fail("the forked child never finished its decode (waiting on its parent's helpers)")


@pytest.mark.skipif(not codec.ACCELERATED, reason=NOT_BUILT)
@settings(max_examples=400, deadline=None)
@given(
    frame_nbytes=st.integers(1, 300),
    literals=st.integers(0, 600),
    token_low=st.integers(0, 15),
    trailing=st.binary(max_size=3),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_block_of_literals_only_decodes_exactly_where_python_lz4_decodes_it(
    frame_nbytes: int, literals: int, token_low: int, trailing: bytes, seed: int
) -> None:
    """The extension copies a block of literals only (CartPole's frames compress to one) without liblz4's
    decoder: it must accept exactly the blocks python-lz4 accepts, with the same bytes, whatever the
    token's low nibble, the length's extra bytes, the literal count and bytes after them. Each block's
    CRC matches, so that the decode alone decides."""
    rng = np.random.default_rng(seed)
    header = bytes([min(literals, 15) << 4 | token_low])
    if literals >= 15:
        rest = literals - 15
        header += b"\xff" * (rest // 255) + bytes([rest % 255])
    payload = header + rng.integers(0, 256, literals, dtype=np.uint8).tobytes() + trailing
    results = []
    for accelerated in (True, False):
        arrays = [np.array([value], dtype) for value, dtype in [(0, np.int64), (0, np.int64), (len(payload), np.int64),
                  (codec.checksum(payload, seed), np.uint32), (seed, np.int64)]]
        out = np.zeros((1, frame_nbytes), np.uint8)
        bad = codec.decode_batch(*arrays, out, views=[memoryview(payload)], accelerated=accelerated)  # type: ignore[arg-type]
        results.append((bad, out.tobytes() if bad == -1 else None))
    assert results[0] == results[1]
    if literals == frame_nbytes and not trailing:
        assert results[0] == (-1, payload[len(header) :])
