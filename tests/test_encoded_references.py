"""Encoded batches of reference stores (``frame_encoding="lz4-reference"``): ``sample_encoded`` and
``sample_sequences_encoded`` carry, once each, the frames a batch's blocks are compressed against, and
``decode()`` is what ``sample`` / ``sample_sequences`` return for the same draw, on real Atari frames
of both formats (4: dependent frames as whole blocks, 5: as changed rows)."""

from __future__ import annotations

import functools
import pickle
from pathlib import Path

import numpy as np
import pytest
import store_files
from atari_data import load_stream
from hypothesis import given, settings
from hypothesis import strategies as st

from mmreplay import (
    BlockRefs,
    CorruptStoreError,
    EncodedBatch,
    EncodedFrames,
    PrioritizedSampler,
    ReferenceScheme,
    ReplayStore,
    decode_blocks,
    encode_frames,
)
from mmreplay.frames import referenced_blocks
from mmreplay.store import internals
from mmreplay.store.reading import encoded_batches

FRAME = (84, 84)
FIELDS = ("obs", "next_obs", "action", "reward", "terminated", "truncated", "index", "env_index", "weight", "discount")


@functools.cache
def stream(game: str) -> dict[str, np.ndarray]:
    return load_stream(game, ("frames", "action", "reward", "terminated"), 1200)


def adds(game: str, num_envs: int, count: int) -> list[tuple]:
    """``count`` vector adds of single frames: env e plays the stream from frame 500 * e on, episodes cut
    every 150 frames (so that groups restart within the store)."""
    s = stream(game)
    result = []
    for k in range(count):
        t = [500 * e + k for e in range(num_envs)]
        cut = (k + 1) % 150 == 0
        args = (s["frames"][t], s["action"][t].astype(np.int64) % 6, s["reward"][t].astype(np.float32),
                s["frames"][[i + 1 for i in t]], np.full(num_envs, cut), np.zeros(num_envs, bool))
        result.append(args if num_envs > 1 else tuple(a[0] for a in args))
    return result


@functools.cache
def reference_store(directory: str, game: str, num_envs: int, prioritized: bool) -> Path:
    """A closed reference store of ``num_envs`` envs of ``game`` that has evicted (capacity 240 after 300
    adds an env), groups of 16 with branching 2 (chains up to 4 references deep)."""
    path = Path(directory) / f"{game}-{num_envs}-{prioritized}.mmr"
    store = ReplayStore.create(
        path, frame_shape=FRAME, capacity=240, stack_size=4, num_envs=num_envs, frame_encoding="lz4-reference",
        reference_scheme=ReferenceScheme(group_size=16, branching=2),
        sampler=PrioritizedSampler(alpha=0.6) if prioritized else None,
    )
    with store:
        for args in adds(game, num_envs, 300 // num_envs + 40):
            store.add(*args)
        if prioritized:
            steps = np.array(store.stored_steps)
            store.update_priorities(steps, (steps % 7 + 1).astype(np.float64))
    return path


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("reference-stores"))


@settings(max_examples=30, deadline=None)
@given(
    game=st.sampled_from(["pong", "mspacman"]),
    num_envs=st.sampled_from([1, 2]),
    prioritized=st.booleans(),
    mode=st.sampled_from(["r", "r+"]),
    batch=st.integers(1, 40),
    n_step=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_sample_encoded_of_a_reference_store_decodes_to_what_sample_returns(
    stores: str, game: str, num_envs: int, prioritized: bool, mode: str, batch: int, n_step: int,
    seed: int,
) -> None:
    path = reference_store(stores, game, num_envs, prioritized)
    with ReplayStore.open(path, mode) as store:
        expected = store.sample(batch, rng=seed, beta=0.5, n_step=n_step)
        encoded = store.sample_encoded(batch, rng=seed, beta=0.5, n_step=n_step)
        decoded = encoded.decode(decode_threads=int(seed % 3) + 1)
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(decoded, name), getattr(expected, name), err_msg=name)
        assert getattr(decoded, name).dtype == getattr(expected, name).dtype
    frames = encoded.frames
    assert frames.references is not None and frames.format_version == 6
    # Each frame once, references before the frames that need them, and every one of them needed.
    needed = set(np.unique(encoded.frame_index).tolist())
    frontier = set(needed)
    while frontier:
        frontier = {int(frames.references[k]) for k in frontier if frames.references[k] >= 0} - needed
        needed |= frontier
    assert needed == set(range(len(frames)))


@settings(max_examples=20, deadline=None)
@given(
    game=st.sampled_from(["pong", "mspacman"]),
    num_envs=st.sampled_from([1, 2]),
    length=st.integers(1, 12),
    seed=st.integers(0, 2**32 - 1),
)
def test_sample_sequences_encoded_of_a_reference_store_decodes_byte_for_byte(
    stores: str, game: str, num_envs: int, length: int, seed: int
) -> None:
    with ReplayStore.open(reference_store(stores, game, num_envs, False), "r") as store:
        expected = store.sample_sequences(6, length, rng=seed)
        decoded = store.sample_sequences_encoded(6, length, rng=seed).decode()
    for name in ("obs", "next_obs", "action", "reward", "terminated", "truncated", "mask", "index", "env_index",
                 "weight"):
        actual, wanted = getattr(decoded, name), getattr(expected, name)
        assert actual.dtype == wanted.dtype and actual.shape == wanted.shape, name
        assert actual.tobytes() == wanted.tobytes(), name


@pytest.mark.parametrize("protocol", [2, 5])
def test_a_reference_stores_encoded_batch_pickles_and_is_smaller_than_a_plain_stores(
    stores: str, tmp_path: Path, protocol: int
) -> None:
    with ReplayStore.open(reference_store(stores, "pong", 1, False), "r") as store:
        encoded = store.sample_encoded(32, rng=7)
        expected = store.sample(32, rng=7)
    copy = pickle.loads(pickle.dumps(encoded, protocol=protocol))
    assert np.array_equal(copy.frames.references, encoded.frames.references) and copy.frames.format_version == 6
    np.testing.assert_array_equal(copy.decode().obs, expected.obs)
    assert encoded.frames.nbytes == (len(encoded.frames.data) + encoded.frames.lengths.nbytes
                                     + encoded.frames.checksums.nbytes + encoded.frames.seeds.nbytes
                                     + encoded.frames.references.nbytes)
    assert f"referencing={int((encoded.frames.references >= 0).sum())}" in repr(encoded.frames)
    plain = ReplayStore.create(tmp_path / "plain", frame_shape=FRAME, capacity=240, stack_size=4, frame_encoding="lz4")
    with plain:
        for args in adds("pong", 1, 340):
            plain.add(*args)
        assert encoded.nbytes < plain.sample_encoded(32, rng=7).nbytes


def damaged_copy(frames: EncodedFrames, frame: int) -> EncodedFrames:
    """``frames`` with one byte of frame ``frame``'s block flipped."""
    data = bytearray(frames.data)
    data[int(frames.lengths[:frame].sum()) + int(frames.lengths[frame]) // 2] ^= 0x20
    return EncodedFrames(bytes(data), frames.lengths, frames.checksums, frames.seeds, frames.frame_shape,
                         frames.references, frames.format_version)


def test_a_damaged_reference_block_fails_decode_naming_the_reference(stores: str) -> None:
    with ReplayStore.open(reference_store(stores, "pong", 1, False), "r") as store:
        encoded = store.sample_encoded(8, rng=3)
    shown = set(np.unique(encoded.frame_index).tolist())
    only_referenced = next(k for k in range(len(encoded.frames)) if k not in shown)
    damaged = EncodedBatch(**{**encoded.__dict__, "frames": damaged_copy(encoded.frames, only_referenced)})
    with pytest.raises(CorruptStoreError, match=rf"encoded frame {only_referenced} \(a frame that a requested "
                                                r"frame's block is compressed against\) fails its checksum"):
        damaged.decode()
    requested = int(encoded.frame_index[0, 0])
    damaged = EncodedBatch(**{**encoded.__dict__, "frames": damaged_copy(encoded.frames, requested)})
    with pytest.raises(CorruptStoreError, match=rf"encoded frame {requested} fails its checksum"):
        damaged.decode()


@pytest.mark.parametrize("mode", ["r", "r+"])
def test_a_damaged_stored_reference_frame_is_never_sent_encoded(tmp_path: Path, mode: str) -> None:
    # A reader ("r") checks each block as it gathers it; the writer's process ("r+") gathers unchecked
    # and the decode checks every block. Frame 0 is the first group's key frame: every frame of the group
    # is compressed against it, directly or through others.
    path = tmp_path / "s"
    store = ReplayStore.create(path, frame_shape=FRAME, capacity=100, stack_size=4, frame_encoding="lz4-reference",
                               reference_scheme=ReferenceScheme(group_size=16, branching=2))
    with store:
        for args in adds("breakout", 1, 12):
            store.add(*args)
    _flip_frame(path, 0)
    with ReplayStore.open(path, mode) as reopened:
        with pytest.raises(CorruptStoreError, match="fails its checksum"):
            reopened.sample_encoded(6, rng=0).decode()
    if mode == "r":  # a reader names a transition that needs the frame, or the batch where none does now
        with ReplayStore.open(path, mode) as reopened, pytest.MonkeyPatch.context() as patch:
            patch.setattr(encoded_batches, "_needing", lambda ring, distinct, frame_step: 10**9)
            with pytest.raises(CorruptStoreError, match=r"frame 0 fails its checksum \(read for this batch\)"):
                reopened.sample_encoded(6, rng=0)


def _flip_frame(path: Path, frame_step: int) -> None:
    """Flip a byte in the middle of frame ``frame_step``'s stored block."""
    entries = store_files.frame_table(path)[frame_step : frame_step + 1]
    written = store_files.header_of(path)["commit"]["bytes_written"]
    position = int(store_files.entry_format(path).positions(entries, written)[0])
    segment = path / "frames" / "0000000000.seg"
    data = bytearray(segment.read_bytes())
    data[position + int(entries["length"][0]) // 2] ^= 0x40
    segment.write_bytes(bytes(data))


def test_decode_blocks_joins_reference_and_plain_sources_in_any_order(stores: str) -> None:
    """As the Ray shards' batches are joined: two reference stores' encoded batches and a plain one,
    their frames in one shuffled call, each frame as its own store decodes it."""
    parts, expected = [], []
    for game in ("pong", "mspacman"):
        with ReplayStore.open(reference_store(stores, game, 2, False), "r") as store:
            parts.append(store.sample_encoded(5, rng=11))
            expected.append(parts[-1].decode())
    plain = encode_frames(stream("breakout")["frames"][:6])
    sources = [part.frames for part in parts] + [plain]
    order = np.random.default_rng(0).permutation(10 + 10 + 6)
    refs = BlockRefs.join([parts[0].frames.blocks(parts[0].frame_index[:, :2].reshape(-1)).from_source(0),
                           parts[1].frames.blocks(parts[1].frame_index[:, -2:].reshape(-1)).from_source(1),
                           plain.blocks(np.arange(6)).from_source(2)], order)
    wanted = np.concatenate([expected[0].obs[:, :2].reshape(-1, *FRAME), expected[1].next_obs[:, -2:].reshape(-1, *FRAME),
                             stream("breakout")["frames"][:6]])[order]
    out = np.empty((len(order), *FRAME), np.uint8)
    decode_blocks(sources, refs, out)
    np.testing.assert_array_equal(out, wanted)
    with pytest.raises(ValueError, match=r"refs has no frames \(each reference's index in its source"):
        decode_blocks(sources, BlockRefs(refs.sources, refs.starts, refs.lengths, refs.checksums, refs.seeds), out)
    version_4 = EncodedFrames(sources[1].data, sources[1].lengths, sources[1].checksums, sources[1].seeds, FRAME,
                              sources[1].references, format_version=4)
    with pytest.raises(ValueError, match=r"mix format versions \[4, 6\]"):
        decode_blocks([sources[0], version_4, plain], refs, out)


def test_batches_decoded_in_turns_from_two_groups_each_equal_their_own_groups_frames(stores: str) -> None:
    """A Ray group's batches decode from the same sources one after another (their tables built once a
    group); batches of two groups taken in turns, and a group's sources reordered, each still decode to
    their own frames."""
    groups = []
    for game in ("pong", "mspacman"):
        with ReplayStore.open(reference_store(stores, game, 1, False), "r") as store:
            encoded = store.sample_encoded(12, rng=3)
            groups.append((encoded, encoded.decode()))
    for _ in range(2):
        for (encoded, expected), other in zip(groups, reversed(groups)):
            sources = [encoded.frames, other[0].frames]
            refs = encoded.frames.blocks(encoded.frame_index[:, :4].reshape(-1)).from_source(0)
            out = np.empty((refs.starts.size, *FRAME), np.uint8)
            decode_blocks(sources, refs, out)
            np.testing.assert_array_equal(out.reshape(12, 4, *FRAME), expected.obs)
            refs = encoded.frames.blocks(encoded.frame_index[:, -4:].reshape(-1)).from_source(1)
            decode_blocks(sources[::-1], refs, out)
            np.testing.assert_array_equal(out.reshape(12, 4, *FRAME), expected.next_obs)


@pytest.mark.parametrize(
    ("references", "error", "message"),
    [
        ([-1, 0, 2], ValueError, r"references\[2\] is 2; expected -1 .* or the index of an earlier frame \(0 to 1\)"),
        ([-1, 5, 0], ValueError, r"references\[1\] is 5; expected -1"),
        ([0, -1, -1], ValueError, r"references\[0\] is 0; expected -1"),
        ([-2, -1, -1], ValueError, r"references\[0\] is -2"),
        ([-1, 0], ValueError, r"references has shape \(2,\); expected \(3,\)"),
        ([-1.0, 0.0, 1.0], TypeError, "references must be an integer array"),
    ],
)
def test_encoded_frames_check_their_references(references: list, error: type, message: str) -> None:
    frames = encode_frames(stream("pong")["frames"][:3])
    with pytest.raises(error, match=message):
        EncodedFrames(frames.data, frames.lengths, frames.checksums, frames.seeds, FRAME, np.array(references))
    with pytest.raises(ValueError, match="format_version is 'yes'; expected 4, 5 or 6"):
        EncodedFrames(frames.data, frames.lengths, frames.checksums, frames.seeds, FRAME, None, "yes")  # type: ignore[arg-type]


def test_encoded_frames_say_changed_rows_only_for_format_version_5s_blocks() -> None:
    """``changed_rows``, the name before ``format_version``, still answers: format 5's blocks are changed rows."""
    frames = encode_frames(stream("pong")["frames"][:3])
    made = {version: EncodedFrames(frames.data, frames.lengths, frames.checksums, frames.seeds, FRAME, None, version)
            for version in (4, 5, 6)}
    assert {version: f.changed_rows for version, f in made.items()} == {4: False, 5: True, 6: False}
    assert frames.format_version == 6 and not frames.changed_rows


def test_add_encoded_refuses_blocks_that_reference_other_frames_and_writes_nothing(stores: str, tmp_path: Path) -> None:
    with ReplayStore.open(reference_store(stores, "pong", 1, False), "r") as store:
        encoded = store.sample_encoded(4, rng=0)
    target = ReplayStore.create(tmp_path / "t", frame_shape=FRAME, capacity=50, stack_size=4)
    with target, pytest.raises(ValueError, match=r"frames has \d+ blocks compressed against other frames .* decode the "
                                                 "batch and add its frames"):
        index = encoded.frame_index
        target.add_encoded(encoded.frames, index[:, :4], encoded.action, encoded.reward, index[:, 1:],
                           encoded.terminated, encoded.truncated)
    assert len(target) == 0


def joined_parts(stores: str) -> tuple[list[EncodedFrames], BlockRefs]:
    """Two reference stores' encoded batches and a plain source, their frames joined in a shuffled order."""
    parts = []
    for game in ("pong", "mspacman"):
        with ReplayStore.open(reference_store(stores, game, 2, False), "r") as store:
            parts.append(store.sample_encoded(6, rng=5))
    plain = encode_frames(stream("breakout")["frames"][:4])
    refs = BlockRefs.join([parts[0].frames.blocks(parts[0].frame_index.reshape(-1)).from_source(0),
                           parts[1].frames.blocks(parts[1].frame_index.reshape(-1)).from_source(1),
                           plain.blocks(np.array([3, 1, 1])).from_source(2)])
    order = np.random.default_rng(1).permutation(refs.starts.size)
    return [parts[0].frames, parts[1].frames, plain], refs.take(order)


@pytest.mark.skipif(referenced_blocks._lz4batch is None, reason="needs mmreplay._lz4batch")
@pytest.mark.parametrize("damaged", [None, "requested", "reference"])
def test_the_compiled_decode_of_referenced_blocks_equals_the_python_one(stores: str, damaged: str | None) -> None:
    """``_lz4batch.decode_referenced`` (each frame rebuilt in one call) against ``reference_codec.rebuild``
    in Python: the same pixels, or the same first failing frame."""
    sources, refs = joined_parts(stores)
    if damaged is not None:  # one of the first source's frames that a row asks for, or one only referenced
        shown = sorted(set(refs.frames[refs.sources == 0].tolist()))
        pool = shown if damaged == "requested" else sorted(set(range(len(sources[0]))) - set(shown))
        sources[0] = damaged_copy(sources[0], pool[len(pool) // 2])
    results = []
    for compiled in (True, False):
        out = np.zeros((refs.starts.size, *FRAME), np.uint8)
        with pytest.MonkeyPatch.context() as patch:
            if not compiled:
                patch.setattr(referenced_blocks, "_lz4batch", None)
            failed = referenced_blocks.decode_referenced(sources, refs, out, limit=2)
        results.append((failed, out))
    (fast, fast_out), (planned, planned_out) = results
    if damaged is None:
        assert fast is None and planned is None
        np.testing.assert_array_equal(fast_out, planned_out)
    else:
        assert fast is not None and planned is not None
        assert fast[1:] == planned[1:] and fast[2] == (damaged == "requested")  # the frame, and whether a row asked


@pytest.mark.skipif(referenced_blocks._lz4batch is None, reason="needs mmreplay._lz4batch")
def test_the_compiled_decode_checks_its_arrays() -> None:
    from mmreplay.frames.referenced_blocks import _lz4batch

    frames = encode_frames(stream("pong")["frames"][:3])
    views = [memoryview(frames.data)]
    offsets = np.concatenate([[0], np.cumsum(frames.lengths)[:-1]]).astype(np.int64)
    blocks = (np.zeros(3, np.int64), offsets, frames.lengths, frames.checksums, frames.seeds)
    out = np.zeros((2, *FRAME), np.uint8)
    shape = (7056, 84, 7, 16)
    assert _lz4batch.decode_referenced(views, blocks, np.array([-1, -1, -1]), np.array([2, 0]), out, shape, 1) == -1
    np.testing.assert_array_equal(out, stream("pong")["frames"][[2, 0]])
    # a reference that is not an earlier block, a wanted block past the blocks, a block outside its view
    assert _lz4batch.decode_referenced(views, blocks, np.array([-1, 1, -1]), np.array([2, 1]), out, shape, 1) == 1
    assert _lz4batch.decode_referenced(views, blocks, np.array([-1, -1, -1]), np.array([3, 0]), out, shape, 1) == 0
    outside = (blocks[0], offsets + 10_000, *blocks[2:])
    assert _lz4batch.decode_referenced(views, outside, np.array([-1, -1, -1]), np.array([2]), out[:1], shape, 1) == 0
    with pytest.raises(ValueError, match=r"references must be 3 aligned items of 8 bytes; got 16 bytes"):
        _lz4batch.decode_referenced(views, blocks, np.array([-1, -1]), np.array([2, 0]), out, shape, 1)
    with pytest.raises(ValueError, match=r"segments\[0\] is 1; expected 0 <= segment < 1 \(len\(views\)\)"):
        _lz4batch.decode_referenced(views, (np.ones(3, np.int64), *blocks[1:]), np.array([-1, -1, -1]),
                                    np.array([2, 0]), out, shape, 1)


@pytest.mark.skipif(referenced_blocks._lz4batch is None, reason="the compiled closure needs mmreplay._lz4batch")
@pytest.mark.parametrize("num_envs", [1, 2])
def test_the_compiled_closure_of_a_batchs_frames_is_every_frame_their_chains_reach(stores: str, num_envs: int) -> None:
    """``ReferenceFrameRing.closure``: the frames and all their references, in step order, each with its
    reference's index; what following the table's links one by one gives."""
    path = reference_store(stores, "pong", num_envs, False)
    with ReplayStore.open(path, "r") as store:
        ring = internals.files_of(store).frames
        first = store.transitions_added - len(store)
        distinct = np.unique(internals.reader_of(store).transition_frames(np.arange(first, store.transitions_added)))
        every, references = ring.closure(distinct)
        expected: set[int] = set()
        for frame in distinct.tolist():
            while True:
                expected.add(frame)
                delta = int(ring.ref_deltas(np.array([frame]))[0])
                if delta == 0:
                    break
                frame -= delta
        assert every.tolist() == sorted(expected)
        deltas = ring.ref_deltas(every)
        assert np.array_equal(np.where(deltas > 0, every[np.maximum(references, 0)], -1),
                              np.where(deltas > 0, every - deltas, -1))
        assert bool((references[deltas == 0] == -1).all()) and bool((references < np.arange(len(every))).all())


def test_a_chain_deeper_than_the_scheme_is_named_level_by_level(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = ReplayStore.create(path, frame_shape=FRAME, capacity=100, stack_size=1, frame_encoding="lz4-reference",
                               reference_scheme=ReferenceScheme(group_size=8, branching=8))  # depth 1
    with store:
        for args in adds("pong", 1, 30):
            store.add(*args)
    store_files.set_links(path, 8, ref_delta=1)  # the key frame 8 now names frame 7: frame 12 is 3 deep
    with ReplayStore.open(path, "r") as reopened:
        with pytest.raises(CorruptStoreError, match="more than 1 references deep"):
            reopened.sample_encoded(200, rng=0)  # 200 draws of 29 transitions reach frame 12


def test_decode_blocks_names_refs_that_point_outside_the_sources(stores: str) -> None:
    sources, refs = joined_parts(stores)
    out = np.zeros((refs.starts.size, *FRAME), np.uint8)
    bad_source = BlockRefs(np.where(np.arange(refs.starts.size) == 3, -1, refs.sources), refs.starts, refs.lengths,
                           refs.checksums, refs.seeds, refs.frames)
    with pytest.raises(ValueError, match=r"refs.sources holds -1; expected indices into the 3 sources"):
        decode_blocks(sources, bad_source, out)
    past = BlockRefs(refs.sources, refs.starts, refs.lengths, refs.checksums, refs.seeds, refs.frames + 10_000)
    with pytest.raises(ValueError, match=r"refs.frames holds an index past its source's frames"):
        decode_blocks(sources, past, out)
