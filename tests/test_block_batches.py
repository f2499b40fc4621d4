"""``BlockBatches``: several batches' frames among the same encoded sources (a Ray group's), checked once and
decoded batch by batch, each batch exactly what ``decode_blocks`` gives for its references, on real Atari
frames of plain and reference stores mixed; a damaged block costs only its own batch, with
``decode_blocks``' error; arguments are checked when it is made."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from atari_data import load_stream
from hypothesis import given, settings
from hypothesis import strategies as st

from mmreplay import BlockBatches, BlockRefs, CorruptStoreError, EncodedFrames, ReplayStore, decode_blocks
from mmreplay.frames import block_batches

FRAME = (84, 84)


@functools.cache
def encoded(directory: str, game: str, encoding: str) -> tuple[EncodedFrames, np.ndarray]:
    """An encoded batch of 24 transitions of ``game`` from a store of ``encoding``: its frames and its
    (24, stack 4 + 1) frame index."""
    frames = load_stream(game, ("frames",), 700)["frames"]
    path = Path(directory) / f"{game}-{encoding}.mmr"
    with ReplayStore.create(path, frame_shape=FRAME, capacity=500, stack_size=4, frame_encoding=encoding) as store:
        for t in range(600):
            store.add(frames[t], t % 6, 0.0, frames[t + 1], (t + 1) % 200 == 0, False)
        batch = store.sample_encoded(24, rng=5)
    return batch.frames, batch.frame_index


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[EncodedFrames, np.ndarray]]:
    """Three sources, as three shards' answers: Pong and MsPacman reference stores and a plain Breakout one."""
    directory = str(tmp_path_factory.mktemp("block-batches"))
    return [encoded(directory, "pong", "lz4-reference"), encoded(directory, "mspacman", "lz4-reference"),
            encoded(directory, "breakout", "lz4")]


def joined(parts: list[tuple[EncodedFrames, np.ndarray]], seed: int) -> tuple[list[EncodedFrames], BlockRefs]:
    """Every frame of every part's index, the parts' references joined and shuffled (as a group's rows)."""
    order = np.random.default_rng(seed).permutation(sum(index.size for _, index in parts))
    refs = BlockRefs.join([frames.blocks(index.reshape(-1)).from_source(p) for p, (frames, index) in enumerate(parts)],
                          order)
    return [frames for frames, _ in parts], refs


def flat(refs: BlockRefs) -> BlockRefs:
    return BlockRefs(*(getattr(refs, name).reshape(-1) for name in ("sources", "starts", "lengths", "checksums", "seeds",
                                                                      "frames")))


def each_batch_by_decode_blocks(frames: list[EncodedFrames], refs: BlockRefs, batches: int) -> list[np.ndarray]:
    per = refs.starts.size // batches
    expected = []
    for g in range(batches):
        out = np.empty((per, *FRAME), np.uint8)
        decode_blocks(frames, refs.take(slice(g * per, (g + 1) * per)), out)
        expected.append(out)
    return expected


@pytest.mark.parametrize("which", ["plain", "reference", "mixed"])
def test_each_batch_is_what_decode_blocks_gives_for_its_references(sources: list, which: str) -> None:
    parts = {"plain": sources[2:], "reference": sources[:2], "mixed": sources}[which]
    frames, refs = joined(parts, seed=1)
    batches = 5 * len(parts)  # 24 * 5 frames a part
    expected = each_batch_by_decode_blocks(frames, refs, batches)
    if which == "mixed":  # references in rows of 5 frames, as a group's transitions come: the same frames
        refs = BlockRefs(*(getattr(refs, name).reshape(-1, 5) for name in ("sources", "starts", "lengths",
                                                                            "checksums", "seeds", "frames")))
    decoder = BlockBatches(frames, refs, batches=batches)
    assert len(decoder) == batches
    for g in [*range(batches), 3, 0]:  # in any order, again
        np.testing.assert_array_equal(decoder.decode(g), expected[g])
    # and each frame is its store's: the mixed batches against the plain stream's own frames
    if which == "plain":
        stream = load_stream("breakout", ("frames",), 700)["frames"]
        ours = np.concatenate([decoder.decode(g) for g in range(batches)])
        assert all(any(np.array_equal(frame, s) for s in stream[:602]) for frame in ours[:12])


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), batches=st.sampled_from([1, 2, 3, 4, 6, 8, 12]),
       which=st.sampled_from([(0,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)]))
def test_any_split_of_a_shuffled_group_decodes_as_decode_blocks_does(
    sources: list, seed: int, batches: int, which: tuple[int, ...]
) -> None:
    """Reference model: ``decode_blocks`` over the whole group, cut into the batches."""
    frames, refs = joined([sources[k] for k in which], seed)
    whole = np.empty((refs.starts.size, *FRAME), np.uint8)
    decode_blocks(frames, refs, whole)
    decoder = BlockBatches(frames, refs, batches=batches)
    per = refs.starts.size // batches
    for g in np.random.default_rng(seed).permutation(batches):
        np.testing.assert_array_equal(decoder.decode(int(g)), whole[g * per : (g + 1) * per])


def test_without_the_extension_each_batch_goes_through_decode_blocks(
    sources: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames, refs = joined(sources, seed=2)
    expected = each_batch_by_decode_blocks(frames, refs, 6)
    monkeypatch.setattr(block_batches, "_lz4batch", None)
    decoder = BlockBatches(frames, refs, batches=6)
    for g in range(6):
        np.testing.assert_array_equal(decoder.decode(g), expected[g])


@pytest.mark.parametrize("damaged", [0, 2])  # a reference store's block, a plain store's
def test_a_damaged_block_fails_only_the_batches_that_need_it_with_decode_blocks_error(
    sources: list, damaged: int
) -> None:
    parts = list(sources)
    frames, index = parts[damaged]
    data = bytearray(bytes(frames.data))
    frame = int(index[0, -1])  # row 0's newest frame
    start = int(frames.lengths[:frame].sum())
    data[start + int(frames.lengths[frame]) // 2] ^= 0x40
    parts[damaged] = (EncodedFrames(bytes(data), frames.lengths, frames.checksums, frames.seeds, frames.frame_shape,
                                    frames.references, format_version=frames.format_version), index)
    sources_, refs = joined(parts, seed=3)
    batches = 9
    if damaged == 0:  # as a group's references come: a row of 5 frames for each transition
        refs = BlockRefs(*(getattr(refs, name).reshape(-1, 5) for name in ("sources", "starts", "lengths", "checksums",
                                                                            "seeds", "frames")))
    decoder = BlockBatches(sources_, refs, batches=batches)
    per = refs.starts.size // batches
    outcomes = []
    for g in range(batches):
        expected = np.empty((per, *FRAME), np.uint8)
        try:  # the reference: decode_blocks over the batch's references
            decode_blocks(sources_, flat(refs).take(slice(g * per, (g + 1) * per)), expected)
        except CorruptStoreError as error:
            with pytest.raises(CorruptStoreError) as ours:
                decoder.decode(g)
            assert str(ours.value) == str(error) and "encoded frame" in str(error)
            outcomes.append("failed")
        else:
            np.testing.assert_array_equal(decoder.decode(g), expected)
            outcomes.append("decoded")
    assert "failed" in outcomes and "decoded" in outcomes, outcomes


def test_bad_arguments_are_refused_when_it_is_made(sources: list) -> None:
    frames, refs = joined(sources[2:], seed=4)  # 120 frames
    with pytest.raises(ValueError, match=r"refs holds 120 frames; expected a multiple of batches \(7\)"):
        BlockBatches(frames, refs, batches=7)
    with pytest.raises(ValueError, match="batches must be"):
        BlockBatches(frames, refs, batches=0)
    outside = BlockRefs(refs.sources + 1, refs.starts, refs.lengths, refs.checksums, refs.seeds, refs.frames)
    with pytest.raises(ValueError, match=r"refs.sources holds 1; expected indices into the 1 sources"):
        BlockBatches(frames, outside, batches=2)
    reference_frames, reference_refs = joined(sources[:1], seed=4)
    past = BlockRefs(reference_refs.sources, reference_refs.starts, reference_refs.lengths, reference_refs.checksums,
                     reference_refs.seeds, reference_refs.frames + 10_000)
    with pytest.raises(ValueError, match="refs.frames holds an index past its source's frames"):
        BlockBatches(reference_frames, past, batches=2)
    small = EncodedFrames(b"", np.zeros(0, np.int64), np.zeros(0, np.uint32), np.zeros(0, np.uint32), (7, 6))
    with pytest.raises(ValueError, match=r"the sources' frames have shapes \(7, 6\) and \(84, 84\)"):
        BlockBatches([*frames, small], refs, batches=2)
    with pytest.raises(ValueError, match="sources is empty; expected the EncodedFrames that refs.sources indexes"):
        BlockBatches([], refs, batches=2)
    decoder = BlockBatches(frames, refs, batches=2)
    with pytest.raises(IndexError, match="batch 2 of 2"):
        decoder.decode(2)


def test_batches_of_no_frames_decode_to_empty_arrays(sources: list) -> None:
    frames, refs = joined(sources, seed=5)
    empty = refs.take(slice(0, 0))
    decoder = BlockBatches(frames, empty, batches=3)
    assert decoder.decode(2).shape == (0, *FRAME)
