"""User fields (``create(fields=...)``, ``add(fields=...)``, ``batch.fields``): named specifications.

The property-based comparison with the reference model is ``FieldsStoreMachine`` in test_store_model.py;
here: the validation messages, what a rejected add leaves, reopen and crashes, corruption of the field
ring, the header of a store without fields, torch, ``out=``, HDF5 and Minari round trips, the CLI and the
recorder. Fields encode their own step: a recurrent state of 2x512 float16 holds ``step / 8`` plus its
position, a mask of 18 bools the step's bits.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import store_files

from mmreplay import ReplayStore
from mmreplay.errors import CorruptStoreError, ReadOnlyStoreError

FIELDS = {"state": ((2, 512), np.float16), "legal": ((18,), np.bool_)}


def frame(step: int) -> np.ndarray:
    return np.full((4, 4), step % 251, np.uint8)


def state_of(step: int) -> np.ndarray:
    return (step / 8 + np.arange(1024, dtype=np.float32).reshape(2, 512) / 1024).astype(np.float16)


def mask_of(step: int) -> np.ndarray:
    return (step >> np.arange(18)) & 1 == 1


def fields_of(step: int) -> dict[str, np.ndarray]:
    return {"state": state_of(step), "legal": mask_of(step)}


def add_steps(store: ReplayStore, first: int, count: int, *, episode: int = 7) -> None:
    """Transitions ``first .. first + count - 1`` of one env, each ending an episode every ``episode`` steps."""
    for step in range(first, first + count):
        store.add(frame(step), np.int64(step), 1.0, frame(step + 1), step % episode == episode - 1, False,
                  fields=fields_of(step))


def assert_fields_of_steps(batch, steps) -> None:
    steps = np.asarray(steps).reshape(-1).tolist()
    # (the expected arrays keep their shape when no step is stored: a kill before the first commit)
    expected_state = np.asarray([state_of(s) for s in steps]).reshape(len(steps), 2, 512)
    expected_legal = np.asarray([mask_of(s) for s in steps]).reshape(len(steps), 18)
    np.testing.assert_array_equal(batch.fields["state"].reshape(len(steps), 2, 512), expected_state)
    np.testing.assert_array_equal(batch.fields["legal"].reshape(len(steps), 18), expected_legal)


@pytest.fixture
def store(tmp_path: Path):
    store = ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=40, fields=FIELDS)
    yield store
    store.close()


def test_batches_give_each_sampled_transition_its_fields(store: ReplayStore) -> None:
    add_steps(store, 0, 30)
    batch = store.sample(16, rng=0)
    assert batch.fields["state"].dtype == np.float16 and batch.fields["state"].shape == (16, 2, 512)
    assert batch.fields["legal"].dtype == np.bool_ and batch.fields["legal"].shape == (16, 18)
    assert_fields_of_steps(batch, batch.index)
    assert "fields.state=float16[16, 2, 512]" in repr(batch)
    assert store.fields == {"state": ((2, 512), np.dtype(np.float16)), "legal": ((18,), np.dtype(np.bool_))}


def test_n_step_windows_give_the_fields_of_their_first_transition(store: ReplayStore) -> None:
    add_steps(store, 0, 30)
    batch = store.sample(16, rng=1, n_step=3)
    assert_fields_of_steps(batch, batch.index)


def test_sequences_give_every_step_and_zero_past_the_mask(store: ReplayStore) -> None:
    add_steps(store, 0, 30)
    batch = store.sample_sequences(8, 5, rng=2)
    assert batch.fields["state"].shape == (8, 5, 2, 512)
    assert not batch.mask.all()
    assert_fields_of_steps_masked(batch)


def assert_fields_of_steps_masked(batch) -> None:
    for i, j in np.ndindex(batch.mask.shape):
        if batch.mask[i, j]:
            np.testing.assert_array_equal(batch.fields["state"][i, j], state_of(int(batch.index[i, j])))
            np.testing.assert_array_equal(batch.fields["legal"][i, j], mask_of(int(batch.index[i, j])))
        else:
            assert not batch.fields["state"][i, j].any() and not batch.fields["legal"][i, j].any()


def test_fields_survive_close_and_reopen_and_wrap_around(tmp_path: Path) -> None:
    path = tmp_path / "s.mmr"
    with ReplayStore.create(path, frame_shape=(4, 4), capacity=40, fields=FIELDS) as store:
        add_steps(store, 0, 100)  # more than the rows' ring: slots are reused
    with ReplayStore.open(path) as store:
        assert store.stored_steps == range(60, 100)
        assert_fields_of_steps(store.read(store.stored_steps), store.stored_steps)
    with ReplayStore.open(path, "r+") as store:
        add_steps(store, 100, 5)
        assert_fields_of_steps(store.read([103, 104]), [103, 104])


def test_a_vector_add_takes_fields_with_the_env_axis_and_records_the_masked_envs_only(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=20, num_envs=3,
                            fields={"lives": ((), np.int8)}) as store:
        obs = np.stack([frame(1), frame(2), frame(3)])
        # Env 1 is masked out: its field value is out of range for int8 and not checked.
        store.add(obs, np.array([0, 1, 2]), np.zeros(3), obs + 10, np.zeros(3, bool), np.zeros(3, bool),
                  env_mask=np.array([True, False, True]), fields={"lives": np.array([5, 1000, 3])})
        batch = store.read([0, 1])
        assert batch.env_index.tolist() == [0, 2]
        assert batch.fields["lives"].tolist() == [5, 3]
        with pytest.raises(ValueError, match=r"fields\['lives'\] has shape \(\); expected \(3,\) for shape \(\) and num_envs=3"):
            store.add(obs, np.array([0, 1, 2]), np.zeros(3), obs + 10, np.zeros(3, bool), np.zeros(3, bool),
                      fields={"lives": np.int8(3)})


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        (None, ValueError, r"fields is missing; this store's adds take fields \['state', 'legal'\]"),
        ({"state": state_of(0)}, ValueError, r"fields has keys \['state'\]; expected \['state', 'legal'\] \(missing \['legal'\], unknown \[\]\)"),
        ({**fields_of(0), "extra": 1}, ValueError, r"missing \[\], unknown \['extra'\]"),
        ({**fields_of(0), "state": np.zeros((512, 2))}, ValueError, r"fields\['state'\] has shape \(512, 2\); expected \(2, 512\)"),
        ({**fields_of(0), "legal": np.zeros(18, np.int8)}, TypeError, r"fields\['legal'\] has dtype int8; expected values castable to bool"),
        ({**fields_of(0), "state": np.full((2, 512), 1e6)}, ValueError, r"fields\['state'\] has values out of range for float16"),
        ([1, 2], TypeError, r"fields must be a dict of name -> array; got list"),
    ],
)
def test_a_bad_fields_argument_is_refused_and_changes_nothing(store: ReplayStore, fields, error, message) -> None:
    add_steps(store, 0, 3)
    before = store.read(store.stored_steps)
    with pytest.raises(error, match=message):
        store.add(frame(3), np.int64(3), 1.0, frame(4), False, False, fields=fields)
    assert store.transitions_added == 3
    after = store.read(store.stored_steps)
    for name in FIELDS:
        np.testing.assert_array_equal(after.fields[name], before.fields[name])
    add_steps(store, 3, 1)  # the episode goes on as if nothing happened
    assert store.read([3]).fields["legal"][0].tolist() == mask_of(3).tolist()


def test_a_store_without_fields_refuses_fields_and_gives_an_empty_dict(tmp_path: Path) -> None:
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=10) as store:
        with pytest.raises(ValueError, match=r"fields has keys \['x'\]; expected \[\]"):
            store.add(frame(0), np.int64(0), 0.0, frame(1), False, False, fields={"x": 1})
        store.add(frame(0), np.int64(0), 0.0, frame(1), False, False)
        assert store.sample(2, rng=0).fields == {} and store.fields == {}
    header = json.loads((tmp_path / "s.mmr" / "header.json").read_text())
    assert "fields" not in header["layout"]  # the header a store without fields always had
    assert not (tmp_path / "s.mmr" / "fields.tbl").exists()


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"reward": ((), np.float32)}, ValueError, r"field name 'reward' is taken by a built-in field"),
        ({"checksum": ((2,), np.float32)}, ValueError,  # the field table's own column
         r"field name 'checksum' is taken by a built-in field or the row layout; reserved: \['action', 'checksum'"),
        ({"my field": ((), np.float32)}, ValueError, r"field names must be Python identifiers; got 'my field'"),
        ({"x": ((), object)}, TypeError, r"fields\['x'\] dtype must be a numeric or bool dtype; got object"),
        ({"x": ((0,), np.int8)}, ValueError, r"fields\['x'\] shape must be a tuple of positive ints; got \(0,\)"),
        ({"x": (3,)}, TypeError, r"fields\['x'\] must be a \(shape, dtype\) tuple; got \(3,\)"),
    ],
)
def test_create_refuses_bad_field_declarations_and_leaves_no_store(tmp_path: Path, fields, error, message) -> None:
    with pytest.raises(error, match=message):
        ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=10, fields=fields)
    assert not (tmp_path / "s.mmr").exists()


def test_a_store_written_as_format_version_3_opens_without_fields(tmp_path: Path) -> None:
    from test_row_checksum import version_3_sum

    path = tmp_path / "s.mmr"
    with store_files.writing_version(4):  # version 3's rows are version 4's, with another checksum
        store = ReplayStore.create(path, frame_shape=(4, 4), capacity=10)
    with store:
        store.add(frame(0), np.int64(0), 0.0, frame(1), False, False)
    # As format version 3 wrote it: its row sums, version 3 in the header.
    header_path = path / "header.json"
    document = json.loads(header_path.read_text())
    table = bytearray((path / "transitions.tbl").read_bytes())
    row_bytes = len(table) // document["layout"]["row_slots"]
    table[0:4] = version_3_sum(bytes(table[:row_bytes]), 0).to_bytes(4, "little")
    (path / "transitions.tbl").write_bytes(table)
    del document["checksum"]
    document["format_version"] = 3
    import zlib
    document["checksum"] = zlib.crc32(json.dumps(document, sort_keys=True).encode())
    header_path.write_text(json.dumps(document))
    with ReplayStore.open(path) as store:
        assert store.fields == {} and store.read([0]).fields == {}


def test_a_damaged_field_row_is_reported_by_read_sample_and_verify(tmp_path: Path) -> None:
    from mmreplay.cli import verify_store

    path = tmp_path / "s.mmr"
    with ReplayStore.create(path, frame_shape=(4, 4), capacity=40, fields=FIELDS) as store:
        add_steps(store, 0, 20)
    table = path / "fields.tbl"
    row_size = 4 + 2 * 1024 + 3  # checksum, 2x512 float16, 18 bools in 3 bytes
    data = bytearray(table.read_bytes())
    data[11 * row_size + 100] ^= 0x10  # one bit of step 11's state
    table.write_bytes(bytes(data))
    with ReplayStore.open(path) as store:
        with pytest.raises(CorruptStoreError, match=r"the field row of transition 11 fails its checksum"):
            store.read([10, 11])
        assert_fields_of_steps(store.read([10, 12]), [10, 12])
    report = verify_store(str(path))
    assert report["fields"] == ["state", "legal"]
    assert report["damaged_steps"] == [11]
    assert report["damaged_rows"] == [{"step": 11, "file": "fields.tbl", "offset": 11 * row_size,
                                       "problem": "fails its checksum"}]


def test_to_torch_gives_fields_as_dotted_keys(store: ReplayStore) -> None:
    torch = pytest.importorskip("torch")
    add_steps(store, 0, 10)
    tensors = store.sample(4, rng=0).to_torch()
    assert tensors["fields.state"].dtype == torch.float16 and tuple(tensors["fields.state"].shape) == (4, 2, 512)
    assert tensors["fields.legal"].dtype == torch.bool
    sequences = store.sample_sequences(2, 3, rng=0).to_torch()
    assert tuple(sequences["fields.legal"].shape) == (2, 3, 18)


def test_out_refills_the_fields_in_place(store: ReplayStore) -> None:
    add_steps(store, 0, 30)
    out = store.sample(8, rng=0)
    state = out.fields["state"]
    again = store.sample(8, rng=5, out=out)
    assert again is out and again.fields["state"] is state
    assert_fields_of_steps(again, again.index)
    sequences = store.sample_sequences(4, 3, rng=0)
    store.sample_sequences(4, 3, rng=9, out=sequences)
    assert_fields_of_steps_masked(sequences)


@pytest.mark.parametrize("layout", ["mmreplay", "minari"])
def test_hdf5_round_trips_keep_the_fields(tmp_path: Path, layout: str) -> None:
    from mmreplay.hdf5 import export_hdf5, import_hdf5

    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=40, fields=FIELDS) as store:
        add_steps(store, 0, 50)  # the oldest episode's start evicted
        target = tmp_path / "export-v0"
        export_hdf5(store, target, layout=layout)
        import_hdf5(target, tmp_path / "back.mmr")
        original = store.read(store.stored_steps)
    with ReplayStore.open(tmp_path / "back.mmr") as back:
        assert back.fields == {"state": ((2, 512), np.dtype(np.float16)), "legal": ((18,), np.dtype(np.bool_))}
        copy = back.read(back.stored_steps)
    for name in FIELDS:
        np.testing.assert_array_equal(copy.fields[name], original.fields[name])
    np.testing.assert_array_equal(copy.obs, original.obs)


def test_the_minari_export_puts_fields_in_infos_aligned_with_observations(tmp_path: Path) -> None:
    minari = pytest.importorskip("minari")
    from mmreplay.hdf5 import export_hdf5

    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=40, fields=FIELDS) as store:
        add_steps(store, 0, 14)
        export_hdf5(store, tmp_path / "fields-v0", layout="minari")
    episode = next(minari.MinariDataset(tmp_path / "fields-v0" / "data").iterate_episodes())
    assert episode.infos["state"].shape == (8, 2, 512)  # T + 1 for the 7 transitions of steps 0..6
    np.testing.assert_array_equal(episode.infos["legal"][:7], [mask_of(s) for s in range(7)])
    assert not episode.infos["legal"][7].any()


def test_mmreplay_info_and_verify_name_the_fields(tmp_path: Path, capsys) -> None:
    from mmreplay.cli import main

    path = tmp_path / "s.mmr"
    with ReplayStore.create(path, frame_shape=(4, 4), capacity=40, fields=FIELDS) as store:
        add_steps(store, 0, 5)
    assert main(["info", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["fields"] == {"state": "float16[2, 512]", "legal": "bool[18]"}
    assert main(["verify", str(path), "--no-progress"]) == 0
    assert "fields state, legal checked" in capsys.readouterr().out


def test_the_recorder_takes_fields_from_the_info_returned_with_the_obs(tmp_path: Path) -> None:
    gym = pytest.importorskip("gymnasium")
    from mmreplay.recorder import RecordEpisodes

    class Counter(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (4, 4), np.uint8)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return frame(0), {"t": 0}

        def step(self, action):
            self.t += 1
            return frame(self.t), 1.0, self.t == 5, False, {"t": self.t}

    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(4, 4), capacity=20,
                            fields={"t": ((), np.int64)}) as store:
        with pytest.raises(ValueError, match=r"store has fields \['t'\]; pass fields_from_info"):
            RecordEpisodes(Counter(), store)
        env = RecordEpisodes(Counter(), store, fields_from_info=lambda info: {"t": info["t"]})
        env.reset()
        for _ in range(5):
            env.step(0)
        batch = store.read(store.stored_steps)
        assert batch.fields["t"].tolist() == [0, 1, 2, 3, 4]  # the obs's info: reset's, then each step's


def test_a_read_only_store_refuses_adds_with_fields(tmp_path: Path) -> None:
    path = tmp_path / "s.mmr"
    ReplayStore.create(path, frame_shape=(4, 4), capacity=10, fields=FIELDS).close()
    with ReplayStore.open(path) as store, pytest.raises(ReadOnlyStoreError):
        store.add(frame(0), np.int64(0), 0.0, frame(1), False, False, fields=fields_of(0))


def _writer(path: Path, committed_log: Path, seed: int) -> None:
    """Append numbered transitions with fields, flushing at random moments and logging each commit."""
    rng = random.Random(seed)
    store = ReplayStore.open(path, "r+", commit_interval_s=None)
    step = store.transitions_added
    while True:
        add_steps(store, step, 1)
        step += 1
        if rng.random() < 0.2:
            store.flush()
            with open(committed_log, "a") as log:
                log.write(f"{step}\n")
                log.flush()
                os.fsync(log.fileno())


@pytest.mark.parametrize("trial", range(12))
def test_a_writer_killed_at_any_moment_keeps_every_committed_field(tmp_path: Path, trial: int) -> None:
    path, log = tmp_path / "s.mmr", tmp_path / "committed"
    ReplayStore.create(path, frame_shape=(4, 4), capacity=30, fields=FIELDS).close()  # wraps around
    if trial % 2:  # a header that spells the dtypes its own way (normalised where it is parsed)
        header = json.loads((path / "header.json").read_text())
        body = {key: value for key, value in header.items() if key != "checksum"}
        body["layout"]["fields"] = [["state", [2, 512], ">f2"], ["legal", [18], "bool"]]
        body["checksum"] = zlib.crc32(json.dumps(body, sort_keys=True).encode())
        (path / "header.json").write_text(json.dumps(body))
    rng = random.Random(1000 + trial)
    pid = os.fork()
    if pid == 0:
        try:
            _writer(path, log, trial)
        finally:
            os._exit(1)
    time.sleep(rng.uniform(0.05, 0.6))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    committed = int(log.read_text().split()[-1]) if log.exists() and log.read_text().split() else 0
    with ReplayStore.open(path, "r+") as store:
        assert store.transitions_added >= committed
        stored = store.stored_steps
        batch = store.read(stored)
        assert_fields_of_steps(batch, stored)
        assert batch.obs[:, -1, 0, 0].tolist() == [s % 251 for s in stored]
        add_steps(store, store.transitions_added, 3)  # appending goes on
