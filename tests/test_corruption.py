"""Corruption is detected, never served: a flipped byte or a truncated file anywhere in a real store.

Two real stores are built once: MsPacman frames (large enough frames for several segments, one of them
already released) in a uniform store, and Pong frames in a prioritized store, both wrapped around. For
every file of each store a byte that holds live data is flipped (and, separately, the file is
truncated); then ``open``, ``read`` of every stored step and ``sample`` must either raise
``CorruptStoreError`` naming the damaged file (and the transition, for rows and frames) or return
exactly the reference model's data. Bytes that hold nothing live are flipped too: then nothing may be
detected and the data must be exact. The on-disk layout used to find live bytes is the one docs/formats.md
documents (header commit counts, the frame table's entries and the transition table's rows of the store's
format version, through ``store_files``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import store_files
from atari_data import load_stream
from reference import ReferenceStore, assert_batch_matches

from mmreplay import CorruptStoreError, PrioritizedSampler, ReplayStore
from mmreplay.rows.transitions import FLAG_BITS

# Bytes of a transition row of a store of one env with an int64 action (docs/formats.md, "The store's
# files"): the row field, the byte in it and the bits flipped there. Format version 5 packs the env with the
# flags (the flags in the low FLAG_BITS bits): its env is flipped above them.
ROW_FIELDS = {
    "checksum": ("checksum", 0, 0x01), "next_delta": ("next_delta", 0, 0x02), "frame_lead": ("frame_lead", 0, 0x01),
    "frame_lead high byte": ("frame_lead", 3, 0x01), "env": ("flags_env", 0, 1 << FLAG_BITS),
    "reward": ("reward", 0, 0x01), "reward sign": ("reward", 3, 0x01), "flags": ("flags_env", 0, 0x01),
    "action": ("action", 0, 0x01), "action high byte": ("action", 7, 0x01),
}


def row_byte(built: Built, step: int, field: str) -> tuple[int, int]:
    """The offset in transitions.tbl of ``field``'s byte (ROW_FIELDS) in ``step``'s row, and its mask."""
    rows = store_files.rows_dtype(built.path)
    name, byte, mask = ROW_FIELDS[field]
    return (step % built.layout["row_slots"]) * rows.itemsize + store_files.field_offsets(rows)[name] + byte, mask


def entry_byte(built: Built, frame: int, field: str, byte: int = 0) -> int:
    """The offset in the frame table of the ``byte``-th byte of ``field`` in ``frame``'s entry."""
    entries = store_files.entry_format(built.path)
    return (frame % built.commit["frame_slots"]) * entries.size + store_files.field_offsets(entries.dtype)[field] + byte


def _stream(game: str, frames: int) -> dict[str, np.ndarray]:
    return load_stream(game, ("frames", "action", "reward", "terminated"), frames)


class Built:
    """A closed store on disk and the reference model fed the same adds."""

    def __init__(self, path: Path, ref: ReferenceStore) -> None:
        self.path = path
        self.ref = ref
        header = json.loads((path / "header.json").read_text())
        self.commit = header["commit"]
        self.layout = header["layout"]

    def copy(self, destination: Path) -> Path:
        shutil.copytree(self.path, destination)
        return destination


def _build(path: Path, game: str, *, transitions: int, capacity: int, prioritized: bool) -> Built:
    s = _stream(game, transitions + 200)
    kwargs = dict(frame_shape=(84, 84), capacity=capacity, stack_size=4)
    sampler = PrioritizedSampler() if prioritized else None
    ref = ReferenceStore(**kwargs)
    rng = np.random.default_rng(0)
    with ReplayStore.create(path, sampler=sampler, **kwargs) as store:
        added = 0
        for t in np.flatnonzero(s["action"][:-1] >= 0):
            # Truncate now and then, so that short episodes (padded stacks) are stored too.
            truncated = bool(rng.random() < 0.02)
            args = (s["frames"][t], np.int64(s["action"][t]), s["reward"][t], s["frames"][t + 1],
                    bool(s["terminated"][t]), truncated)
            store.add(*args)
            ref.add(*args)
            added += 1
            if prioritized and added % 10 == 0:
                batch = store.sample(8, rng)
                store.update_priorities(batch.index, rng.exponential(1.0, 8))
            if added % 97 == 0:
                store.flush()
            if added == transitions:
                break
    return Built(path, ref)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    root = tmp_path_factory.mktemp("corruption")
    return {
        "uniform": _build(root / "mspacman.mmr", "mspacman", transitions=1400, capacity=600, prioritized=False),
        "prioritized": _build(root / "pong.mmr", "pong", transitions=700, capacity=300, prioritized=True),
    }


@pytest.fixture(params=["uniform", "prioritized"])
def built(request: pytest.FixtureRequest, stores: dict[str, Built], tmp_path: Path) -> Iterator[Built]:
    original = stores[request.param]
    yield Built(original.copy(tmp_path / "store.mmr"), original.ref)


# -- checks ----------------------------------------------------------------------------------------


def _n_step_expected(ref: ReferenceStore, steps: np.ndarray, n: int, gamma: float) -> dict[str, np.ndarray]:
    """n-step returns by plain iteration over the reference's episodes."""
    where = {}
    for episodes in ref.episodes:
        for episode in episodes:
            for position, item in enumerate(episode):
                where[item.step] = (episode, position)
    reward, next_obs, discount = [], [], []
    for step in steps.tolist():
        episode, position = where[step]
        window = episode[position : position + n]
        reward.append(np.float32(sum(gamma**k * float(t.reward) for k, t in enumerate(window))))
        next_obs.append(window[-1].next_obs)
        discount.append(np.float32(0.0 if window[-1].terminated else gamma ** len(window)))
    return {"reward": np.array(reward, np.float32), "next_obs": np.array(next_obs), "discount": np.array(discount)}


def _operations(store: ReplayStore, ref: ReferenceStore, *, links: bool) -> Iterator[tuple[str, Callable[[], None]]]:
    """Each read a user can make, with the check that what it returns is exactly the reference's."""
    stored = np.arange(store.stored_steps.start, store.stored_steps.stop)

    def read_all() -> None:
        for lo in range(0, len(stored), 256):
            assert_batch_matches(store.read(stored[lo : lo + 256]), ref, stored[lo : lo + 256])

    def sample() -> None:
        assert_batch_matches(store.sample(256, rng=1), ref)

    def n_step() -> None:
        batch = store.sample(2048, rng=2, n_step=3, gamma=0.5)
        want = _n_step_expected(ref, batch.index, 3, 0.5)
        np.testing.assert_allclose(batch.reward, want["reward"], rtol=1e-6, err_msg="n-step reward served wrong")
        assert np.array_equal(batch.next_obs, want["next_obs"]), "n-step next_obs served wrong"
        np.testing.assert_allclose(batch.discount, want["discount"], rtol=1e-6, err_msg="n-step discount wrong")

    def sequences() -> None:
        batch = store.sample_sequences(256, 3, rng=3)
        for i, step in enumerate(batch.index[:, 0].tolist()):
            length = int(batch.mask[i].sum())
            expected_steps = [t.step for t in _window(ref, step, 3)]
            assert batch.index[i, :length].tolist() == expected_steps, f"sequence from step {step} served wrong"
            assert length == len(expected_steps)
            assert np.array_equal(batch.obs[i, :length], ref.expected(expected_steps)["obs"])

    yield "read", read_all
    yield "sample", sample
    if links:
        yield "sample n_step=3", n_step
        yield "sample_sequences", sequences


def _window(ref: ReferenceStore, step: int, n: int) -> list:
    for episodes in ref.episodes:
        for episode in episodes:
            for position, item in enumerate(episode):
                if item.step == step:
                    return episode[position : position + n]
    raise KeyError(step)


def outcomes(built: Built, *, links: bool = False) -> dict[str, str | None]:
    """Open the store read-only and run every operation: the message of the CorruptStoreError each raised,
    or None when it returned exactly the reference's data (wrong data fails the test at once; so does any
    other exception). Only messages are kept: see test_a_store_closes_while_a_corrupt_read_error_is_kept."""
    try:
        store = ReplayStore.open(built.path, "r")
    except CorruptStoreError as error:
        return {"open": str(error)}
    results: dict[str, str | None] = {"open": None}
    with store:
        for name, operation in _operations(store, built.ref, links=links):
            try:
                operation()
                results[name] = None
            except CorruptStoreError as error:
                results[name] = str(error)
    return results


def assert_detected(results: dict[str, str | None], file_name: str, step: int | None = None) -> None:
    errors = {name: error for name, error in results.items() if error is not None}
    assert errors, f"corruption of {file_name} went undetected (every read returned data, all of it exact)"
    for name, error in errors.items():
        assert file_name in error, f"{name} raised {error!r}, which does not name {file_name}"
        if step is not None and name != "open":
            assert f"transition {step}" in error, f"{name} raised {error!r}, which does not name the step {step}"


def assert_exact(results: dict[str, str | None], what: str) -> None:
    errors = {name: error for name, error in results.items() if error is not None}
    assert not errors, f"{what} holds nothing live, yet reads failed: {errors}"


def flip(path: Path, offset: int, mask: int = 0xFF) -> Callable[[], None]:
    """XOR one byte with ``mask``; returns the function that restores it."""
    with open(path, "r+b") as file:
        file.seek(offset)
        old = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([old ^ mask]))

    def restore() -> None:
        with open(path, "r+b") as file:
            file.seek(offset)
            file.write(bytes([old]))

    return restore


def live_frames(built: Built) -> np.ndarray:
    """The frame steps that stored transitions need: [frame_tail, frames_written)."""
    return np.arange(built.commit["frame_tail"], built.commit["frames_written"])


def frame_table(built: Built) -> np.ndarray:
    """Each slot's frame position (made whole: format version 5 keeps its low 32 bits) and length."""
    entries = store_files.entry_format(built.path)
    raw = store_files.frame_table(built.path)
    table = np.zeros(len(raw), [("position", "<u8"), ("length", "<u8")])
    table["position"] = entries.positions(raw, built.commit["bytes_written"])
    table["length"] = raw["length"]
    return table


# -- the header ------------------------------------------------------------------------------------


def test_every_flipped_byte_of_the_header_is_detected_or_harmless(built: Built) -> None:
    path = built.path / "header.json"
    size = path.stat().st_size
    harmless = 0
    for offset in range(size):
        for mask in (0x01, 0x80):
            restore = flip(path, offset, mask)
            try:
                store = ReplayStore.open(built.path, "r")
            except CorruptStoreError as error:
                assert "header.json" in str(error), f"byte {offset}: {error!r} does not name header.json"
            else:  # a flip JSON reads the same way (whitespace): the data must be exact
                harmless += 1
                with store:
                    assert store.transitions_added == built.ref.transitions_added
                    stored = np.arange(store.stored_steps.start, store.stored_steps.stop)
                    assert_batch_matches(store.read(stored), built.ref, stored)
            restore()
    assert harmless < size // 20, f"{harmless} flips of {2 * size} left the header readable"


@pytest.mark.parametrize("length", [0, 1, 100, -1])
def test_a_truncated_header_is_detected(built: Built, length: int) -> None:
    path = built.path / "header.json"
    size = path.stat().st_size
    with open(path, "r+b") as file:
        file.truncate(length if length >= 0 else size - 2)
    assert_detected(outcomes(built), "header.json")


# -- the transition table --------------------------------------------------------------------------


@pytest.mark.parametrize("field", sorted(set(ROW_FIELDS) - {"next_delta"}))
def test_a_flipped_byte_in_a_stored_row_is_detected_naming_the_file_and_the_step(built: Built, field: str) -> None:
    path = built.path / "transitions.tbl"
    stored = built.ref.stored_steps()
    for step in (int(stored[0]), int(stored[len(stored) // 2]), int(stored[-1])):
        restore = flip(path, *row_byte(built, step, field))
        assert_detected(outcomes(built), "transitions.tbl", step)
        restore()
    assert_exact(outcomes(built), "the restored table")


def _linked_step(built: Built) -> int:
    """A stored step whose episode goes on for at least three more transitions."""
    for step in built.ref.stored_steps()[len(built.ref) // 2 :].tolist():
        if len(_window(built.ref, step, 4)) == 4:
            return step
    raise AssertionError("no long episode stored")


def test_a_flipped_episode_link_in_a_stored_row_is_detected_or_harmless(built: Built) -> None:
    path = built.path / "transitions.tbl"
    step = _linked_step(built)
    # next_delta 1 -> 3: still a later transition of the same env and episode, two steps too far.
    flip(path, *row_byte(built, step, "next_delta"))
    results = outcomes(built, links=True)
    if any(results.values()):
        assert_detected(results, "transitions.tbl", step)


def test_a_flipped_byte_in_a_row_that_is_not_stored_changes_nothing(built: Built) -> None:
    path = built.path / "transitions.tbl"
    evicted = int(built.ref.stored_steps()[0]) - 1  # its slot is free until the ring comes round
    never = built.ref.transitions_added + 5  # a slot not written yet on this lap
    for step in (evicted, never):
        for field in ("checksum", "frame_lead", "reward"):
            flip(path, *row_byte(built, step, field))
    assert_exact(outcomes(built, links=True), "rows of unstored steps")


def test_a_truncated_transition_table_is_detected(built: Built) -> None:
    path = built.path / "transitions.tbl"
    with open(path, "r+b") as file:
        file.truncate(path.stat().st_size // 2)
    assert_detected(outcomes(built), "transitions.tbl")


# -- the frame table -------------------------------------------------------------------------------


@pytest.mark.parametrize("field,byte", [("position", 0), ("position", 2), ("length", 0), ("checksum", 0),
                                        ("links", 0)])
def test_a_flipped_byte_in_a_live_frame_entry_is_detected_naming_the_file(built: Built, field: str,
                                                                          byte: int) -> None:
    name = f"frames-{built.commit['frame_table_generation']}.idx"
    frames = live_frames(built)
    for frame in (int(frames[0]), int(frames[len(frames) // 2]), int(frames[-1])):
        restore = flip(built.path / name, entry_byte(built, frame, field, byte), 0x01)
        assert_detected(outcomes(built), name)
        restore()
    assert_exact(outcomes(built), "the restored frame table")


def test_a_flipped_position_high_byte_names_the_frame_table(built: Built) -> None:
    name = f"frames-{built.commit['frame_table_generation']}.idx"
    frame = int(live_frames(built)[-1])
    last = store_files.entry_format(built.path).dtype["position"].itemsize - 1  # the low 32 bits' top byte
    flip(built.path / name, entry_byte(built, frame, "position", last), 0x01)
    assert_detected(outcomes(built), name)


def test_a_flipped_byte_in_a_frame_entry_that_is_not_live_changes_nothing(built: Built) -> None:
    name = f"frames-{built.commit['frame_table_generation']}.idx"
    unused = [built.commit["frame_tail"] - 1, built.commit["frames_written"] + 3]
    for frame in unused:
        flip(built.path / name, entry_byte(built, frame, "checksum"), 0x01)
    assert_exact(outcomes(built), "frame entries that are not live")


def test_a_truncated_frame_table_is_detected(built: Built) -> None:
    name = f"frames-{built.commit['frame_table_generation']}.idx"
    path = built.path / name
    with open(path, "r+b") as file:
        file.truncate(path.stat().st_size // 2)
    assert_detected(outcomes(built), name)


# -- the segments ----------------------------------------------------------------------------------


def _segments(built: Built) -> list[Path]:
    return sorted((built.path / "frames").glob("*.seg"))


def test_a_flipped_byte_in_each_segment_is_detected_naming_the_file_and_the_transition(built: Built) -> None:
    table = frame_table(built)
    slots = built.commit["frame_slots"]
    segment_bytes = built.layout["segment_bytes"]
    frames = live_frames(built)
    entries = table[frames % slots]
    segments = entries["position"] // segment_bytes
    assert len(_segments(built)) == len(np.unique(segments)), "a segment file holds no live frame"
    for segment in np.unique(segments).tolist():
        in_segment = np.flatnonzero(segments == segment)
        for i in (int(in_segment[0]), int(in_segment[-1])):
            entry = entries[i]
            offset = int(entry["position"]) % segment_bytes + int(entry["length"]) // 2
            path = built.path / "frames" / f"{segment:010d}.seg"
            restore = flip(path, offset, 0x01)
            results = outcomes(built)
            assert_detected(results, path.name)
            assert any("transition" in e for e in results.values() if e is not None), results
            restore()
    assert_exact(outcomes(built), "the restored segments")


def test_a_flipped_byte_in_a_segment_outside_live_frames_changes_nothing(built: Built) -> None:
    segment_bytes = built.layout["segment_bytes"]
    written = built.commit["bytes_written"]
    last = built.path / "frames" / f"{written // segment_bytes:010d}.seg"
    flip(last, written % segment_bytes + 10, 0x01)  # past the newest frame
    tail_position = int(frame_table(built)[built.commit["frame_tail"] % built.commit["frame_slots"]]["position"])
    if tail_position % segment_bytes > 10:  # before the oldest live frame, in the same segment
        first = built.path / "frames" / f"{tail_position // segment_bytes:010d}.seg"
        flip(first, tail_position % segment_bytes - 5, 0x01)
    assert_exact(outcomes(built), "segment bytes outside live frames")


def test_each_truncated_segment_is_detected(built: Built, tmp_path: Path) -> None:
    for index, segment in enumerate(_segments(built)):
        copy = Built(built.copy(tmp_path / f"copy{index}.mmr"), built.ref)
        path = copy.path / "frames" / segment.name
        with open(path, "r+b") as file:
            file.truncate(path.stat().st_size // 2)
        assert_detected(outcomes(copy), segment.name)


def test_a_deleted_segment_is_detected(built: Built) -> None:
    segment = _segments(built)[0]
    segment.unlink()
    assert_detected(outcomes(built), segment.name)


# -- the priorities --------------------------------------------------------------------------------


def _leaf_offset(built: Built, step: int) -> int:
    size = 1 << max(0, (built.layout["row_slots"] - 1).bit_length())
    return (size + step % built.layout["row_slots"]) * 8


@pytest.fixture
def prioritized(stores: dict[str, Built], tmp_path: Path) -> Built:
    original = stores["prioritized"]
    return Built(original.copy(tmp_path / "store.mmr"), original.ref)


def test_a_stored_priority_made_negative_is_detected(prioritized: Built) -> None:
    step = int(prioritized.ref.stored_steps()[10])
    flip(prioritized.path / "priorities.tree", _leaf_offset(prioritized, step) + 7, 0x80)  # the sign bit
    assert_detected(outcomes(prioritized), "priorities.tree")


def test_a_flipped_byte_in_a_stored_priority_is_detected(prioritized: Built) -> None:
    step = int(prioritized.ref.stored_steps()[10])
    flip(prioritized.path / "priorities.tree", _leaf_offset(prioritized, step) + 6, 0x01)
    assert_detected(outcomes(prioritized), "priorities.tree")


def test_a_flipped_byte_in_an_internal_node_of_the_priority_tree_changes_nothing(prioritized: Built) -> None:
    flip(prioritized.path / "priorities.tree", 8 * 3 + 5, 0x01)  # node 3: a sum rebuilt from the leaves
    before = outcomes(prioritized)
    assert_exact(before, "internal nodes of the priority tree")


def test_a_truncated_priority_tree_is_detected(prioritized: Built) -> None:
    path = prioritized.path / "priorities.tree"
    with open(path, "r+b") as file:
        file.truncate(path.stat().st_size // 2)
    try:
        results = outcomes(prioritized)
    except ValueError as error:
        raise AssertionError(f"not a CorruptStoreError: {error!r}") from None
    assert_detected(results, "priorities.tree")


def test_a_store_closes_while_a_corrupt_read_error_is_kept(built: Built) -> None:
    segment = _segments(built)[-1]
    entry = frame_table(built)[(built.commit["frames_written"] - 1) % built.commit["frame_slots"]]
    flip(segment, int(entry["position"]) % built.layout["segment_bytes"] + 1, 0x01)
    store = ReplayStore.open(built.path, "r")
    kept = []
    try:
        store.read(np.array([built.ref.transitions_added - 1]))
    except CorruptStoreError as error:
        kept.append(error)  # e.g. logged later, or re-raised by a training loop
    assert kept
    store.close()
    assert store.closed


# -- the lock file and verify ---------------------------------------------------------------------


def test_the_lock_file_holds_no_data(built: Built) -> None:
    lock = built.path / "writer.lock"
    assert not lock.exists() or lock.stat().st_size == 0
    lock.unlink(missing_ok=True)
    assert_exact(outcomes(built), "a store without writer.lock")


def test_verify_lists_the_corrupt_file(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        from mmreplay.cli import main
    except ImportError:
        pytest.skip("mmreplay.cli does not exist yet (the CLI and its verify command are another engineer's work)")
    assert main(["verify", str(built.path)]) == 0
    capsys.readouterr()
    segment = _segments(built)[-1]
    entry = frame_table(built)[(built.commit["frames_written"] - 1) % built.commit["frame_slots"]]
    flip(segment, int(entry["position"]) % built.layout["segment_bytes"] + 1, 0x01)
    assert main(["verify", str(built.path)]) == 1
    captured = capsys.readouterr()
    assert segment.name in captured.out + captured.err
