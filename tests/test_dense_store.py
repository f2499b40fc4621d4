"""Stores created with ``frame_encoding="lz4-reference"``: frames compressed against earlier frames of their env.

Real Atari frames (tests/atari_data.py) go in one at a time, through one env or a vector of four, and every
stored transition must come back exactly as the naive reference model (tests/reference.py) has it:
after eviction, after the ring of frames has wrapped and its oldest segments were deleted, after a
reopen, through n-step and sequence sampling. A damaged frame, or a damaged link to its reference,
must raise a ``CorruptStoreError`` naming the frame, never return other pixels.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import store_files
from atari_data import load_stream
from extension_status import absent_reason
from hypothesis import example, given, settings
from hypothesis import strategies as st
from reference_windows import add_masked, assert_n_step_matches, assert_sequences_match
from reference import ReferenceStore, assert_batch_matches, assert_store_matches

from mmreplay import CorruptStoreError, FormatVersionError, ReferenceScheme, ReplayStore
from mmreplay.disk.store_directory import open_regular
from mmreplay.frames.frame_entries import SEED_MULTIPLIER
from mmreplay.frames.reference_ring import ReferenceFrameRing
from mmreplay.frames.ring import FrameChecksumError, FrameRing, _lz4batch
from mmreplay.store import internals

GAMES = ["pong", "breakout", "mspacman"]
KEYS = ("frames", "action", "reward", "terminated")
DENSE = "lz4-reference"


@functools.cache
def stream(game: str) -> dict[str, np.ndarray]:
    """The first 4,000 frames of a game's frame stream (see mmreplay/testing/atari_frames.py)."""
    return load_stream(game, KEYS, 4000)


def transitions(game: str, first: int = 0) -> list[tuple]:
    """The stream's transitions from position ``first`` on: (obs frame, action, reward, next frame, terminated,
    truncated); an episode whose last frame the stream cuts off is marked truncated."""
    s = stream(game)
    positions = np.flatnonzero(s["action"][:-1] >= 0)
    positions = positions[positions >= first]
    starts = set(positions.tolist())
    return [
        (s["frames"][t], int(s["action"][t]), float(s["reward"][t]), s["frames"][t + 1], bool(s["terminated"][t]),
         bool(t + 1 not in starts and not s["terminated"][t] and t + 1 < len(s["action"]) - 1))
        for t in positions.tolist()
    ]  # fmt: skip


def make(tmp_path: Path, *, capacity: int, num_envs: int = 1, stack_size: int = 4, name: str = "dense.mmr",
         scheme: ReferenceScheme | None = None) -> tuple[ReplayStore, ReferenceStore]:  # fmt: skip
    config = dict(frame_shape=(84, 84), capacity=capacity, stack_size=stack_size, num_envs=num_envs)
    store = ReplayStore.create(tmp_path / name, **config, frame_encoding=DENSE, reference_scheme=scheme)
    return store, ReferenceStore(**config)

def vector_adds(game: str, num_envs: int, count: int) -> list[tuple]:
    """``count`` lockstep vector adds: env e plays the stream from its e-th quarter on."""
    quarter = len(stream(game)["action"]) // num_envs
    per_env = [transitions(game, first=e * quarter)[:count] for e in range(num_envs)]
    assert all(len(items) == count for items in per_env), "the stream is too short for this many adds"
    return [
        tuple(np.array([per_env[e][k][field] for e in range(num_envs)]) for field in range(6)) for k in range(count)
    ]


def frame_table(path: Path) -> np.ndarray:
    return store_files.frame_table(path)


@pytest.mark.parametrize("game", GAMES)
def test_one_env_of_real_frames_comes_back_exactly_after_eviction(tmp_path: Path, game: str) -> None:
    store, ref = make(tmp_path, capacity=500)
    for i, args in enumerate(transitions(game)[:700]):
        store.add(*args)
        ref.add(*args)
        if i % 150 == 149:
            store.flush()
    assert len(store) == 500
    assert_store_matches(store, ref)
    assert_batch_matches(store.sample(256, rng=1), ref)
    store.close()


@pytest.mark.parametrize("game", GAMES)
def test_a_vector_of_four_envs_comes_back_exactly(tmp_path: Path, game: str) -> None:
    store, ref = make(tmp_path, capacity=600, num_envs=4)
    for args in vector_adds(game, 4, 180):
        store.add(*args)
        ref.add(*args)
    assert_store_matches(store, ref)
    assert_batch_matches(store.sample(256, rng=2), ref)
    store.close()
    with ReplayStore.open(tmp_path / "dense.mmr", "r") as reader:
        assert_store_matches(reader, ref)


def test_a_wrapped_ring_keeps_the_frames_that_its_oldest_frames_are_compressed_against(tmp_path: Path) -> None:
    # Groups of 256 frames all against their key frame: the oldest stored frames' key frame lies far behind
    # the oldest frame a stored transition shows. The store commits only when its rings are full (every
    # ~1,000 adds, as capacity 12 leaves ~1,000 slots of slack), and the slots of the frame table wrap
    # about three times: were the key frames not kept, their slots would be reused within a lap.
    store, ref = make(tmp_path, capacity=12, scheme=ReferenceScheme(group_size=256, branching=256))
    for i, args in enumerate(transitions("mspacman")[:3600]):
        store.add(*args)
        ref.add(*args)
        if i % 5 == 0:
            assert_batch_matches(store.read(ref.stored_steps()), ref, ref.stored_steps())
    store.close()
    header = json.loads((tmp_path / "dense.mmr" / "header.json").read_text())
    frame_slots, frames_written = header["commit"]["frame_slots"], header["commit"]["frames_written"]
    assert frames_written > 2 * frame_slots, "the frame table did not wrap"
    assert not (tmp_path / "dense.mmr" / "frames" / "0000000000.seg").exists(), "no segment was released"
    with ReplayStore.open(tmp_path / "dense.mmr", "r") as reader:
        assert_store_matches(reader, ref)


def test_a_reopened_store_continues_the_episode_and_its_frames(tmp_path: Path) -> None:
    items = transitions("pong")[:600]
    store, ref = make(tmp_path, capacity=1000)
    for args in items[:300]:
        store.add(*args)
        ref.add(*args)
    store.close()
    with ReplayStore.open(tmp_path / "dense.mmr", "r+") as store:
        for args in items[300:]:
            store.add(*args)
            ref.add(*args)
        assert_store_matches(store, ref)
    with ReplayStore.open(tmp_path / "dense.mmr", "r") as reader:
        assert reader.episodes()[0].steps[-1] > 300, "the reopened writer did not continue the episode"
        assert_store_matches(reader, ref)


def test_n_step_and_sequence_samples_match_the_reference(tmp_path: Path) -> None:
    store, ref = make(tmp_path, capacity=400, num_envs=2)
    for args in vector_adds("breakout", 2, 300):
        store.add(*args)
        ref.add(*args)
    assert_n_step_matches(store.sample(300, rng=3, n_step=3, gamma=0.9), ref, 3, 0.9)
    assert_sequences_match(store.sample_sequences(100, 6, rng=4), ref, 6)
    store.close()


def test_an_add_that_fails_to_write_leaves_no_frame_compressed_against_its_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, ref = make(tmp_path, capacity=300, num_envs=2)
    adds = vector_adds("pong", 2, 120)
    for args in adds[:50]:
        store.add(*args)
        ref.add(*args)

    read_only: list[int] = []

    def unwritable(ring: FrameRing, segment: int) -> int:
        """The segment opened read-only: every write of the add, the compiled one included, fails."""
        read_only.append(open_regular(ring._segment_path(segment), os.O_RDONLY))
        return read_only[-1]

    with monkeypatch.context() as patch:
        patch.setattr(FrameRing, "_descriptor_of", unwritable)
        with pytest.raises(OSError):
            store.add(*adds[50])
    for descriptor in read_only:
        os.close(descriptor)
    # Env 1 alone writes the frame steps that the failed add had given to both envs; then both go on.
    only_env_1 = np.array([False, True])
    store.add(*adds[50], env_mask=only_env_1)
    add_masked(ref, adds[50], only_env_1)
    for args in adds[51:]:
        store.add(*args)
        ref.add(*args)
    assert_store_matches(store, ref)
    store.close()


def dense_pong_store(tmp_path: Path) -> tuple[Path, ReferenceStore]:
    """A closed single-env store (stack 1) of Pong's first episode: transition k shows frames k and k + 1."""
    store, ref = make(tmp_path, capacity=100, stack_size=1, scheme=ReferenceScheme(group_size=8, branching=8))
    for args in transitions("pong")[:40]:
        store.add(*args)
        ref.add(*args)
    store.close()
    ref_deltas = store_files.entry_format(tmp_path / "dense.mmr").ref_deltas(frame_table(tmp_path / "dense.mmr"))
    # Frames 8 to 15 form a group: 8 alone, 9-15 against 8.
    assert ref_deltas[8] == 0 and (ref_deltas[9:16] == np.arange(1, 8)).all()
    return tmp_path / "dense.mmr", ref


def flip_frame_byte(path: Path, frame_step: int) -> None:
    entry = frame_table(path)[frame_step : frame_step + 1]
    position = int(store_files.entry_format(path).positions(entry, store_files.header_of(path)["commit"]["bytes_written"])[0])
    segment = path / "frames" / "0000000000.seg"
    data = bytearray(segment.read_bytes())
    data[position + int(entry["length"][0]) // 2] ^= 0x40
    segment.write_bytes(bytes(data))


def test_a_damaged_reference_frame_fails_the_frames_compressed_against_it(tmp_path: Path) -> None:
    path, ref = dense_pong_store(tmp_path)
    flip_frame_byte(path, 8)
    with ReplayStore.open(path, "r") as store:
        # Transition 10 shows frames 10 and 11, both compressed against frame 8.
        with pytest.raises(FrameChecksumError, match=r"frame 8 \(a frame that a requested frame is compressed "
                           r"against\) fails its checksum or does not decode: .*0000000000\.seg") as info:
            store.read([10])
        assert isinstance(info.value, CorruptStoreError) and "transition 10" in str(info.value)
        with pytest.raises(FrameChecksumError, match=r"^frame 8 fails its checksum"):
            store.read([7])  # frames 7 and 8
        assert_batch_matches(store.read(np.arange(0, 7)), ref, np.arange(0, 7))  # the frames before it
        assert_batch_matches(store.read(np.arange(16, 39)), ref, np.arange(16, 39))  # and the next group


def test_a_damaged_reference_link_is_detected(tmp_path: Path) -> None:
    path, ref = dense_pong_store(tmp_path)
    # Frame 12 names frame 0 (another key frame) instead of 8 as its reference: a frame that decodes, but
    # not the frame 12 was compressed against.
    store_files.set_links(path, 12, ref_delta=12)
    with ReplayStore.open(path, "r") as store:
        with pytest.raises(FrameChecksumError, match=r"frame 12 fails its checksum .*frames-0\.idx is corrupt"):
            store.read([11])
        assert_batch_matches(store.read([13, 14]), ref, [13, 14])


def test_a_reference_chain_deeper_than_the_scheme_is_reported_as_corrupt(tmp_path: Path) -> None:
    path, _ = dense_pong_store(tmp_path)
    store_files.set_links(path, 8, ref_delta=1)  # the key frame 8 now names frame 7
    with ReplayStore.open(path, "r") as store:
        with pytest.raises(FrameChecksumError, match=r"longer than the 1 the scheme allows.*frames-0\.idx is corrupt"):
            store.read([12])


def test_the_header_records_the_encoding_and_a_plain_header_is_unchanged(tmp_path: Path) -> None:
    scheme = ReferenceScheme(group_size=16, branching=4, max_distance=1000)
    ReplayStore.create(tmp_path / "dense.mmr", frame_shape=(4, 4), capacity=10, frame_encoding=DENSE,
                       reference_scheme=scheme).close()  # fmt: skip
    ReplayStore.create(tmp_path / "plain.mmr", frame_shape=(4, 4), capacity=10, frame_encoding="lz4").close()
    dense = json.loads((tmp_path / "dense.mmr" / "header.json").read_text())["layout"]
    plain = json.loads((tmp_path / "plain.mmr" / "header.json").read_text())["layout"]
    assert dense["frame_encoding"] == DENSE
    assert dense["reference_scheme"] == {"group_size": 16, "branching": 4, "max_distance": 1000}
    assert "frame_encoding" not in plain and "reference_scheme" not in plain
    entry_size = store_files.entry_format(tmp_path / "dense.mmr").size
    assert (tmp_path / "dense.mmr" / "frames-0.idx").stat().st_size % entry_size == 0


def rewrite_header(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    """Edit the header and give it a valid checksum again (a header some other writer made)."""
    document = json.loads((path / "header.json").read_text())
    del document["checksum"]
    edit(document)
    document["checksum"] = zlib.crc32(json.dumps(document, sort_keys=True).encode())
    (path / "header.json").write_text(json.dumps(document))


def test_an_unknown_frame_encoding_is_refused_naming_the_file_and_the_encoding(tmp_path: Path) -> None:
    ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=10, frame_encoding=DENSE).close()
    rewrite_header(tmp_path / "s.mmr", lambda h: h["layout"].__setitem__("frame_encoding", "zstd-delta"))
    for mode in ("r", "r+"):
        with pytest.raises(FormatVersionError, match=r"s\.mmr/header\.json: frame encoding 'zstd-delta'; this "
                           r"mmreplay reads frame encodings 'lz4', 'lz4-reference'"):  # fmt: skip
            ReplayStore.open(tmp_path / "s.mmr", mode)


def test_an_invalid_reference_scheme_in_the_header_is_refused(tmp_path: Path) -> None:
    ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=10, frame_encoding=DENSE).close()
    rewrite_header(tmp_path / "s.mmr", lambda h: h["layout"]["reference_scheme"].__setitem__("branching", 1))
    with pytest.raises(CorruptStoreError, match=r"header\.json: header field reference_scheme\.branching is 1; expected "
                                                r"an integer in \[2, 32\]"):
        ReplayStore.open(tmp_path / "s.mmr", "r")


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"frame_encoding": "zstd"}, ValueError, "frame_encoding is 'zstd'; expected 'lz4' or 'lz4-reference'"),
        ({"frame_encoding": 3}, TypeError, "frame_encoding must be a str; got int 3"),
        ({"frame_encoding": "lz4", "reference_scheme": ReferenceScheme()}, ValueError,
         "reference_scheme is only for frame_encoding='lz4-reference'; got frame_encoding='lz4'"),
        ({"frame_encoding": DENSE, "reference_scheme": {"group_size": 8}}, TypeError,
         "reference_scheme must be a ReferenceScheme or None; got dict"),
    ],
)  # fmt: skip
def test_create_validates_the_encoding_before_making_anything(tmp_path: Path, options, error, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=10, **options)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("frame_shape", "frame_dtype", "expected"),
    [
        ((84, 84), np.uint8, DENSE),
        ((8, 8), np.uint8, DENSE),           # 64 bytes: the smallest reference frame by default
        ((64,), np.uint8, DENSE),
        ((2, 2, 16), np.uint8, DENSE),
        ((7, 9), np.uint8, "lz4"),           # 63 bytes
        ((1, 1), np.uint8, "lz4"),
        ((10, 10, 4), np.bool_, "lz4"),      # a MinAtar grid: not uint8
        ((84, 84), np.float32, "lz4"),
        ((84, 84), np.uint16, "lz4"),
    ],
)  # fmt: skip
def test_the_default_encoding_is_reference_frames_for_uint8_frames_of_64_bytes_or_more(
    tmp_path: Path, frame_shape: tuple[int, ...], frame_dtype: type, expected: str
) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=frame_shape, capacity=10, frame_dtype=frame_dtype) as store:
        assert store.frame_encoding == expected
    with ReplayStore.open(tmp_path / "s.mmr", "r") as reader:  # recorded in the header, not chosen again
        assert reader.frame_encoding == expected


def test_small_uint8_frames_take_reference_frames_by_name(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 3, size=(40, 2, 2), dtype=np.uint8)
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(2, 2), capacity=30, frame_encoding=DENSE) as store:
        assert store.frame_encoding == DENSE
        for i in range(35):
            store.add(frames[i], 0, 0.0, frames[i + 1], i == 20, False)
        steps = store.stored_steps
        batch = store.read(np.asarray(steps))
    assert len(steps) == 30
    for k, step in enumerate(steps):  # step i is the i-th add (one env, no episode restarts a step)
        assert np.array_equal(batch.next_obs[k, -1], frames[step + 1])


WRITE_WITHOUT_EXTENSION = """
import sys
import numpy as np
from mmreplay import ReplayStore
from mmreplay.frames import reference_codec
assert not reference_codec.ACCELERATED
data = np.load(sys.argv[2])
with ReplayStore.create(sys.argv[1], frame_shape=(84, 84), capacity=250, num_envs=2,
                        frame_encoding="lz4-reference") as store:
    for k in range(len(data["action"])):
        store.add(*(data[name][k] for name in ("obs", "action", "reward", "next_obs", "terminated", "truncated")))
"""


def test_a_store_written_without_the_extension_reads_back_exactly(tmp_path: Path) -> None:
    adds = vector_adds("mspacman", 2, 150)
    names = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
    np.savez(tmp_path / "adds.npz", **{name: np.stack([args[i] for args in adds]) for i, name in enumerate(names)})
    environment = {**os.environ, "MMREPLAY_PURE_PYTHON": "1"}
    subprocess.run([sys.executable, "-c", WRITE_WITHOUT_EXTENSION, str(tmp_path / "s.mmr"),
                    str(tmp_path / "adds.npz")], env=environment, check=True)  # fmt: skip
    ref = ReferenceStore(frame_shape=(84, 84), capacity=250, stack_size=4, num_envs=2)
    for args in adds:
        ref.add(*args)
    with ReplayStore.open(tmp_path / "s.mmr", "r") as store:
        assert_store_matches(store, ref)


def test_the_command_line_and_hdf5_export_read_a_dense_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mmreplay import export_hdf5, import_hdf5
    from mmreplay.cli import main, verify_store

    store, ref = make(tmp_path, capacity=300, num_envs=2)
    for args in vector_adds("pong", 2, 120):
        store.add(*args)
        ref.add(*args)
    assert "frame_encoding='lz4-reference'" in repr(store)
    store.close()
    path = tmp_path / "dense.mmr"
    assert main(["info", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["frame_encoding"] == DENSE
    report = verify_store(str(path))
    assert report["problems"] == [] and report["transitions"] == 240
    with ReplayStore.open(path, "r") as reader:
        assert reader.reference_scheme == ReferenceScheme(group_size=32, branching=2)  # the default
        assert export_hdf5(reader, tmp_path / "x.h5") == 240
    assert import_hdf5(tmp_path / "x.h5", tmp_path / "copy.mmr") == 240
    with ReplayStore.open(tmp_path / "copy.mmr", "r") as copy:
        assert copy.frame_encoding == DENSE  # the default for uint8 frames
        assert_batch_matches(copy.read(np.arange(240)), ref, np.arange(240))


def test_verify_names_the_transitions_that_a_damaged_reference_frame_breaks(tmp_path: Path) -> None:
    from mmreplay.cli import verify_store

    path, _ = dense_pong_store(tmp_path)
    flip_frame_byte(path, 8)
    report = verify_store(str(path))
    assert report["damaged_steps"] == list(range(7, 16))  # frames 8 to 15 need frame 8
    assert [frame["step"] for frame in report["damaged_frames"]] == list(range(8, 16))
    assert "fails its checksum" in report["damaged_frames"][0]["problem"]
    assert all("compressed against" in frame["problem"] for frame in report["damaged_frames"][1:])


def test_a_frame_table_that_grows_keeps_the_references(tmp_path: Path) -> None:
    # One-transition episodes whose obs stacks hold four distinct frames: the five frames of each of 400
    # stored transitions outnumber the frame table's ~1,500 slots, and the store moves its frame table to
    # a larger generation.
    store, ref = make(tmp_path, capacity=400, scheme=ReferenceScheme(group_size=16, branching=4))
    frames = stream("breakout")["frames"]
    for k in range(700):
        t = 5 * k % 3900
        args = (frames[t : t + 4], k % 4, 1.0, frames[t + 1 : t + 5], True, False)
        store.add(*args)
        ref.add(*args)
        if k % 100 == 99:
            assert_store_matches(store, ref)
    store.close()
    assert json.loads((tmp_path / "dense.mmr" / "header.json").read_text())["commit"]["frame_table_generation"] > 0
    with ReplayStore.open(tmp_path / "dense.mmr", "r") as reader:
        assert_store_matches(reader, ref)


@functools.cache
def wrapped_vector_store(directory: str, game: str) -> Path:
    """A closed reference store of two envs of ``game``, capacity 300 after 400 vector adds: evicted,
    segments released."""
    path = Path(directory) / f"{game}.mmr"
    store = ReplayStore.create(path, frame_shape=(84, 84), capacity=300, stack_size=4, num_envs=2,
                               frame_encoding=DENSE, reference_scheme=ReferenceScheme(group_size=64, branching=4))
    with store:
        for args in vector_adds(game, 2, 200):
            store.add(*args)
    return path


@pytest.fixture(scope="module")
def wrapped_stores(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("wrapped"))


def compiled_ring_with(ring: ReferenceFrameRing, *, depth: int) -> tuple[object, ...]:
    """The ring's ``ring`` argument (``compiled_ring``), its geometry made for chains of at most ``depth``."""
    _, table, bytes_written, views, base = ring.compiled_ring()
    geometry = _lz4batch.ring_geometry(ring._format.layout, ring.frame_slots, SEED_MULTIPLIER, ring.segment_bytes,
                                       ring.frame_nbytes, depth=depth, row_nbytes=84, unit=7)
    return geometry, table, bytes_written, views, base


@pytest.mark.skipif(_lz4batch is None, reason=absent_reason("_lz4batch"))
@settings(max_examples=30)
@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(1, 300),
    threads=st.sampled_from([1, 2, 3, 8]),
    game=st.sampled_from(["pong", "mspacman"]),
)
@example(seed=363, count=1, threads=1, game="pong")  # one frame: an unaligned checksum view
def test_the_compiled_decode_of_a_reference_ring_equals_its_general_path(
    wrapped_stores: str, seed: int, count: int, threads: int, game: str
) -> None:
    """``decode_into``'s compiled path (``_lz4batch.decode_entries``: each frame rebuilt in its row from the
    nearest frame decoded before it, a run of rows a thread) against its Python path, on frames drawn with
    repeats from the last 300 written (two envs interleaved, references shared across the batch)."""
    path = wrapped_vector_store(wrapped_stores, game)
    with ReplayStore.open(path, "r") as store:
        store.sample(1, rng=0)  # maps the segments: the compiled path reads through the mapped views
        ring = internals.files_of(store).frames
        assert ring.compiled_ring() is not None
        steps = np.random.default_rng(seed).integers(ring.frames_written - 300, ring.frames_written, count)
        fast = np.zeros((count, 84, 84), np.uint8)
        assert _lz4batch.decode_entries(ring.compiled_ring(), steps, fast, threads)
        general = np.zeros_like(fast)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(type(ring), "decode_compiled", lambda self, *args, **kwargs: False)
            ring.decode_into(steps, general, limit=threads)
        np.testing.assert_array_equal(fast, general)


@pytest.mark.skipif(_lz4batch is None, reason=absent_reason("_lz4batch"))
def test_a_reference_stores_sampled_batch_is_read_in_the_one_compiled_call(wrapped_stores: str) -> None:
    """``sample`` of a reference store reads rows, stacks and frames in ``read_transitions``, as a plain
    store's does: ``decode_into`` (the Python path) is never reached when nothing is damaged."""
    path = wrapped_vector_store(wrapped_stores, "mspacman")
    with ReplayStore.open(path, "r") as store:
        expected = store.sample(64, rng=3)

        def general_path(*args: object, **kwargs: object) -> None:
            raise AssertionError("the batch left the compiled read")

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(type(internals.files_of(store).frames), "decode_into", general_path)
            store.sample(1, rng=4)  # the first batch after open may map its segments on the general path
            batch = store.sample(64, rng=3)
        for name in ("obs", "next_obs", "action", "reward", "terminated", "truncated", "env_index"):
            np.testing.assert_array_equal(getattr(batch, name), getattr(expected, name))


def test_a_damaged_reference_is_found_by_the_compiled_read_and_named_by_the_general_path(tmp_path: Path) -> None:
    """The compiled read declines a batch whose reference fails its CRC (it names nothing), and the
    general path then names the frame at fault."""
    path, _ = dense_pong_store(tmp_path)
    flip_frame_byte(path, 8)
    with ReplayStore.open(path, "r") as store:
        store.read([20])  # maps the segment
        ring = internals.files_of(store).frames
        if _lz4batch is not None:
            out = np.zeros((2, 84, 84), np.uint8)
            assert not _lz4batch.decode_entries(ring.compiled_ring(), np.array([12, 13]), out, 2)
        with pytest.raises(FrameChecksumError, match=r"^frame 8 \(a frame that a requested frame is compressed"):
            store.read([12])


@pytest.mark.skipif(_lz4batch is None, reason=absent_reason("_lz4batch"))
def test_the_compiled_read_declines_a_chain_longer_than_its_depth_or_leading_before_step_0(tmp_path: Path) -> None:
    """The compiled read follows each chain at most ``depth`` references and never before frame step 0:
    a frame whose (intact) chain is longer than the depth it is given, or whose key frame names a frame
    before step 0, is declined rather than decoded, and the frames within reach still decode."""
    path, _ = dense_pong_store(tmp_path)  # depth 1: frames 9-15 reference the key frame 8
    frames = [obs for obs, *_ in transitions("pong")[:40]]  # frame k: transition k's obs
    with ReplayStore.open(path, "r") as store:
        store.read([20])  # maps the segment

        def compiled(steps: list[int], depth: int) -> bool:
            out = np.zeros((len(steps), 84, 84), np.uint8)
            done = _lz4batch.decode_entries(compiled_ring_with(internals.files_of(store).frames, depth=depth), np.array(steps),
                                            out, 1)
            if done:
                for row, step in enumerate(steps):
                    np.testing.assert_array_equal(out[row], frames[step])
            return bool(done)

        assert compiled([8, 12, 13], depth=1)
        assert not compiled([8, 12], depth=0)  # 12 -> 8 is one reference
        assert compiled([8, 16], depth=0)  # key frames alone
    store_files.set_links(path, 0, ref_delta=1)  # the key frame 0 now names frame -1
    with ReplayStore.open(path, "r") as store:
        store.read([20])
        assert not compiled([3], depth=1)
        assert compiled([12], depth=1)


@pytest.mark.parametrize(("encoding", "version"), [("lz4", 4), ("lz4", 5), ("lz4", 6), (DENSE, 6)])
def test_one_frame_decodes_on_the_numpy_path_before_any_segment_is_mapped(
    tmp_path: Path, encoding: str, version: int
) -> None:
    """A ring's numpy path (what runs before a reader has mapped its segments, or where the compiled read
    declines) decodes a single frame: its packed table entry's checksum field, one item long, is a
    contiguous but unaligned view, which the decoder's arrays are copied out of (a CI run drew it)."""
    frames = np.ascontiguousarray(load_stream("pong", ("frames",), 40)["frames"])
    with store_files.writing_version(version):
        store = ReplayStore.create(tmp_path / "s.mmr", frame_shape=(84, 84), capacity=30, frame_encoding=encoding)
    with store:
        for t in range(len(frames) - 1):
            store.add(frames[t], 0, 0.0, frames[t + 1], False, False)
    with ReplayStore.open(tmp_path / "s.mmr", "r") as reader:
        ring = internals.files_of(reader).frames
        for step in (ring.frames_written - 1, ring.frames_written - 20):
            out = np.zeros((1, 84, 84), np.uint8)
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(type(ring), "decode_compiled", lambda self, *args, **kwargs: False)
                ring.decode_into(np.array([step]), out, limit=1)
            np.testing.assert_array_equal(out[0], frames[step])
