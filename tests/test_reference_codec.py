"""reference_codec: frames compressed against earlier frames of their env (format version 6: changed
units, stock lz4 calls) decode bit for bit, on every path.

Paths: "fallback" (python-lz4, always) and "extension" (mmreplay._lz4batch, skipped with the reason when
it is not built). A ``Stream`` keeps one env's frames as a frame ring would (blocks with their CRC-32
seeded with their frame step, a ``ref_delta`` per frame) and rebuilds them as a read does
(``reference_codec.rebuild``); the writer's groups are checked against ``EnvReferences`` (Python) and
the extension's (``_lz4batch.reference_groups``).
"""

from __future__ import annotations

import functools
import math
import zlib

import lz4.block
import numpy as np
import numpy.typing as npt
import pytest
from atari_data import load_stream
from extension_status import absent_reason
from hypothesis import given, settings
from hypothesis import strategies as st

from mmreplay.frames import lz4_codec, reference_codec
from mmreplay.frames.frame_entries import worst_block
from mmreplay.frames.reference_scheme import EnvReferences, ReferenceScheme

NOT_BUILT = absent_reason("_lz4batch")
needs_extension = pytest.mark.skipif(not reference_codec.ACCELERATED, reason=NOT_BUILT)
_lz4batch = reference_codec._lz4batch
# Byte-identical blocks need the system's liblz4 (the extension's) and python-lz4's bundled one alike.
SAME_LZ4 = _lz4batch is not None and _lz4batch.LZ4_VERSION == lz4.library_version_number()

PATHS = [
    pytest.param(False, id="fallback"),
    pytest.param(True, id="extension", marks=needs_extension),
]
TREE = ReferenceScheme(group_size=64, branching=8)
SCHEMES = [
    pytest.param(TREE, id="tree-64-8"),
    pytest.param(ReferenceScheme(group_size=8, branching=8), id="star-8"),
    pytest.param(ReferenceScheme(group_size=256, branching=2), id="tree-256-2"),
]


@functools.cache
def _load(game: str) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.bool_]]:
    data = load_stream(game, ("frames", "episode_start"), 900)  # an episode boundary or more
    frames, starts = data["frames"], data["episode_start"]
    frames.flags.writeable = False
    return frames, starts


def real_frames(game: str) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.bool_]]:
    return _load(game)


def sparse_frames(count: int, seed: int, shape: tuple[int, ...] = (84, 84)) -> npt.NDArray[np.uint8]:
    """Frames that drift slowly: a constant background with a few noisy pixels changing each frame."""
    rng = np.random.default_rng(seed)
    frames = np.full((count, *shape), 87, np.uint8)
    for i in range(1, count):
        frames[i] = frames[i - 1]
        frames[i][rng.random(shape) < 0.01] = rng.integers(0, 256, dtype=np.uint8)
    return frames


class Stream:
    """One env's frames compressed with a scheme and kept as a frame ring keeps them: frame i has step
    ``first_step + i``, a block checked against its CRC-32 seeded with its step, and a ``ref_delta``."""

    def __init__(
        self, frames: npt.NDArray[np.uint8], scheme: ReferenceScheme, *, starts: npt.NDArray[np.bool_] | None = None,
        accelerated: bool = reference_codec.ACCELERATED, first_step: int = 0,
    ) -> None:
        references = EnvReferences(scheme)
        self.frames, self.scheme, self.first_step = frames, scheme, first_step
        self.deltas = np.zeros(len(frames), np.int64)
        self.payloads: list[bytes | None] = []
        for i, frame in enumerate(frames):
            if starts is not None and starts[i]:
                references.restart()
            delta, reference = references.assign(first_step + i, frame)
            self.deltas[i] = delta
            self.payloads.append(reference_codec.compress_against(frame, reference, accelerated=accelerated))
        self.checksums = [zlib.crc32(p, (first_step + i) & 0xFFFFFFFF) for i, p in enumerate(self.payloads)]

    def ref_deltas_of(self, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return self.deltas[steps - self.first_step]

    def locate(self, step: int) -> tuple[bytes, int] | None:
        i = step - self.first_step
        if not 0 <= i < len(self.payloads) or self.payloads[i] is None:
            return None
        payload = self.payloads[i]
        assert payload is not None
        if zlib.crc32(payload, step & 0xFFFFFFFF) != self.checksums[i]:
            return None
        return payload, (step - int(self.deltas[i]) if self.deltas[i] else -1)

    def decode(self, steps: npt.ArrayLike, *, accelerated: bool) -> tuple[npt.NDArray[np.uint8], tuple | None]:
        steps = np.asarray(steps, np.int64)
        out = np.full((steps.size, *self.frames.shape[1:]), 0x5A, np.uint8)
        shape = self.frames.shape[1:]

        def apply_block(payload: bytes | memoryview, reference: bytes) -> bytes:
            return reference_codec.apply(payload, reference, shape, accelerated=accelerated)

        failed = reference_codec.rebuild(steps.reshape(-1).tolist(), out, locate=self.locate, apply_block=apply_block,
                                         depth=self.scheme.depth)
        return out.reshape(*steps.shape, *shape), failed

    def expected(self, steps: npt.ArrayLike) -> npt.NDArray[np.uint8]:
        return self.frames[np.asarray(steps) - self.first_step]


def sampled_stacks(count: int, stream_length: int, seed: int) -> npt.NDArray[np.int64]:
    """(count, 5) frame steps: obs and next_obs of stack 4, as a sampled batch asks for them."""
    newest = np.random.default_rng(seed).integers(4, stream_length, count)
    return newest[:, None] + np.arange(-4, 1)


# -- round trips -------------------------------------------------------------------------------------


@pytest.mark.parametrize("accelerated", PATHS)
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("game", ["pong", "breakout", "mspacman"])
def test_real_frames_decode_bit_for_bit(game: str, scheme: ReferenceScheme, accelerated: bool) -> None:
    frames, starts = real_frames(game)
    stream = Stream(frames, scheme, starts=starts, accelerated=accelerated)
    steps = sampled_stacks(64, len(frames), seed=1)
    out, failed = stream.decode(steps, accelerated=accelerated)
    assert failed is None
    np.testing.assert_array_equal(out, stream.expected(steps))


@pytest.mark.parametrize("accelerated", PATHS)
def test_frames_decode_in_any_order_with_repeats(accelerated: bool) -> None:
    frames, starts = real_frames("mspacman")
    stream = Stream(frames, TREE, starts=starts, accelerated=accelerated)
    steps = np.random.default_rng(2).integers(0, len(frames), 300)
    out, failed = stream.decode(steps, accelerated=accelerated)
    assert failed is None
    np.testing.assert_array_equal(out, stream.expected(steps))


@pytest.mark.parametrize("accelerated", PATHS)
@pytest.mark.parametrize(
    "shape", [(84, 84), (96, 96, 3), (210, 160, 3), (7, 13), (128,), (64,), (2, 3, 8), (67, 67)], ids=str
)
def test_frames_of_any_shape_round_trip(shape: tuple[int, ...], accelerated: bool) -> None:
    frames = sparse_frames(40, seed=3, shape=shape)
    stream = Stream(frames, ReferenceScheme(group_size=16, branching=2), accelerated=accelerated)
    out, failed = stream.decode(np.arange(40), accelerated=accelerated)
    assert failed is None
    np.testing.assert_array_equal(out, frames)


@settings(max_examples=200, deadline=None)
@given(
    shape=st.sampled_from([(84, 84), (12, 7), (3, 40), (50,), (9, 9, 3)]),
    density=st.sampled_from([0.0, 0.001, 0.05, 0.5, 1.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_frame_against_any_reference_round_trips_on_both_paths(shape: tuple[int, ...], density: float, seed: int) -> None:
    """Any frame against any reference of its shape: from identical (no changed unit) to every unit changed
    (noise); each path decodes what either path encoded."""
    rng = np.random.default_rng(seed)
    reference = rng.integers(0, 256, shape, dtype=np.uint8)
    frame = reference.copy()
    changed = rng.random(shape) < density
    frame[changed] = rng.integers(0, 256, int(changed.sum()), dtype=np.uint8)
    encoders = [False] + ([True] if reference_codec.ACCELERATED else [])
    for encoded_by in encoders:
        block = reference_codec.compress_against(frame, reference, accelerated=encoded_by)
        assert len(block) <= worst_block(math.prod(shape), extra=reference_codec.block_extra(shape))
        for decoded_by in encoders:
            again = reference_codec.apply(block, reference, shape, accelerated=decoded_by)
            assert again == frame.tobytes(), (encoded_by, decoded_by)


@needs_extension
@pytest.mark.skipif(not SAME_LZ4, reason="python-lz4's bundled liblz4 differs from the system's")
@pytest.mark.parametrize("game", ["pong", "mspacman"])
def test_the_extension_and_python_lz4_write_the_same_blocks(game: str) -> None:
    """Both make the same stock lz4 calls (LZ4_loadDict of the reference, then LZ4_compress_fast_continue of
    the changed units' numbers and bytes, with no dictionary loaded below DICT_MIN_BYTES): with one
    liblz4, the same bytes."""
    frames, _ = real_frames(game)
    for i in range(1, 200):
        compiled = reference_codec.compress_against(frames[i], frames[i - 1], accelerated=True)
        assert compiled == reference_codec.compress_against(frames[i], frames[i - 1], accelerated=False), i


@pytest.mark.parametrize("accelerated", PATHS)
@pytest.mark.parametrize("changed", [3, 30, 120], ids=["few-units", "some-units", "many-units"])
def test_a_dependent_frame_takes_its_reference_as_dictionary_from_dict_min_bytes_on(accelerated: bool,
                                                                                    changed: int) -> None:
    """Below DICT_MIN_BYTES of numbers and changed units the block is those bytes compressed alone (no
    dictionary loaded), from it compressed against the reference; both decode with it as dictionary."""
    if accelerated and not SAME_LZ4:
        pytest.skip("python-lz4's bundled liblz4 differs from the system's")
    reference = sparse_frames(1, seed=11)[0]
    frame = reference.copy().reshape(-1, 7)
    rows = np.random.default_rng(changed).choice(len(frame), changed, replace=False)
    frame[rows] = reference.reshape(-1, 7)[(rows + 5) % len(frame)] ^ 1  # a sprite's bytes, moved
    frame = frame.reshape(reference.shape)
    block = reference_codec.compress_against(frame, reference, accelerated=accelerated)
    payload = lz4.block.decompress(block, uncompressed_size=1 << 16, dict=reference.tobytes())
    if len(payload) < reference_codec.DICT_MIN_BYTES:
        assert block == lz4.block.compress(payload, store_size=False)
        assert lz4.block.decompress(block, uncompressed_size=1 << 16) == payload
    else:
        assert block == lz4.block.compress(payload, store_size=False, dict=reference.tobytes())
    assert reference_codec.apply(block, reference, frame.shape, accelerated=accelerated) == frame.tobytes()


@needs_extension
def test_the_compiled_encoder_and_python_share_dict_min_bytes() -> None:
    assert _lz4batch.REFERENCE_DICT_MIN_BYTES == reference_codec.DICT_MIN_BYTES


@needs_extension
def test_dependent_frames_are_much_smaller_than_plain_lz4() -> None:
    for game, most in (("pong", 0.4), ("breakout", 0.3), ("mspacman", 0.3)):
        frames, starts = real_frames(game)
        stream = Stream(frames, ReferenceScheme(group_size=256, branching=2), starts=starts)
        dense = sum(len(p) for p in stream.payloads)
        plain = sum(len(lz4_codec.compress(frame)) for frame in frames)
        assert dense < most * plain, (game, dense, plain)


def test_units_divide_the_row_from_seven_bytes_on() -> None:
    assert reference_codec.unit_nbytes((84, 84)) == 7  # 84 bytes a row: 12 units
    assert reference_codec.unit_nbytes((210, 160, 3)) == 8  # 480 a row
    assert reference_codec.unit_nbytes((64,)) == 8
    assert reference_codec.unit_nbytes((67, 67)) == 67  # a prime row: the row itself
    assert reference_codec.unit_nbytes((5, 3)) == 3  # a row shorter than 7 bytes: the row
    assert reference_codec.row_nbytes((9, 9, 3)) == 27 and reference_codec.unit_nbytes((9, 9, 3)) == 9


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_frame_equal_to_its_reference_is_a_few_bytes(accelerated: bool) -> None:
    frame = sparse_frames(1, seed=4)[0]
    block = reference_codec.compress_against(frame, frame.copy(), accelerated=accelerated)
    assert len(block) <= 4
    assert reference_codec.apply(block, frame, frame.shape, accelerated=accelerated) == frame.tobytes()


@pytest.mark.parametrize("scheme", [*SCHEMES, ReferenceScheme(10, 3), ReferenceScheme(1, 2)])
def test_env_references_follow_the_scheme_arithmetic(scheme: ReferenceScheme) -> None:
    references = EnvReferences(scheme)
    frame = np.zeros(4, np.uint8)
    places = np.arange(3 * scheme.group_size) % scheme.group_size
    expected = np.where(places == 0, 0, places - scheme.reference_places(places))
    got = [references.assign(step, frame)[0] for step in range(3 * scheme.group_size)]
    assert got == expected.tolist()


def test_the_tree_scheme_references_the_key_or_the_last_multiple_of_eight() -> None:
    places = TREE.reference_places(np.arange(64))
    assert places[0] == -1
    assert places[1:8].tolist() == [0] * 7
    assert places[[8, 16, 56]].tolist() == [0, 0, 0]
    assert places[9:16].tolist() == [8] * 7
    assert places[57:64].tolist() == [56] * 7
    assert TREE.depth == 2


def test_a_restart_makes_the_next_frame_a_key_frame_and_references_never_cross_it() -> None:
    references = EnvReferences(TREE)
    frames = sparse_frames(30, seed=5)
    deltas = []
    for step, frame in enumerate(frames):
        if step == 13:
            references.restart()  # an episode start
        deltas.append(references.assign(step, frame)[0])
    assert deltas[0] == 0 and deltas[13] == 0
    assert all(step - delta >= 13 for step, delta in enumerate(deltas) if step >= 13)


def test_the_reference_returned_is_the_frame_at_the_reference_step() -> None:
    references = EnvReferences(TREE)
    frames = sparse_frames(150, seed=6)
    for step, frame in enumerate(frames):
        delta, reference = references.assign(step, frame)
        assert (reference is None) == (delta == 0)
        if reference is not None:
            np.testing.assert_array_equal(reference, frames[step - delta])


def test_frames_interleaved_with_other_envs_reference_their_own_env() -> None:
    envs = [EnvReferences(TREE) for _ in range(3)]
    owner = {}
    for step in range(300):
        env = step % 3
        delta, _ = envs[env].assign(step, np.zeros(2, np.uint8))
        owner[step] = env
        assert owner[step - delta] == env


def test_a_group_that_would_span_more_than_max_distance_starts_over() -> None:
    references = EnvReferences(ReferenceScheme(group_size=64, branching=8, max_distance=100))
    frame = np.zeros(2, np.uint8)
    assert references.assign(0, frame)[0] == 0
    assert references.assign(60, frame)[0] == 60
    assert references.assign(101, frame)[0] == 0  # 101 steps from the key frame: a new group
    assert references.assign(102, frame)[0] == 1


def test_a_group_whose_key_frame_is_older_than_the_frame_tail_starts_over() -> None:
    references = EnvReferences(TREE)
    frame = np.zeros(2, np.uint8)
    assert references.assign(10, frame, frame_tail=0)[0] == 0
    assert references.assign(11, frame, frame_tail=10)[0] == 1  # the key frame is still kept
    assert references.assign(30, frame, frame_tail=11)[0] == 0  # it may be freed: a new key frame
    assert references.assign(31, frame, frame_tail=30)[0] == 1


def test_assigning_a_step_that_is_not_later_is_a_value_error() -> None:
    references = EnvReferences(TREE)
    references.assign(5, np.zeros(2, np.uint8))
    with pytest.raises(ValueError, match=r"^frame_step is 5; expected more than this env's last one, 5$"):
        references.assign(5, np.zeros(2, np.uint8))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"group_size": 0}, ValueError, r"group_size is 0; expected 1 to 65536 \(1: every frame is a key frame\)"),
        ({"branching": 1}, ValueError, r"branching is 1; expected 2 to group_size \(64\)"),
        ({"branching": 65}, ValueError, r"branching is 65; expected 2 to group_size \(64\)"),
        ({"max_distance": 0}, ValueError, r"max_distance is 0; expected 1 to 65535 frame steps \(16-bit ref_delta\)"),
        ({"max_distance": 65536}, ValueError, r"max_distance is 65536; expected 1 to 65535 frame steps \(16-bit ref_delta\)"),
        ({"group_size": 8.0}, TypeError, r"group_size must be an int; got float 8\.0"),
        ({"group_size": 2**40, "branching": 2**40}, ValueError,
         r"group_size is 1099511627776; expected 1 to 65536 \(1: every frame is a key frame\)"),
    ],
)
def test_a_bad_scheme_is_refused_with_its_value(kwargs: dict[str, object], error: type, message: str) -> None:
    with pytest.raises(error, match=f"^{message}$"):
        ReferenceScheme(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("accelerated", PATHS)
def test_frames_from_the_reference_tail_on_decode_after_older_ones_are_gone(accelerated: bool) -> None:
    frames, starts = real_frames("pong")
    stream = Stream(frames, TREE, starts=starts, accelerated=accelerated)
    oldest = 500  # the oldest frame a stored transition needs
    tail = reference_codec.reference_tail(oldest, len(frames), ref_deltas_of=stream.ref_deltas_of, scheme=TREE)
    assert tail <= oldest and oldest - tail < TREE.group_size
    stream.payloads[:tail] = [None] * tail  # freed: any read of them fails
    steps = np.arange(oldest, len(frames))
    out, failed = stream.decode(steps, accelerated=accelerated)
    assert failed is None
    np.testing.assert_array_equal(out, frames[oldest:])
    if tail < oldest:
        stream.payloads[tail] = None  # one frame more would be one too many
        assert stream.decode(steps, accelerated=accelerated)[1] is not None


# -- corruption: the frame at fault is named ---------------------------------------------------------


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_flipped_byte_in_a_requested_frame_names_that_frame(accelerated: bool) -> None:
    frames, _ = real_frames("pong")
    stream = Stream(frames[:200], TREE, accelerated=accelerated)
    damaged = bytearray(stream.payloads[70])  # type: ignore[arg-type]
    damaged[len(damaged) // 2] ^= 0x40
    stream.payloads[70] = bytes(damaged)
    assert stream.decode([69, 71, 70], accelerated=accelerated)[1] == (2, 70, False)


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_damaged_key_frame_is_named_for_the_frames_that_need_it(accelerated: bool) -> None:
    frames, _ = real_frames("pong")
    stream = Stream(frames[:200], TREE, accelerated=accelerated)
    stream.checksums[64] ^= 1  # the key frame of places 64-127
    assert stream.decode([10, 70], accelerated=accelerated)[1] == (1, 64, False)


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_block_that_fits_its_checksum_but_does_not_decode_names_the_frame(accelerated: bool) -> None:
    frames, _ = real_frames("pong")
    stream = Stream(frames[:100], TREE, accelerated=accelerated)
    for garbage in (b"\xff" * 40, b"", stream.payloads[3][:5]):  # type: ignore[index]
        stream.payloads[9] = garbage
        stream.checksums[9] = zlib.crc32(garbage, 9)
        assert stream.decode([8, 9], accelerated=accelerated)[1] == (1, 9, False)


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_chain_deeper_than_the_scheme_is_damage(accelerated: bool) -> None:
    frames, _ = real_frames("pong")
    stream = Stream(frames[:100], TREE, accelerated=accelerated)
    stream.deltas[64] = 1  # the key frame 64 now names frame 63: frame 75 (-> 72 -> 64 -> 63 ...) is deeper
    stream.checksums[64] = zlib.crc32(stream.payloads[64], 64)  # type: ignore[arg-type]
    assert stream.decode([75], accelerated=accelerated)[1] == (0, 75, True)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300), seed=st.integers(0, 2**32 - 1))
def test_any_bytes_as_a_dependent_block_decode_or_are_refused_never_past_the_frame(data: bytes, seed: int) -> None:
    """Damaged or hostile blocks: whatever bytes a block holds, both paths give the same frame or refuse
    it with ValueError (the compiled one without writing past its buffers)."""
    reference = np.random.default_rng(seed).integers(0, 256, (12, 14), dtype=np.uint8)
    results = []
    for accelerated in [False] + ([True] if reference_codec.ACCELERATED else []):
        try:
            results.append(reference_codec.apply(data, reference, (12, 14), accelerated=accelerated))
        except ValueError:
            results.append(None)
    assert len(set(results)) == 1


@settings(max_examples=400, deadline=None)
@given(
    runs=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=8),
    count_off=st.sampled_from([0, 0, 0, -1, 1]), taken_off=st.sampled_from([0, 0, 0, -1, 1]),
    tail_off=st.sampled_from([0, 0, 0, -7, -1, 1, 7]), seed=st.integers(0, 2**32 - 1),
)
def test_any_runs_in_a_block_that_decodes_give_the_same_frame_or_refusal_on_both_paths(
    runs: list[tuple[int, int]], count_off: int, taken_off: int, tail_off: int, seed: int,
) -> None:
    """A block that lz4 decodes, its runs well formed or hostile (past the frame's 24 units, empty, counts
    that disagree with the runs or the bytes): the Python path parses the numbers at once, the compiled
    one by one; they give the same frame or both refuse it."""
    rng = np.random.default_rng(seed)
    reference = rng.integers(0, 256, (12, 14), dtype=np.uint8)  # 24 units of 7 bytes
    taken = sum(take for _, take in runs)
    numbers = [max(len(runs) + count_off, 0), max(taken + taken_off, 0)] + [n for run in runs for n in run]
    units = rng.integers(0, 256, max(7 * taken + tail_off, 0), dtype=np.uint8).tobytes()
    block = lz4.block.compress(b"".join(reference_codec._put(n) for n in numbers) + units, store_size=False)
    results = []
    for accelerated in [False] + ([True] if reference_codec.ACCELERATED else []):
        try:
            results.append(reference_codec.apply(block, reference, (12, 14), accelerated=accelerated))
        except ValueError:
            results.append(None)
    assert len(set(results)) == 1, results
    well_formed = numbers[:2] == [len(runs), taken] and len(units) == 7 * taken and all(take for _, take in runs)
    fits = sum(skip + take for skip, take in runs) <= 24
    assert (results[0] is not None) == (well_formed and fits)


def test_compress_against_checks_its_arguments() -> None:
    frame = np.zeros((8, 8), np.uint8)
    with pytest.raises(TypeError, match="frame must be a C-contiguous numpy uint8 array; got list"):
        reference_codec.compress_against([0] * 64, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"reference must be a uint8 array of the frame's shape \(8, 8\); got \(4, 4\)"):
        reference_codec.compress_against(frame, np.zeros((4, 4), np.uint8))


# -- the writer's groups: Python and compiled alike ---------------------------------------------------


@needs_extension
@settings(max_examples=60, deadline=None)
@given(
    scheme=st.sampled_from([TREE, ReferenceScheme(256, 2), ReferenceScheme(8, 8), ReferenceScheme(1, 2),
                            ReferenceScheme(10, 3, max_distance=25)]),
    events=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["frame"] * 8 + ["restart", "tail", "fail"])),
                    min_size=1, max_size=300),
)
def test_the_compiled_groups_assign_what_env_references_assigns(scheme: ReferenceScheme, events: list) -> None:
    """Three envs' frames interleaved, with episode restarts, a frame tail that moves and failed adds (their
    envs restarted): the extension's groups give every frame the ref_delta and the block EnvReferences
    and compress_against give it (the same block where both use one liblz4; one that decodes alike else)."""
    frames = sparse_frames(64, seed=7, shape=(12, 14))
    groups = _lz4batch.reference_groups(num_envs=3, group_size=scheme.group_size, branching=scheme.branching,
                                        max_distance=scheme.max_distance, frame_nbytes=168, row_nbytes=14, unit=7)
    envs = [EnvReferences(scheme) for _ in range(3)]
    step, tail, restart = 0, 0, [False] * 3
    for env, event in events:
        if event == "restart":
            restart[env] = True
            continue
        if event == "tail":
            tail = step
            continue
        if event == "fail":  # an add whose write failed: its envs start over
            _lz4batch.groups_restart(groups, [env])
            envs[env].forget()
            continue
        frame = frames[step % 64]
        payload, ref_delta = _lz4batch.groups_encode(groups, env, step, frame, restart[env], tail)
        if restart[env]:
            envs[env].restart()
        expected_delta, reference = envs[env].assign(step, frame, frame_tail=tail)
        assert ref_delta == expected_delta, (step, env)
        expected = reference_codec.compress_against(frame, reference)
        if SAME_LZ4 or reference is None:
            assert payload == expected
        else:
            assert reference_codec.apply(payload, reference, frame.shape) == frame.tobytes()
        restart[env] = False
        step += 1


