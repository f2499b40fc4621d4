"""User fields in encoded form: ``add_encoded(..., fields=)`` writes what ``add(..., fields=)`` writes, and
``sample_encoded`` / ``sample_sequences_encoded`` carry each row's fields, so that what was added with fields
comes back with the same fields for the same transition."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import field_specs
from test_encoded import chunks, same_files

from mmreplay import PrioritizedSampler, ReplayStore, UniformSampler, encode_frames

FRAME = (3, 4)


def random_bits(rng: np.random.Generator, shape: tuple[int, ...], dtype: object) -> np.ndarray:
    """Values of any bits of ``dtype`` (NaN payloads, infinities, -0.0), bools as 0/1."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    raw = rng.integers(0, 256, (*shape, dtype.itemsize), dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def fill_with_fields(
    tmp: Path, case: dict, specs: dict, *, frame_encoding: str, sampler: object = None, seed: int = 0
) -> tuple[ReplayStore, ReplayStore, dict[int, dict[str, np.ndarray]]]:
    """Store "added" through ``add(..., fields=)`` step by step, store "encoded" through ``add_encoded(...,
    fields=)`` chunk by chunk, and the reference: each step's fields as given, by its step."""
    num_envs, stack_size, stacked = case["num_envs"], case["stack_size"], case["stacked"]
    options = dict(frame_shape=FRAME, capacity=case["capacity"], stack_size=stack_size, num_envs=num_envs,
                   commit_interval_s=None, commit_every=case.get("commit_every"), frame_encoding=frame_encoding,
                   fields={name: spec for name, spec in specs.items()})
    added = ReplayStore.create(tmp / "added", sampler=sampler() if sampler else None, **options)
    encoded = ReplayStore.create(tmp / "encoded", sampler=sampler() if sampler else None, **options)
    rng = np.random.default_rng(seed)
    reference: dict[int, dict[str, np.ndarray]] = {}
    squeeze = (lambda a: a[0]) if num_envs == 1 else (lambda a: a)  # noqa: E731
    for env, steps in case["chunks"]:
        mask = np.arange(num_envs) == env
        pixels: list[bytes] = []
        index: dict[bytes, int] = {}

        def indices(stack: np.ndarray) -> list[int]:
            found = []
            for frame in (stack if stacked else stack[-1:]):
                key = frame.tobytes()
                if key not in index:
                    index[key] = len(pixels)
                    pixels.append(key)
                found.append(index[key])
            return found if stacked else found[:1]

        values = {name: random_bits(rng, (len(steps), *shape), dtype) for name, (shape, dtype) in specs.items()}
        obs, next_obs = [], []
        for t, (current, following, action, reward, terminated, truncated) in enumerate(steps):
            obs.append(indices(current))
            next_obs.append(indices(following))
            shape = (stack_size, *FRAME) if stacked else FRAME
            o, n = np.zeros((num_envs, *shape), np.uint8), np.zeros((num_envs, *shape), np.uint8)
            o[env] = current if stacked else current[-1]
            n[env] = following if stacked else following[-1]
            flag = lambda value: np.where(mask, value, False)  # noqa: E731
            step_fields = {name: squeeze(np.repeat(array[t : t + 1], num_envs, axis=0)) for name, array in values.items()}
            reference[added.transitions_added] = {name: array[t] for name, array in values.items()}
            added.add(squeeze(o), squeeze(np.full(num_envs, action)), squeeze(np.full(num_envs, reward, np.float32)),
                      squeeze(n), squeeze(flag(terminated)), squeeze(flag(truncated)),
                      env_mask=None if num_envs == 1 else mask, fields=step_fields)
        frames = encode_frames(np.frombuffer(b"".join(pixels), np.uint8).reshape(-1, *FRAME))
        columns = list(zip(*[step[2:] for step in steps]))
        shape_of = (lambda rows: np.array(rows)) if stacked else (lambda rows: np.array(rows)[:, 0])  # noqa: E731
        encoded.add_encoded(frames, shape_of(obs), np.array(columns[0]), np.array(columns[1], np.float32),
                            shape_of(next_obs), np.array(columns[2]), np.array(columns[3]), env_index=env,
                            fields=values)
    return added, encoded, reference


def assert_fields_are_the_reference(fields: dict[str, np.ndarray], steps: np.ndarray, mask: np.ndarray | None,
                                    reference: dict[int, dict[str, np.ndarray]], specs: dict) -> None:
    """Each row's fields are the values added with its step, bit for bit (zero past a window's end)."""
    assert sorted(fields) == sorted(specs), f"fields has keys {sorted(fields)}; expected {sorted(specs)}"
    flat = steps.reshape(-1)
    where = np.ones(flat.shape, bool) if mask is None else mask.reshape(-1)
    for name, (shape, dtype) in specs.items():
        got = fields[name]
        assert got.shape == (*steps.shape, *shape) and got.dtype == np.dtype(dtype), name
        rows = got.reshape(len(flat), *shape)
        for i, step in enumerate(flat.tolist()):
            want = reference[step][name] if where[i] else np.zeros(shape, dtype)
            assert rows[i].tobytes() == np.asarray(want, dtype).tobytes(), f"fields[{name!r}] of step {step}"


@pytest.mark.parametrize("frame_encoding", ["lz4", "lz4-reference"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=chunks(), specs=field_specs(), seed=st.integers(0, 2**16))
def test_add_encoded_with_fields_writes_the_same_files_as_add_with_fields(
    tmp_path_factory: pytest.TempPathFactory, frame_encoding: str, case: dict, specs: dict, seed: int
) -> None:
    tmp = tmp_path_factory.mktemp("case")
    added, encoded, _ = fill_with_fields(tmp, case, specs, frame_encoding=frame_encoding, seed=seed)
    assert len(added) == len(encoded)
    added.close()
    encoded.close()
    assert same_files(tmp / "added", tmp / "encoded")


@pytest.mark.parametrize("frame_encoding", ["lz4", "lz4-reference"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=chunks(), specs=field_specs(), seed=st.integers(0, 2**16), n_step=st.integers(1, 3),
       length=st.integers(1, 4), prioritized=st.booleans())
def test_encoded_batches_carry_the_fields_each_transition_was_added_with(
    tmp_path_factory: pytest.TempPathFactory, frame_encoding: str, case: dict, specs: dict, seed: int, n_step: int,
    length: int, prioritized: bool,
) -> None:
    tmp = tmp_path_factory.mktemp("case")
    sampler = (lambda: PrioritizedSampler(alpha=0.6)) if prioritized else UniformSampler
    _, store, reference = fill_with_fields(tmp, case, specs, frame_encoding=frame_encoding, sampler=sampler, seed=seed)
    encoded = store.sample_encoded(9, rng=seed, n_step=n_step)
    assert_fields_are_the_reference(encoded.fields, encoded.index, None, reference, specs)
    expected = store.sample(9, rng=seed, n_step=n_step)
    decoded = pickle.loads(pickle.dumps(encoded, protocol=5)).decode()  # as it travels to another process
    assert sorted(decoded.fields) == sorted(expected.fields)
    for name, array in expected.fields.items():
        assert decoded.fields[name].tobytes() == array.tobytes(), name
    np.testing.assert_array_equal(decoded.obs, expected.obs)
    windows = store.sample_sequences_encoded(5, length, rng=seed)
    assert_fields_are_the_reference(windows.fields, windows.index, windows.mask, reference, specs)
    decoded_windows = windows.decode()
    expected_windows = store.sample_sequences(5, length, rng=seed)
    for name, array in expected_windows.fields.items():
        assert decoded_windows.fields[name].tobytes() == array.tobytes(), name
    assert encoded.nbytes == store.sample_encoded(9, rng=seed, n_step=n_step).nbytes > sum(
        array.nbytes for array in encoded.fields.values())


def make_store(tmp_path: Path, **options: object) -> ReplayStore:
    return ReplayStore.create(tmp_path / "s", frame_shape=FRAME, capacity=10, stack_size=2, commit_interval_s=None,
                              **options)


SEND = dict(action=np.array([0, 1]), reward=np.zeros(2, np.float32), terminated=np.zeros(2, bool),
            truncated=np.zeros(2, bool))


def test_add_encoded_refuses_fields_that_are_not_the_stores_and_writes_nothing(tmp_path: Path) -> None:
    store = make_store(tmp_path, fields={"logits": ((3,), np.float32)})
    frames = encode_frames(np.arange(3 * 12, dtype=np.uint8).reshape(3, *FRAME))
    obs, next_obs = np.array([0, 1]), np.array([1, 2])
    with pytest.raises(ValueError, match=r"fields is missing; this store's adds take fields \['logits'\]"):
        store.add_encoded(frames, obs, next_obs=next_obs, **SEND)
    with pytest.raises(ValueError, match=r"fields\['logits'\] has shape \(3,\); expected \(2, 3\)"):
        store.add_encoded(frames, obs, next_obs=next_obs, fields={"logits": np.zeros(3)}, **SEND)
    with pytest.raises(ValueError, match=r"fields has keys \['logit'\]; expected \['logits'\]"):
        store.add_encoded(frames, obs, next_obs=next_obs, fields={"logit": np.zeros((2, 3))}, **SEND)
    with pytest.raises(TypeError, match=r"fields\['logits'\] has dtype <U1; expected values castable to float32"):
        store.add_encoded(frames, obs, next_obs=next_obs, fields={"logits": np.full((2, 3), "x")}, **SEND)
    assert store.transitions_added == 0
    store.add_encoded(frames, obs, next_obs=next_obs, fields={"logits": np.arange(6.0).reshape(2, 3)}, **SEND)
    np.testing.assert_array_equal(store.read([0, 1]).fields["logits"], np.arange(6.0).reshape(2, 3))
    plain = ReplayStore.create(tmp_path / "plain", frame_shape=FRAME, capacity=10, stack_size=2)
    with pytest.raises(ValueError, match=r"fields has keys \['logits'\]; expected \[\]"):
        plain.add_encoded(frames, obs, next_obs=next_obs, fields={"logits": np.zeros((2, 3))}, **SEND)
    assert plain.transitions_added == 0


def test_an_encoded_batch_whose_fields_do_not_match_its_rows_is_refused_at_decode(tmp_path: Path) -> None:
    store = make_store(tmp_path, fields={"h": ((2,), np.int16)})
    frames = encode_frames(np.arange(3 * 12, dtype=np.uint8).reshape(3, *FRAME))
    store.add_encoded(frames, np.array([0, 1]), next_obs=np.array([1, 2]), fields={"h": np.ones((2, 2), np.int16)}, **SEND)
    encoded = store.sample_encoded(4, rng=0)
    assert encoded.fields["h"].shape == (4, 2)
    state = {**encoded.__dict__, "user_fields": {"h": encoded.fields["h"][:3]}}
    bad = type(encoded)(**state)
    with pytest.raises(ValueError, match=r"user_fields\['h'\] has shape \(3, 2\); expected leading axes \(4,\)"):
        bad.decode()
