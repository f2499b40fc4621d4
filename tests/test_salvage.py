"""``salvage`` keeps every intact transition, bit-exact, and drops exactly the damaged ones.

The model of which transitions must survive is plain: every frame of these stores is distinct and says
which it is (``test_damage.tagged``), so a transition is read as the set of frames its obs and next_obs
show. One flipped byte damages one row (that transition goes) or one frame (its block or its table entry:
every transition that shows that frame goes, and in a reference store every one that shows a frame
compressed against it, following the reference links of the undamaged table). Hypothesis picks the byte;
the salvaged store must hold exactly the survivors, in order, each exactly as the undamaged store read it,
and never join two parts of an episode across a dropped transition.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import store_files
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_damage import build, cli

import mmreplay
from mmreplay import CorruptStoreError, DamagedStoreError, ReplayStore
from mmreplay.cli import verify_store
from mmreplay.rows.transitions import unchecked_bytes
from mmreplay.store import internals

ENCODINGS = ["lz4", "lz4-reference"]


class Clean:
    """An undamaged store and what the model needs of it: every stored transition as read, the tags of
    the frames each shows, each live frame's tag and reference, and the episodes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        document = store_files.header_of(path)
        self.layout, self.commit = document["layout"], document["commit"]
        with ReplayStore.open(path) as store:
            self.steps = np.arange(store.stored_steps.start, store.stored_steps.stop)
            self.batch = store.read(self.steps)
            self.episodes = [episode.steps.tolist() for episode in store.episodes()]
            files = internals.files_of(store)
            frames = np.arange(self.commit["frame_tail"], self.commit["frames_written"])
            pixels = np.empty((len(frames), *store.frame_shape), np.uint8)
            files.frames.decode_into(frames, pixels, limit=1)
        self.frames = frames
        self.frame_tags = [tag_of(frame) for frame in pixels]
        entries = store_files.entry_format(path)
        table = store_files.frame_table(path)[frames % self.commit["frame_slots"]]
        self.references = (frames - entries.ref_deltas(table)) if self.layout.get("reference_scheme") else frames
        self.shown = [{tag_of(f) for f in (*self.batch.obs[i], *self.batch.next_obs[i])} for i in range(len(self.steps))]

    def survivors_of_frame(self, frame: int) -> np.ndarray:
        """The stored steps that survive damage to ``frame``: none shows it, or a frame compressed against it."""
        damaged = {frame}
        for f, reference in zip(self.frames.tolist(), self.references.tolist()):
            if f != reference and reference in damaged:
                damaged.add(f)
        tags = {self.frame_tags[f - int(self.frames[0])] for f in damaged}
        return self.steps[[not (shown & tags) for shown in self.shown]]


def tag_of(frame: np.ndarray) -> int:
    return int.from_bytes(frame.reshape(-1)[:4].tobytes(), "little")


@pytest.fixture(scope="module", params=ENCODINGS)
def clean(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Clean:
    root = tmp_path_factory.mktemp(f"salvage-{request.param}")
    return Clean(build(root / "clean.mmr", request.param, num_envs=2, transitions=60, stack_size=3))


def flip(path: Path, offset: int, mask: int) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        old = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([old ^ mask]))


def damage_row(clean: Clean, copy: Path, step: int, byte: int, mask: int) -> None:
    """Flip a checked byte (after checksum and next_delta) of the row of ``step``... or of its checksum."""
    dtype = store_files.rows_dtype(copy)
    checked = [*range(0, 4), *range(unchecked_bytes(dtype), dtype.itemsize)]
    offset = (step % clean.layout["row_slots"]) * dtype.itemsize + checked[byte % len(checked)]
    flip(copy / "transitions.tbl", offset, mask)


def damage_frame(clean: Clean, copy: Path, frame: int, byte: int, mask: int, *, entry: bool) -> None:
    """Flip a byte of ``frame``'s block, or of its frame table entry."""
    entries = store_files.entry_format(copy)
    slot = frame % clean.commit["frame_slots"]
    if entry:
        flip(store_files.frame_table_path(copy), slot * entries.size + byte % entries.size, mask)
        return
    raw = store_files.frame_table(copy)[slot : slot + 1]
    position = int(entries.positions(raw, clean.commit["bytes_written"])[0])
    length = int(raw["length"][0])
    segment, offset = divmod(position, clean.layout["segment_bytes"])
    flip(copy / "frames" / f"{segment:010d}.seg", offset + byte % length, mask)


def assert_salvaged(clean: Clean, source: Path, target: Path, survivors: np.ndarray) -> None:
    summary = mmreplay.salvage(source, target)
    assert (summary.kept, summary.dropped) == (len(survivors), len(clean.steps) - len(survivors)), summary
    with ReplayStore.open(target) as new:
        assert len(new) == len(survivors)
        if len(survivors):
            got = new.read(np.arange(len(survivors)))
            want = np.searchsorted(clean.steps, survivors)
            for name in ("obs", "next_obs", "action", "reward", "terminated", "truncated", "env_index"):
                assert np.array_equal(getattr(got, name), getattr(clean.batch, name)[want]), name
        # Each salvaged episode is a run of one source episode's consecutive transitions.
        position = {step: (number, i) for number, steps in enumerate(clean.episodes) for i, step in enumerate(steps)}
        for episode in new.episodes():
            source_steps = survivors[episode.steps]
            places = [position[int(step)] for step in source_steps]
            assert len({number for number, _ in places}) == 1, f"episode {episode.id} joins source episodes"
            assert [i for _, i in places] == list(range(places[0][1], places[0][1] + len(places)))


# -- the checks of the closing note, as tests --------------------------------------------------------


def test_a_store_without_damage_is_salvaged_whole(clean: Clean, tmp_path: Path) -> None:
    assert_salvaged(clean, clean.path, tmp_path / "new.mmr", clean.steps)


def test_salvage_of_a_store_with_one_damaged_row_keeps_every_other_transition(clean: Clean, tmp_path: Path) -> None:
    copy = tmp_path / "damaged.mmr"
    shutil.copytree(clean.path, copy)
    step = int(clean.steps[len(clean.steps) // 2])
    damage_row(clean, copy, step, 0, 0x01)
    with pytest.raises(CorruptStoreError):
        with ReplayStore.open(copy) as store:
            store.read(clean.steps)
    assert_salvaged(clean, copy, tmp_path / "new.mmr", clean.steps[clean.steps != step])


def test_salvage_of_a_store_with_one_damaged_frame_keeps_every_transition_whose_stacks_do_not_include_it(
    clean: Clean, tmp_path: Path
) -> None:
    copy = tmp_path / "damaged.mmr"
    shutil.copytree(clean.path, copy)
    frame = int(clean.frames[len(clean.frames) // 3])
    damage_frame(clean, copy, frame, 5, 0x10, entry=False)
    survivors = clean.survivors_of_frame(frame)
    assert 0 < len(survivors) < len(clean.steps)
    assert_salvaged(clean, copy, tmp_path / "new.mmr", survivors)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["row", "block", "entry"]), which=st.integers(0, 10**6), byte=st.integers(0, 10**4),
       mask=st.sampled_from([0x01, 0x02, 0x10, 0x80, 0xFF]))
@example(kind="entry", which=0, byte=299, mask=0x10)  # a field of the first frame's entry that no read uses
def test_after_any_one_flipped_byte_salvage_keeps_exactly_the_transitions_the_model_says(
    clean: Clean, tmp_path_factory: pytest.TempPathFactory, kind: str, which: int, byte: int, mask: int
) -> None:
    root = tmp_path_factory.mktemp("flip")
    copy = root / "damaged.mmr"
    shutil.copytree(clean.path, copy)
    if kind == "row":
        step = int(clean.steps[which % len(clean.steps)])
        damage_row(clean, copy, step, byte, mask)
        survivors = clean.steps[clean.steps != step]
    else:
        frame = int(clean.frames[which % len(clean.frames)])
        damage_frame(clean, copy, frame, byte, mask, entry=kind == "entry")
        survivors = clean.survivors_of_frame(frame)
    with mmreplay.store.DamagedStore(copy) as scanned:
        intact = scanned.scan.intact_steps
        if kind == "entry" and len(intact) > len(survivors):
            # A flip in an entry's field that no read of these transitions uses (an episode's first frame's
            # link back) damages nothing they need: the scan keeps them, and they must read back bit-exact.
            assert set(survivors.tolist()) <= set(intact.tolist())
            survivors = intact
        else:
            assert intact.tolist() == survivors.tolist()
            assert len(scanned.scan.rows) + len(scanned.scan.frames) >= 1
    assert_salvaged(clean, copy, root / "new.mmr", survivors)


# -- verify, open and the command ------------------------------------------------------------------


def test_verify_names_every_damaged_row_and_frame_counts_every_transition_and_exits_nonzero(
    clean: Clean, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "damaged.mmr"
    shutil.copytree(clean.path, copy)
    rows = [int(clean.steps[3]), int(clean.steps[-5])]
    for step in rows:
        damage_row(clean, copy, step, 0, 0x01)
    frame = int(clean.frames[len(clean.frames) // 2])
    damage_frame(clean, copy, frame, 0, 0x01, entry=False)
    report = verify_store(str(copy))
    assert [row["step"] for row in report["damaged_rows"]] == rows
    assert all(row["file"] == "transitions.tbl" for row in report["damaged_rows"])
    assert report["damaged_frames"][0]["step"] == frame
    assert report["damaged_frames"][0]["file"].startswith("frames/")
    assert report["transitions"] == len(clean.steps)  # every stored transition was checked, past the damage
    survivors = set(clean.survivors_of_frame(frame).tolist()) - set(rows)
    assert report["intact_transitions"] == len(survivors)
    assert report["damaged_steps"] == sorted(set(clean.steps.tolist()) - survivors)
    assert report["frames_decoded"] == len(clean.frames)  # each live frame once
    status, out, _ = cli(capsys, "verify", str(copy), "--json")
    assert status == 1 and json.loads(out)["damaged_rows"] == report["damaged_rows"]


def test_one_flipped_byte_prints_a_short_message_naming_the_store_as_given_once(
    clean: Clean, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(clean.path, tmp_path / "copy.mmr")
    damage_row(clean, tmp_path / "copy.mmr", int(clean.steps[7]), 0, 0x01)
    monkeypatch.chdir(tmp_path)
    status, out, err = cli(capsys, "verify", "copy.mmr")
    assert status == 1 and err == ""
    lines = out.splitlines()
    assert len(lines) == 4, out
    assert lines[0] == (f"copy.mmr: damaged: 1 row and 0 frames; 1 of {len(clean.steps)} transitions cannot be read, "
                        f"{len(clean.steps) - 1} are intact")
    assert lines[1].startswith(f"  - row of transition {clean.steps[7]}: transitions.tbl, byte ")
    assert lines[2] == f"  transitions that cannot be read: {clean.steps[7]}"
    assert lines[3] == "  to copy the intact transitions into a new store: mmreplay salvage copy.mmr NEW"
    assert str(tmp_path) not in out and "overwritten" not in out


def test_open_of_a_damaged_store_names_the_damage_and_the_way_out(clean: Clean, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(clean.path, tmp_path / "copy.mmr")
    newest = int(clean.steps[-1])  # open reads each env's newest transition
    damage_row(clean, tmp_path / "copy.mmr", newest, 0, 0x01)
    monkeypatch.chdir(tmp_path)
    for mode in ("r", "r+"):
        with pytest.raises(DamagedStoreError) as raised:
            ReplayStore.open("copy.mmr", mode)
        assert str(raised.value) == (
            f"copy.mmr: damaged: transitions.tbl: the row of transition {newest} fails its checksum; 'mmreplay verify "
            "copy.mmr' lists every damaged row and frame, and 'mmreplay salvage copy.mmr NEW' (mmreplay.salvage) "
            "copies every intact transition into a new store")


def test_the_salvage_command_reports_kept_and_dropped_and_refuses_an_existing_target(
    clean: Clean, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "damaged.mmr"
    shutil.copytree(clean.path, copy)
    damage_row(clean, copy, int(clean.steps[2]), 0, 0x01)
    status, out, _ = cli(capsys, "salvage", str(copy), str(tmp_path / "new.mmr"), "--json")
    report = json.loads(out)
    assert status == 0 and (report["kept"], report["dropped"], report["damaged_rows"]) == (len(clean.steps) - 1, 1, 1)
    assert report["first_dropped_step"] == int(clean.steps[2])
    status, out, err = cli(capsys, "salvage", str(copy), str(tmp_path / "new.mmr"))
    assert status == 1 and "already exists" in err
    assert cli(capsys, "verify", str(tmp_path / "new.mmr"))[0] == 0
    assert not list(tmp_path.glob(".new.mmr.salvaging-*"))


def test_an_export_of_a_damaged_store_names_its_first_damaged_step(clean: Clean, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("h5py")
    shutil.copytree(clean.path, tmp_path / "copy.mmr")
    frame = int(clean.frames[10])  # open reads each env's newest transitions: an old frame it never meets
    damage_frame(clean, tmp_path / "copy.mmr", frame, 3, 0x01, entry=False)
    damaged = sorted(set(clean.steps.tolist()) - set(clean.survivors_of_frame(frame).tolist()))
    first = damaged[0]
    monkeypatch.chdir(tmp_path)
    with ReplayStore.open("copy.mmr") as store:
        with pytest.raises(DamagedStoreError, match=rf"copy\.mmr: cannot export: transition {first} is damaged \(frame "
                                                    rf"{frame}: frames/0000000000\.seg, byte [\d,]+: fails its "
                                                    rf"checksum.*; {len(damaged)} damaged transitions in all\)"):
            mmreplay.export_hdf5(store, "x.h5")
    status, _, err = cli(capsys, "export", "copy.mmr", "x.h5")
    assert status == 1 and err.startswith(f"mmreplay: error: copy.mmr: cannot export: transition {first} is damaged")
    assert "'mmreplay salvage copy.mmr NEW'" in err and str(tmp_path) not in err
    assert not (tmp_path / "x.h5").exists()


def test_a_salvage_interrupted_or_killed_at_any_moment_leaves_nothing_or_the_whole_store(
    clean: Clean, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import signal
    import time

    from mmreplay.copying import feeder

    copy = tmp_path / "damaged.mmr"
    shutil.copytree(clean.path, copy)
    damage_row(clean, copy, int(clean.steps[9]), 0, 0x01)
    survivors = clean.steps[clean.steps != int(clean.steps[9])]
    # Ctrl-C after k adds, for every k: nothing at the target, nothing left beside it.
    original = feeder.Feeder.feed
    for k in range(0, len(survivors), 7):
        def interrupted(self: feeder.Feeder, transitions, bar, k: int = k) -> None:  # type: ignore[no-untyped-def]
            def counted():  # type: ignore[no-untyped-def]
                for i, transition in enumerate(transitions):
                    if i == k:
                        raise KeyboardInterrupt
                    yield transition
            original(self, counted(), bar)

        monkeypatch.setattr(feeder.Feeder, "feed", interrupted)
        with pytest.raises(KeyboardInterrupt):
            mmreplay.salvage(copy, tmp_path / "new.mmr")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.mmr"]
    monkeypatch.setattr(feeder.Feeder, "feed", original)
    # SIGKILL at random moments: the target is absent or whole; the next salvage removes what was left.
    rng = np.random.default_rng(7)
    for trial in range(6):
        pid = os.fork()
        if pid == 0:
            try:
                mmreplay.salvage(copy, tmp_path / "new.mmr")
            finally:
                os._exit(0)
        time.sleep(float(rng.uniform(0.0, 0.4)))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        if (tmp_path / "new.mmr").exists():
            assert verify_store(str(tmp_path / "new.mmr"))["problems"] == []
            with ReplayStore.open(tmp_path / "new.mmr") as new:
                assert len(new) == len(survivors)
            shutil.rmtree(tmp_path / "new.mmr")
        assert_salvaged(clean, copy, tmp_path / "new.mmr", survivors)  # removes a killed run's leftovers first
        assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.mmr", "new.mmr"]
        shutil.rmtree(tmp_path / "new.mmr")


@pytest.mark.parametrize("name", ["v5-two-envs", "v4-one-env"])
def test_a_damaged_legacy_reference_store_is_salvaged_into_the_current_format(tmp_path: Path, name: str) -> None:
    import legacy_stores

    path = legacy_stores.extract(tmp_path)[name]
    with ReplayStore.open(path) as store:
        steps = np.arange(store.stored_steps.start, store.stored_steps.stop)
        before = store.read(steps)
        slots = store_files.header_of(path)["layout"]["row_slots"]
    dtype = store_files.rows_dtype(path)
    damaged = int(steps[5])
    flip(path / "transitions.tbl", (damaged % slots) * dtype.itemsize + dtype.itemsize - 1, 0x01)
    summary = mmreplay.salvage(path, tmp_path / "new.mmr")
    assert (summary.kept, summary.dropped, summary.damaged_rows) == (len(steps) - 1, 1, 1)
    kept = np.flatnonzero(steps != damaged)
    with ReplayStore.open(tmp_path / "new.mmr") as new:
        assert new.format_version == 6
        after = new.read(np.arange(len(kept)))
    for field in ("obs", "next_obs", "action", "reward", "terminated", "truncated", "env_index"):
        assert np.array_equal(getattr(after, field), getattr(before, field)[kept]), field
