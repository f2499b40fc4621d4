"""mmreplay.jax: a store's batches as pytrees of jax arrays, generators from jax keys, priorities from jax arrays.

The batches are checked against the store's own ``sample`` (the same generator gives the same batches) and,
bit for bit, against the naive reference model (``reference.py``) under hypothesis.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import ReferenceStore, assert_batch_matches
from strategies import FrameSource, draw_add, frame, stack, store_configs

jax = pytest.importorskip("jax", reason="jax is not installed here: test.sh installs the jax extra")
import jax.numpy as jnp  # noqa: E402

from mmreplay import Batch, PrioritizedSampler, ReplayStore  # noqa: E402
from mmreplay.jax import JaxBatch, JaxBatches, batches, generator_from_key, to_jax  # noqa: E402
from mmreplay.jax.host_frames import shared_frames  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FRAME = (3, 4)
NUMERIC = ("obs", "action", "reward", "next_obs", "terminated", "truncated", "env_index", "weight", "discount")


def as_numpy(batch: JaxBatch) -> SimpleNamespace:
    """The jax batch's arrays back on the host, as ``assert_batch_matches`` reads a ``Batch``."""
    values = {name: np.asarray(getattr(batch, name)) for name in (*NUMERIC, "index")}
    return SimpleNamespace(**values, fields={name: np.asarray(value) for name, value in batch.fields.items()})


def assert_same_batch(got: JaxBatch, want: Batch) -> None:
    """``got`` holds ``want``'s fields: the same values, in the dtypes JAX gives ``want``'s."""
    for name in (*NUMERIC, "index"):
        expected = getattr(want, name)
        value = np.asarray(getattr(got, name))
        assert value.dtype == jax.dtypes.canonicalize_dtype(expected.dtype) or name == "index", name
        np.testing.assert_array_equal(value, expected.astype(value.dtype), err_msg=name)
    assert got.index.dtype == np.int64 and isinstance(got.index, np.ndarray)
    assert list(got.fields) == list(want.fields)


def filled_store(path: Path, episodes: list[int], *, stack_size: int = 4, final: str = "shifted", **kwargs: Any) -> ReplayStore:
    """A store of episodes of these lengths (frames numbered 1, 2, ...), each terminated; ``final="fresh"``
    ends each with a next_obs of new frames (stored whole, as given)."""
    store = ReplayStore.create(path, frame_shape=FRAME, capacity=64, stack_size=stack_size, **kwargs)
    n = 0
    for length in episodes:
        n += 1
        obs = stack(*[n] * stack_size)
        for t in range(length):
            n += 1
            last = t == length - 1
            next_obs = np.concatenate([obs[1:], frame(n)[None]])
            if last and final == "fresh":
                next_obs = stack(*range(200, 200 + stack_size))
            values = {name: np.full(shape, n + 0.25, dtype) for name, (shape, dtype) in kwargs.get("fields", {}).items()}
            store.add(obs, t % 3, float(t), next_obs, last, False, fields=values or None)
            obs = next_obs
    return store


# -- the batches: the same as sample's, bit for bit the reference's ---------------------------------------


@settings(max_examples=25)
@given(config=store_configs(with_fields=True), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_a_jax_batch_holds_what_sample_draws_with_the_same_generator_bit_for_bit_the_reference(
    tmp_path_factory: pytest.TempPathFactory, config: dict[str, Any], data: st.DataObject, seed: int
) -> None:
    ref, frames = ReferenceStore(**config), FrameSource.of(config)
    with ReplayStore.create(tmp_path_factory.mktemp("jax") / "s.mmr", **config) as store, jax.enable_x64(True):
        for _ in range(data.draw(st.integers(1, 14), label="adds")):
            args = draw_add(data, ref, frames)
            store.add(*args.as_tuple(), **args.keywords())
            ref.add(*args.as_tuple(), fields=args.fields)
        if not len(store):
            return
        reference_generator = np.random.default_rng(seed)
        with batches(store, 5, seed=seed, prefetch=2) as stream:
            for _ in range(3):
                got, want = next(stream), store.sample(5, reference_generator)
                assert_same_batch(got, want)
                assert_batch_matches(as_numpy(got), ref)
                assert_batch_matches(as_numpy(to_jax(want)), ref)


def test_without_x64_the_fields_take_jaxs_dtypes_and_index_stays_exact_on_the_host(tmp_path: Path) -> None:
    with filled_store(tmp_path / "s.mmr", [5, 4], fields={"h": ((2,), np.float64)}) as store:
        batch = store.sample(6, rng=1)
        got = to_jax(batch)
        assert got.action.dtype == jnp.int32 and got.fields["h"].dtype == jnp.float32
        assert got.obs.dtype == jnp.uint8 and got.terminated.dtype == jnp.bool_
        assert isinstance(got.index, np.ndarray) and got.index.dtype == np.int64
        assert_same_batch(got, batch)


def test_batches_from_a_key_are_sample_with_the_generator_that_key_stands_for(tmp_path: Path) -> None:
    key = jax.random.key(7)
    with filled_store(tmp_path / "s.mmr", [6, 9, 3]) as store:
        generator = generator_from_key(key)
        with batches(store, 8, key=key) as stream:
            for _ in range(4):
                assert_same_batch(next(stream), store.sample(8, generator))


def test_n_step_batches_come_through_with_their_discount(tmp_path: Path) -> None:
    with filled_store(tmp_path / "s.mmr", [6, 9]) as store:
        generator = np.random.default_rng(3)
        with batches(store, 8, seed=3, n_step=3, gamma=0.9) as stream:
            for _ in range(2):
                assert_same_batch(next(stream), store.sample(8, generator, n_step=3, gamma=0.9))


def test_a_batch_whose_next_obs_was_stored_whole_converts_with_separate_stacks(tmp_path: Path) -> None:
    with filled_store(tmp_path / "s.mmr", [1, 1, 1], final="fresh") as store:
        batch = store.read([0, 1, 2])
        shared = shared_frames(batch.obs, batch.next_obs)
        assert shared is not None and shared.frames.shape[1] == 8 and (shared.obs_column, shared.next_obs_column) == (0, 4)
        got = to_jax(batch)
        np.testing.assert_array_equal(np.asarray(got.next_obs), np.stack([stack(200, 201, 202, 203)] * 3))
        assert_same_batch(got, batch)


# -- DLPack and transfers ----------------------------------------------------------------------------------


def test_dlpack_refuses_a_batchs_obs_view_and_takes_the_frames_array_it_views(tmp_path: Path) -> None:
    """Why: obs and next_obs step over a whole row of stack_size + 1 frames, which DLPack cannot describe."""
    with filled_store(tmp_path / "s.mmr", [8]) as store:
        batch = store.sample(4, rng=0)
        with pytest.raises(Exception, match="trivial \\(compact\\) striding"):
            jax.dlpack.from_dlpack(batch.obs)
        shared = shared_frames(batch.obs, batch.next_obs)
        assert shared is not None and shared.frames.shape == (4, 5, *FRAME) and shared.frames.flags.c_contiguous
        frames = jax.dlpack.from_dlpack(shared.frames)
        np.testing.assert_array_equal(np.asarray(frames)[:, 1:], batch.next_obs)


def test_the_frames_travel_once_as_one_compact_array(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mmreplay.jax.transfer as transfer

    sent: list[Any] = []
    assemble = transfer._assemble

    def recording_assemble(frames: Any, columns: Any, rest: Any) -> Any:
        sent.append((frames, columns))
        return assemble(frames, columns, rest)

    with filled_store(tmp_path / "s.mmr", [8]) as store:
        batch = store.sample(4, rng=0)
        monkeypatch.setattr(transfer, "_assemble", recording_assemble)
        got = to_jax(batch)
    [(frames, columns)] = sent
    assert isinstance(frames, np.ndarray) and frames.shape == (4, 5, *FRAME) and frames.flags.c_contiguous
    assert columns == (0, 1, 4)
    assert_same_batch(got, batch)


def test_a_batch_refilled_after_its_transfer_leaves_the_jax_batch_as_it_was(tmp_path: Path) -> None:
    with filled_store(tmp_path / "s.mmr", [8, 8]) as store:
        batch = store.sample(16, rng=0)
        got = to_jax(batch, "cpu")
        before = as_numpy(got)
        store.sample(16, rng=1, out=batch)  # refilled in place
        after = as_numpy(got)
        for name in NUMERIC:
            np.testing.assert_array_equal(getattr(after, name), getattr(before, name), err_msg=name)


def test_the_jax_batch_is_a_pytree_that_jit_takes_whole(tmp_path: Path) -> None:
    with filled_store(tmp_path / "s.mmr", [8]) as store:
        got = to_jax(store.sample(4, rng=0))

    @jax.jit
    def target(batch: JaxBatch) -> jax.Array:
        return batch.reward + batch.discount * batch.next_obs.reshape(4, -1).mean(axis=1)

    want = got.reward + got.discount * np.asarray(got.next_obs).reshape(4, -1).mean(axis=1)
    np.testing.assert_allclose(np.asarray(target(got)), np.asarray(want), rtol=1e-6)
    assert len(jax.tree_util.tree_leaves(got)) == 10
    assert "obs=uint8[4, 4, 3, 4] cpu:0" in repr(got) and "index=int64[4] host" in repr(got)


def test_a_device_is_named_by_platform_or_given_and_a_missing_one_is_refused(tmp_path: Path) -> None:
    with filled_store(tmp_path / "s.mmr", [8]) as store:
        batch = store.sample(4, rng=0)
        assert to_jax(batch, "cpu:0").obs.devices() == {jax.devices("cpu")[0]}
        assert to_jax(batch, jax.devices()[0]).reward.devices() == {jax.devices()[0]}
        with pytest.raises(ValueError, match=r"device 'cpu:7': no such device here; JAX has \['"):
            to_jax(batch, "cpu:7")
        with pytest.raises(ValueError, match="device 'nosuch': no such device here"):
            to_jax(batch, "nosuch")
        with pytest.raises(TypeError, match="device must be a jax.Device, a platform name .*; got int"):
            to_jax(batch, 0)
        with pytest.raises(TypeError, match="batch must be an mmreplay Batch .*; got dict"):
            to_jax({"obs": batch.obs})  # type: ignore[arg-type]


def test_batches_refuses_key_and_seed_together_and_what_sample_refuses_before_its_thread(tmp_path: Path) -> None:
    with filled_store(tmp_path / "s.mmr", [8]) as store:
        with pytest.raises(TypeError, match="batches takes key or seed, not both"):
            batches(store, 4, key=jax.random.key(0), seed=0)
        with pytest.raises(TypeError, match="seed must be an int; got float"):
            batches(store, 4, seed=0.5)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="n_step"):
            batches(store, 4, seed=0, n_step=0)
        with pytest.raises(TypeError, match="takes no length"):
            batches(store, 4, seed=0, length=3)
        with pytest.raises(TypeError, match="store must be an mmreplay ReplayStore; got str"):
            batches("s.mmr", 4)  # type: ignore[arg-type]


def test_a_closed_iterator_ends_and_closing_the_store_ends_it_too(tmp_path: Path) -> None:
    store = filled_store(tmp_path / "s.mmr", [8])
    stream = batches(store, 4, seed=0)
    assert isinstance(stream, JaxBatches)
    next(stream)
    stream.close()
    with pytest.raises(StopIteration):
        next(stream)
    other = batches(store, 4, seed=0)
    store.close()
    with pytest.raises(StopIteration):
        next(other)


# -- generators from keys --------------------------------------------------------------------------------


@given(seed=st.integers(0, 2**32 - 1))
def test_a_key_gives_the_same_generator_every_time_typed_or_raw_and_its_split_another(seed: int) -> None:
    typed, raw = jax.random.key(seed), jax.random.PRNGKey(seed)
    first = generator_from_key(typed).integers(0, 2**62, 8)
    assert (generator_from_key(typed).integers(0, 2**62, 8) == first).all()
    assert (generator_from_key(raw).integers(0, 2**62, 8) == first).all()
    _, sub = jax.random.split(typed)
    assert not (generator_from_key(sub).integers(0, 2**62, 8) == first).all()


def test_a_key_is_refused_unless_it_is_one_key() -> None:
    with pytest.raises(ValueError, match=r"key must be one key; got \(2,\) keys"):
        generator_from_key(jax.random.split(jax.random.key(0)))
    with pytest.raises(ValueError, match=r"key must be one raw key, a 1-D array of uint32 words; got shape \(2, 2\)"):
        generator_from_key(jax.random.split(jax.random.PRNGKey(0)))
    with pytest.raises(TypeError, match="key must be a jax PRNG key or its uint32 words; got an array of int32"):
        generator_from_key(jnp.arange(2))
    with pytest.raises(TypeError, match="key must be a jax PRNG key .*; got int"):
        generator_from_key(3)  # type: ignore[arg-type]


# -- priorities from jax arrays ----------------------------------------------------------------------------


@settings(max_examples=30)
@given(
    updates=st.lists(
        st.tuples(st.lists(st.integers(0, 19), min_size=1, max_size=8),
                  st.lists(st.floats(0, 50, width=32), min_size=8, max_size=8)),
        min_size=1, max_size=4,
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_priorities_from_jax_arrays_are_those_of_the_numpy_path(
    tmp_path_factory: pytest.TempPathFactory, updates: list[tuple[list[int], list[float]]], seed: int
) -> None:
    root = tmp_path_factory.mktemp("priorities")
    stores = [filled_store(root / name, [10, 10], sampler=PrioritizedSampler(alpha=0.6)) for name in ("numpy", "jax")]
    try:
        for steps, priorities in updates:
            chosen = np.array(priorities[: len(steps)], np.float32)
            stores[0].update_priorities(np.array(steps, np.int64), chosen.astype(np.float64))
            stores[1].update_priorities(jnp.asarray(steps, jnp.int32), jnp.asarray(chosen))
        drawn = [store.sample(16, np.random.default_rng(seed), beta=0.5) for store in stores]
        for name in ("index", "weight"):
            np.testing.assert_array_equal(getattr(drawn[0], name), getattr(drawn[1], name), err_msg=name)
        from_batch = to_jax(drawn[1])  # a learner's round trip: its batch's index, its TD errors as a jax array
        stores[0].update_priorities(drawn[0].index, np.abs(np.asarray(from_batch.reward, np.float64)) + 1)
        stores[1].update_priorities(from_batch.index, jnp.abs(from_batch.reward) + 1)
        again = [store.sample(16, np.random.default_rng(seed + 1), beta=0.5) for store in stores]
        np.testing.assert_array_equal(again[0].weight, again[1].weight)
        np.testing.assert_array_equal(again[0].index, again[1].index)
    finally:
        for store in stores:
            store.close()


# -- the process ------------------------------------------------------------------------------------------


def test_a_read_only_store_left_open_where_jax_was_imported_exits_without_a_message(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import numpy as np, jax, jax.numpy as jnp
        from mmreplay import ReplayStore
        from mmreplay.jax import batches
        with ReplayStore.create({str(tmp_path / 's.mmr')!r}, frame_shape=(3, 4), capacity=16) as writer:
            for n in range(6):
                writer.add(np.full((4, 3, 4), n, np.uint8), 0, 0.0, np.full((4, 3, 4), n, np.uint8), False, False)
        reader = ReplayStore.open({str(tmp_path / 's.mmr')!r}, "r")
        stream = batches(reader, 4, seed=0)
        batch = next(stream)
        print(int(jnp.sum(batch.reward)))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "0"
    assert "Exception ignored" not in run.stderr and "Traceback" not in run.stderr, run.stderr


def test_importing_mmreplay_does_not_import_jax() -> None:
    run = subprocess.run([sys.executable, "-c", "import sys, mmreplay; print('jax' in sys.modules)"],
                         capture_output=True, text=True, timeout=120, cwd=REPO, env={"PYTHONPATH": str(REPO)})
    assert run.stdout.strip() == "False", run.stderr
