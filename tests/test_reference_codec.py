"""reference_codec: frames compressed against earlier frames decode bit for bit, on every path.

Paths: "fallback" (python-lz4, always) and "extension" (mmreplay._lz4ref, skipped with the reason when it
is not built). Frames are stored the way a frame ring would: payloads in a few segment buffers, each
with its CRC-32 seeded with its frame step, and a ``ref_delta`` per frame step.
"""

from __future__ import annotations

import functools
import zlib

import lz4.block
import numpy as np
import numpy.typing as npt
import pytest
from atari_data import load_stream
from extension_status import absent_reason
from hypothesis import given, settings
from hypothesis import strategies as st

from mmreplay.errors import CorruptStoreError
from mmreplay.frames import reference_codec
from mmreplay.frames.reference_codec import CorruptFrameError
from mmreplay.frames.reference_scheme import EnvReferences, ReferenceScheme

NOT_BUILT = absent_reason("_lz4ref")
needs_extension = pytest.mark.skipif(not reference_codec.ACCELERATED, reason=NOT_BUILT)

PATHS = [
    pytest.param(False, id="fallback"),
    pytest.param(True, id="extension", marks=needs_extension),
]
TREE = ReferenceScheme(group_size=64, branching=8)
SCHEMES = [
    pytest.param(TREE, id="tree-64-8"),
    pytest.param(ReferenceScheme(group_size=8, branching=8), id="star-8"),
    pytest.param(ReferenceScheme(group_size=16, branching=2), id="tree-16-2"),
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
    """One env's frames compressed with a scheme and laid out like a frame ring (several segments).

    Frame i has step ``first_step + i``; its columns are kept at index i.
    """

    def __init__(
        self,
        frames: npt.NDArray[np.uint8],
        scheme: ReferenceScheme,
        *,
        starts: npt.NDArray[np.bool_] | None = None,
        segments: int = 3,
        accelerated: bool = reference_codec.ACCELERATED,
        first_step: int = 0,
    ) -> None:
        references = EnvReferences(scheme)
        self.frames, self.scheme, self.first_step = frames, scheme, first_step
        self.deltas = np.zeros(len(frames), np.int64)
        payloads = []
        for i, frame in enumerate(frames):
            if starts is not None and starts[i]:
                references.restart()
            delta, reference = references.assign(first_step + i, frame)
            self.deltas[i] = delta
            payloads.append(reference_codec.compress_against(frame, reference, accelerated=accelerated))
        self.segments = np.arange(len(frames), dtype=np.int64) % segments
        self.offsets = np.zeros(len(frames), np.int64)
        self.lengths = np.array([len(p) for p in payloads], np.int64)
        steps = np.arange(first_step, first_step + len(frames))
        self.checksums = np.array([zlib.crc32(p, s & 0xFFFFFFFF) for p, s in zip(payloads, steps.tolist())], np.uint32)
        self.contents = [bytearray(b"\xa5" * 5) for _ in range(segments)]  # frames start unaligned
        for i, payload in enumerate(payloads):
            self.offsets[i] = len(self.contents[self.segments[i]])
            self.contents[self.segments[i]] += payload
        self.views = [memoryview(content) for content in self.contents]

    def ref_deltas_of(self, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return self.deltas[steps - self.first_step]

    def locate(self, steps: npt.NDArray[np.int64]):  # type: ignore[no-untyped-def]
        i = steps - self.first_step
        return self.segments[i], self.offsets[i], self.lengths[i], self.checksums[i], steps

    def decode(self, steps: npt.ArrayLike, *, accelerated: bool) -> npt.NDArray[np.uint8]:
        steps = np.asarray(steps, np.int64)
        out = np.full((*steps.shape, *self.frames.shape[1:]), 0x5A, np.uint8)
        reference_codec.decode_frames(
            steps, out.reshape(-1, *self.frames.shape[1:]), ref_deltas_of=self.ref_deltas_of, locate=self.locate,
            views=self.views, depth=self.scheme.depth, accelerated=accelerated,
        )  # fmt: skip
        return out

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
    steps = sampled_stacks(32, len(frames), seed=1)
    np.testing.assert_array_equal(stream.decode(steps, accelerated=accelerated), stream.expected(steps))
    everything = np.arange(len(frames))
    np.testing.assert_array_equal(stream.decode(everything, accelerated=accelerated), frames)


@pytest.mark.parametrize("accelerated", PATHS)
def test_frames_decode_in_any_order_with_repeats(accelerated: bool) -> None:
    frames, starts = real_frames("pong")
    stream = Stream(frames, TREE, starts=starts)
    steps = np.array([700, 3, 3, 64, 0, 65, 127, 3, 128, 700, 72, 8], np.int64)
    np.testing.assert_array_equal(stream.decode(steps, accelerated=accelerated), stream.expected(steps))


@pytest.mark.parametrize("accelerated", PATHS)
def test_steps_beyond_two_to_the_32_decode(accelerated: bool) -> None:
    frames = sparse_frames(100, seed=2)
    stream = Stream(frames, TREE, first_step=2**33 - 40)  # CRC seeds wrap
    steps = np.arange(2**33 - 40, 2**33 + 60)
    np.testing.assert_array_equal(stream.decode(steps, accelerated=accelerated), frames)


@pytest.mark.parametrize("accelerated", PATHS)
@pytest.mark.parametrize(
    "shape", [(84, 84), (84, 84, 3), (2, 3), (1, 40), (210, 320)], ids=["atari", "rgb", "tiny", "one-row", "large"]
)
def test_frames_of_any_shape_round_trip(shape: tuple[int, ...], accelerated: bool) -> None:
    frames = sparse_frames(20, seed=3, shape=shape)  # 210 x 320: offsets beyond lz4's 64 KiB window
    frames[7] = np.random.default_rng(4).integers(0, 256, shape, dtype=np.uint8)  # incompressible
    frames[9] = frames[8]  # identical to its reference's neighbour
    stream = Stream(frames, ReferenceScheme(group_size=8, branching=2), accelerated=accelerated)
    np.testing.assert_array_equal(stream.decode(np.arange(20), accelerated=accelerated), frames)


@needs_extension
@pytest.mark.parametrize("game", ["pong", "mspacman"])
def test_the_extension_encoder_and_python_lz4_agree_on_every_decoded_frame(game: str) -> None:
    frames, starts = real_frames(game)
    compiled = Stream(frames, TREE, starts=starts, accelerated=True)
    fallback = Stream(frames, TREE, starts=starts, accelerated=False)
    assert (compiled.deltas == fallback.deltas).all()
    steps = np.arange(len(frames))
    for stream in (compiled, fallback):
        for accelerated in (True, False):
            np.testing.assert_array_equal(stream.decode(steps, accelerated=accelerated), frames)


@needs_extension
def test_dependent_frames_are_much_smaller_than_plain_lz4() -> None:
    frames, starts = real_frames("pong")
    stream = Stream(frames, TREE, starts=starts)
    plain = np.mean([len(lz4.block.compress(frame, store_size=False)) for frame in frames])
    assert stream.lengths.mean() < 0.45 * plain  # measured: 86 B against 266 B


def _run_index_case(extra: str) -> int:
    """Bytes of a changed row encoded against a reference of exactly 84 * 84 / 32 = 220 change points (the
    most the encoder indexes), one more where ``extra`` says: in its last 3 bytes (counted, but past what
    the index reads) or among its first. The frame's row 5 is a run of 0 then 7 that lines up with the
    reference's row 20 only through the index (no fixed offset reaches it): indexed, its match is longer."""
    reference = np.zeros((84, 84), np.uint8)
    reference[20, 30:] = 7
    flat = reference.reshape(-1)
    for k in range(109):  # isolated bytes, two change points each: 218, and row 20's run 2
        reference[50 + k // 20, 10 + 3 * (k % 20)] = 9
    assert np.count_nonzero(flat[1:] != flat[:-1]) == 220
    if extra == "tail":
        flat[-1] = 5
    elif extra == "head":
        flat[1] = 5  # 0, 5, 0: two more
    frame = reference.copy()
    frame[5, 10:] = 7
    return len(reference_codec.compress_against(frame, reference, changed_rows=True, accelerated=True))


@needs_extension
def test_the_encoder_indexes_a_reference_of_at_most_one_change_point_in_32_bytes() -> None:
    # Where the index finds row 20's run end, the block is a byte smaller; one change point more, even one
    # in the last 3 bytes that the index never reads, and the reference is too dense to index.
    indexed = _run_index_case("none")
    assert _run_index_case("tail") == indexed + 1
    assert _run_index_case("head") == indexed + 1


@needs_extension
def test_plans_are_identical_on_both_paths() -> None:
    frames, starts = real_frames("mspacman")
    stream = Stream(frames, TREE, starts=starts)
    for seed in range(20):
        steps = sampled_stacks(32, len(frames), seed=seed)
        plans = [
            reference_codec.plan_decode(steps, ref_deltas_of=stream.ref_deltas_of, depth=2, accelerated=accelerated)
            for accelerated in (True, False)
        ]
        for name in ("steps", "refs", "rows"):
            np.testing.assert_array_equal(getattr(plans[0], name), getattr(plans[1], name))


# -- the scheme and key boundaries -------------------------------------------------------------------


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
        ({"group_size": 0}, ValueError, r"group_size is 0; expected at least 1 \(1: every frame is a key frame\)"),
        ({"branching": 1}, ValueError, r"branching is 1; expected 2 to group_size \(64\)"),
        ({"branching": 65}, ValueError, r"branching is 65; expected 2 to group_size \(64\)"),
        ({"max_distance": 0}, ValueError, r"max_distance is 0; expected 1 to 65535 frame steps \(16-bit ref_delta\)"),
        ({"max_distance": 65536}, ValueError, r"max_distance is 65536; expected 1 to 65535 frame steps \(16-bit ref_delta\)"),
        ({"group_size": 8.0}, TypeError, r"group_size must be an int; got float 8\.0"),
    ],
)
def test_a_bad_scheme_is_refused_with_its_value(kwargs: dict[str, object], error: type, message: str) -> None:
    with pytest.raises(error, match=f"^{message}$"):
        ReferenceScheme(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_sample_decodes_at_most_depth_extra_frames_per_frame(scheme: ReferenceScheme) -> None:
    frames, starts = real_frames("breakout")
    stream = Stream(frames, scheme, starts=starts)
    for seed in range(10):
        steps = sampled_stacks(32, len(frames), seed=seed)
        plan = reference_codec.plan_decode(steps, ref_deltas_of=stream.ref_deltas_of, depth=scheme.depth)
        assert plan.extra <= scheme.depth * len(np.unique(steps))
        assert (plan.refs < np.arange(len(plan.refs))).all()
        needed = set(steps.ravel().tolist())
        for step in list(needed):
            while stream.deltas[step]:
                step -= int(stream.deltas[step])
                needed.add(step)
        assert set(plan.steps.tolist()) == needed


@pytest.mark.parametrize("accelerated", PATHS)
def test_frames_from_the_reference_tail_on_decode_after_older_ones_are_gone(accelerated: bool) -> None:
    frames, starts = real_frames("pong")
    stream = Stream(frames, TREE, starts=starts)
    oldest = 500  # the oldest frame a stored transition needs
    tail = reference_codec.reference_tail(oldest, len(frames), ref_deltas_of=stream.ref_deltas_of, scheme=TREE)
    assert tail <= oldest and oldest - tail < TREE.group_size
    stream.lengths[:tail] = -1  # freed: any read of them fails
    steps = np.arange(oldest, len(frames))
    np.testing.assert_array_equal(stream.decode(steps, accelerated=accelerated), frames[oldest:])
    if tail < oldest:
        stream.lengths[tail] = -1  # one frame more would be one too many
        with pytest.raises(CorruptFrameError):
            stream.decode(steps, accelerated=accelerated)


# -- corruption: a clear error naming the frame -----------------------------------------------------


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_flipped_byte_in_a_requested_frame_names_that_frame(accelerated: bool) -> None:
    frames, starts = real_frames("mspacman")
    stream = Stream(frames, TREE, starts=starts)
    step = 77
    stream.contents[stream.segments[step]][stream.offsets[step] + stream.lengths[step] // 2] ^= 0x10
    with pytest.raises(CorruptFrameError, match=r"^frame 77 fails its checksum or does not decode$") as caught:
        stream.decode([75, 76, 77, 78, 79], accelerated=accelerated)
    assert caught.value.frame_step == 77
    assert isinstance(caught.value, CorruptStoreError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_damaged_key_frame_names_it_as_a_reference(accelerated: bool) -> None:
    frames = sparse_frames(80, seed=7)
    stream = Stream(frames, TREE)
    stream.checksums[64] ^= 1  # the key frame of frames 65 to 79
    with pytest.raises(
        CorruptFrameError, match=r"^frame 64 \(a reference of a requested frame\) fails its checksum or does not decode$"
    ):
        stream.decode([70, 71, 72], accelerated=accelerated)


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_payload_that_fits_its_checksum_but_is_not_lz4_names_the_frame(accelerated: bool) -> None:
    frames = sparse_frames(10, seed=8)
    stream = Stream(frames, TREE)
    junk = bytes([0xF0]) + b"\x00" * 3  # a token announcing more literals than there are
    start = stream.offsets[5]
    stream.contents[stream.segments[5]][start : start + len(junk)] = junk
    stream.lengths[5], stream.checksums[5] = len(junk), zlib.crc32(junk, 5)
    with pytest.raises(CorruptFrameError, match=r"^frame 5 fails its checksum or does not decode$"):
        stream.decode([5], accelerated=accelerated)


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_reference_before_frame_step_zero_is_a_corrupt_table(accelerated: bool) -> None:
    stream = Stream(sparse_frames(10, seed=9), TREE)
    stream.deltas[4] = 9
    with pytest.raises(CorruptFrameError, match=r"^frame 4 names a reference before frame step 0$"):
        stream.decode([3, 4], accelerated=accelerated)


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_chain_deeper_than_the_scheme_is_a_corrupt_table(accelerated: bool) -> None:
    stream = Stream(sparse_frames(20, seed=10), TREE)
    stream.deltas[[9, 8, 7]] = 1  # 9 -> 8 -> 7 -> 6: three references, the tree allows two
    with pytest.raises(CorruptFrameError, match=r"^frame 6 is a reference 3 frames deep; the scheme allows 2$"):
        stream.decode([9], accelerated=accelerated)


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_frame_decoded_against_the_wrong_reference_is_caught_by_a_seed_that_binds_ref_delta(
    accelerated: bool,
) -> None:
    """Why the frame table's checksum seed must include ref_delta (see the integration notes)."""
    frames, starts = real_frames("pong")
    stream = Stream(frames, TREE, starts=starts)
    assert stream.deltas[70] == 6
    stream.deltas[70] = 62  # against frame 8 instead of frame 64: valid lz4, wrong pixels, no error
    out = stream.decode([70], accelerated=accelerated)
    assert not np.array_equal(out[0], frames[70])


# -- decode_batch: both paths, the same answers -----------------------------------------------------


def _plan_columns(stream: Stream, steps: npt.NDArray[np.int64]):  # type: ignore[no-untyped-def]
    plan = reference_codec.plan_decode(steps, ref_deltas_of=stream.ref_deltas_of, depth=stream.scheme.depth)
    return plan, [*stream.locate(plan.steps), plan.refs.copy(), plan.rows.copy()]


@needs_extension
@pytest.mark.parametrize("damage", ["none", "checksum", "length", "offset"])
def test_both_paths_return_the_same_first_bad_entry_and_pixels(damage: str) -> None:
    frames, starts = real_frames("pong")
    stream = Stream(frames, TREE, starts=starts)
    plan, columns = _plan_columns(stream, sampled_stacks(32, len(frames), seed=12))
    victims = plan.steps[[len(plan.steps) // 3, len(plan.steps) // 2]]
    if damage == "checksum":
        stream.checksums[victims] ^= 1
    elif damage == "length":
        stream.lengths[victims] -= 1
    elif damage == "offset":
        stream.offsets[victims] = 10**9
    plan, columns = _plan_columns(stream, sampled_stacks(32, len(frames), seed=12))
    results = []
    for accelerated in (True, False):
        out = np.zeros((plan.requested, 84, 84), np.uint8)
        bad = reference_codec.decode_batch(*columns, out, views=stream.views, accelerated=accelerated)
        results.append((bad, out))
    assert results[0][0] == results[1][0]
    if damage == "none":
        assert results[0][0] == -1
        assert results[0][1].tobytes() == results[1][1].tobytes()
    else:
        assert plan.steps[results[0][0]] in victims


@needs_extension
@pytest.mark.skipif(reference_codec._lz4batch is None, reason=absent_reason("_lz4batch"))
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    victims=st.lists(st.floats(0, 1, exclude_max=True), max_size=3),
    damage=st.sampled_from(["checksum", "length", "offset"]),
    threads=st.sampled_from([2, 3, 8]),
    game=st.sampled_from(["pong", "mspacman"]),
)
def test_a_batch_decoded_on_the_pools_threads_tree_by_tree_gives_the_in_order_result(
    seed: int, victims: list[float], damage: str, threads: int, game: str
) -> None:
    """``decode_batch(threads=...)`` (``_lz4batch.reference_decode``: each key frame and the frames that
    depend on it on one of the pool's threads) against the in-order decode: the same first bad
    entry (a damaged frame, or one whose reference is damaged) and, when none is, the same pixels."""
    frames, starts = real_frames(game)
    stream = Stream(frames, TREE, starts=starts)
    steps = sampled_stacks(32, len(frames), seed=seed)
    plan, _ = _plan_columns(stream, steps)
    damaged = plan.steps[[int(v * len(plan.steps)) for v in victims]]
    if damage == "checksum":
        stream.checksums[damaged - stream.first_step] ^= 1
    elif damage == "length":
        stream.lengths[damaged - stream.first_step] -= 1
    else:
        stream.offsets[damaged - stream.first_step] = 10**9
    plan, columns = _plan_columns(stream, steps)
    results = []
    for kwargs in ({"threads": 1}, {"threads": threads}, {"accelerated": False}):
        out = np.zeros((plan.requested, 84, 84), np.uint8)
        results.append((reference_codec.decode_batch(*columns, out, views=stream.views, **kwargs), out))
    assert results[0][0] == results[1][0] == results[2][0]
    if results[0][0] == -1:
        assert not len(damaged)
        assert results[0][1].tobytes() == results[1][1].tobytes() == results[2][1].tobytes()
        np.testing.assert_array_equal(results[1][1].reshape(steps.shape + (84, 84)), stream.expected(steps))
    else:
        assert len(damaged)


@needs_extension
@pytest.mark.skipif(reference_codec._lz4batch is None, reason=absent_reason("_lz4batch"))
@pytest.mark.parametrize("threads", [0, 65])
def test_a_thread_count_outside_1_to_64_is_a_value_error(threads: int) -> None:
    stream = Stream(sparse_frames(4, seed=13), TREE)
    steps = np.arange(4, dtype=np.int64)
    out = np.zeros((4, 84, 84), np.uint8)
    with pytest.raises(ValueError, match=f"^threads is {threads}; expected 1 to 64$"):
        reference_codec.decode_batch(*stream.locate(steps), np.array([-1, 0, 0, 0]), np.arange(4), out,
                                     views=stream.views, threads=threads)


@pytest.mark.parametrize("accelerated", PATHS)
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("refs", 3, r"refs\[3\] is 3; expected -1 or an earlier entry \(0 to 2\)"),
        ("rows", 0, r"rows\[1\] is 0; expected a row not used before, 0 <= row < 4 \(out and scratch rows\)"),
        ("rows", -1, r"rows\[1\] is -1; expected a row not used before, 0 <= row < 4 \(out and scratch rows\)"),
        ("segments", 7, r"segments\[1\] is 7; expected 0 <= segment < 3 \(len\(views\)\)"),
    ],
)
def test_a_bad_plan_is_a_value_error_on_both_paths(field: str, value: int, message: str, accelerated: bool) -> None:
    stream = Stream(sparse_frames(4, seed=13), TREE)
    steps = np.arange(4, dtype=np.int64)
    segments, offsets, lengths, checksums, seeds = stream.locate(steps)
    columns = {"segments": segments, "offsets": offsets, "lengths": lengths, "checksums": checksums,
               "seeds": seeds, "refs": np.array([-1, 0, 0, 0]), "rows": np.arange(4)}  # fmt: skip
    index = 3 if field == "refs" else 1
    columns[field] = columns[field].copy()
    columns[field][index] = value
    out = np.zeros((4, 84, 84), np.uint8)
    with pytest.raises(ValueError, match=f"^{message}$"):
        reference_codec.decode_batch(**columns, out=out, views=stream.views, accelerated=accelerated)


@pytest.mark.parametrize("accelerated", PATHS)
def test_an_empty_request_decodes_nothing(accelerated: bool) -> None:
    stream = Stream(sparse_frames(4, seed=14), TREE)
    assert stream.decode(np.zeros(0, np.int64), accelerated=accelerated).shape == (0, 84, 84)


def test_compress_against_checks_its_arguments() -> None:
    frame = np.zeros((84, 84), np.uint8)
    with pytest.raises(TypeError, match=r"^frame must be a C-contiguous numpy uint8 array; got list$"):
        reference_codec.compress_against([1, 2], None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^reference must be a uint8 array of the frame's shape \(84, 84\); got \(84, 83\)$"):
        reference_codec.compress_against(frame, np.zeros((84, 83), np.uint8))
