"""A hypothesis state machine that drives a ReplayStore and the naive reference model side by side.

Every step ends by reading back every transition the store counts and comparing it, field by field,
with the reference (tests/reference.py). Rules cover vector envs with interleaved endings, truncation
vs termination, episodes cut without a flag, frames vs stacks, endings whose next_obs stack is not obs
shifted (stored as given), wrap-around eviction, rejected adds, flush, close and reopen (read-only and
append), seeded sampling, sampling into an earlier batch (``out``) and n-step windows. The rules also
cover sequences, ordered passes (``iterate``) and ``clear``; ``FieldsStoreMachine`` runs them all on
stores with user fields of random shapes and dtypes (values of any bits).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from reference import (
    BATCH_FIELDS,
    ReferenceStore,
    assert_batch_matches,
    assert_fields_match,
    assert_store_matches,
)
from strategies import SPOILERS, FrameSource, draw_add, spoil, store_configs

from mmreplay import ReferenceScheme, ReplayStore
from mmreplay.errors import ReadOnlyStoreError


def assert_same_batch(a, b) -> None:
    for name in BATCH_FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=f"batch.{name}")


class StoreMachine(RuleBasedStateMachine):
    create_options: dict[str, object] = {}  # frame encoding options of ReplayStore.create
    with_fields = False  # whether stores have user fields

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="mmreplay-model-")
        self.path = os.path.join(self.dir, "store.mmr")
        self.store = None

    @initialize(data=st.data())
    def create(self, data):
        config = data.draw(store_configs(with_fields=self.with_fields), label="config")
        if "frame_encoding" in self.create_options:  # frames compressed against references are uint8
            config = {**config, "frame_dtype": np.uint8}
        self.config = config
        self.store = ReplayStore.create(self.path, **config, **self.create_options)
        self.reference_config = {**config, "stack_padding": str(self.create_options.get("stack_padding", "first"))}
        self.ref = ReferenceStore(**self.reference_config)
        self.frames = FrameSource.of(config)

    @rule(data=st.data())
    def add(self, data):
        args = draw_add(data, self.ref, self.frames)
        self.store.add(*args.as_tuple(), **args.keywords())
        self.ref.add(*args.as_tuple(), **args.keywords())

    @rule(data=st.data(), how=st.sampled_from([name for name, _, _ in SPOILERS]))
    def rejected_add_changes_nothing(self, data, how):
        args = spoil(draw_add(data, self.ref, self.frames), how, self.ref)
        if args is None:
            return
        name, error = next((n, e) for h, n, e in SPOILERS if h == how)
        with pytest.raises(error, match=name):
            self.store.add(*args.as_tuple(), **args.keywords())
        # The invariant then checks that nothing changed, and the next add that the episode continues.

    @rule()
    def flush(self):
        self.store.flush()

    @rule()
    def close_and_reopen_for_append(self):
        self.store.close()
        assert self.store.closed
        self.store = ReplayStore.open(self.path, mode="r+")

    @rule(data=st.data())
    def reopen_read_only(self, data):
        self.store.close()
        self.store = ReplayStore.open(self.path, mode="r")
        assert self.store.mode == "r"
        assert_store_matches(self.store, self.ref)
        args = draw_add(data, self.ref, FrameSource(self.ref.frame_shape, self.ref.frame_dtype))
        with pytest.raises(ReadOnlyStoreError):
            self.store.add(*args.as_tuple(), **args.keywords())
        assert_store_matches(self.store, self.ref)
        self.store.close()
        self.store = ReplayStore.open(self.path, mode="r+")

    @rule(batch_size=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
    def sample(self, batch_size, seed):
        if len(self.ref) == 0:
            with pytest.raises(ValueError):
                self.store.sample(batch_size, rng=seed)
            return
        batch = self.store.sample(batch_size, rng=seed)
        assert batch.index.shape == (batch_size,)
        assert_batch_matches(batch, self.ref)
        assert_same_batch(self.store.sample(batch_size, rng=seed), batch)

    @precondition(lambda self: len(self.ref) > 0)
    @rule(batch_size=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
    def sample_is_the_same_after_reopen(self, batch_size, seed):
        before = self.store.sample(batch_size, rng=np.random.default_rng(seed))
        self.store.close()
        self.store = ReplayStore.open(self.path, mode="r+")
        after = self.store.sample(batch_size, rng=np.random.default_rng(seed))
        assert_same_batch(after, before)

    @precondition(lambda self: len(self.ref) > 0)
    @rule(data=st.data())
    def read_steps_in_any_order(self, data):
        stored = self.ref.stored_steps().tolist()
        steps = data.draw(st.lists(st.sampled_from(stored), min_size=1, max_size=10), label="steps")
        assert_batch_matches(self.store.read(np.array(steps)), self.ref, steps)
        assert_batch_matches(self.store.read(steps), self.ref, steps)

    @precondition(lambda self: len(self.ref) > 0)
    @rule(batch_size=st.integers(1, 8), seeds=st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)))
    def sample_into_an_earlier_batch(self, batch_size, seeds):
        out = self.store.sample(batch_size, rng=seeds[0])
        expected = self.store.sample(batch_size, rng=seeds[1])
        try:
            got = self.store.sample(batch_size, rng=seeds[1], out=out)
        except ValueError as error:
            # Only a batch whose obs and next_obs share frames, given one with a final stack kept whole.
            assert "share" in str(error)
            assert np.shares_memory(out.obs, out.next_obs)
            assert not np.shares_memory(expected.obs, expected.next_obs)
            return
        assert got is out
        assert_same_batch(got, expected)
        assert_batch_matches(got, self.ref)

    @precondition(lambda self: len(self.ref) > 0)
    @rule(batch_size=st.integers(1, 8), n_step=st.integers(2, 4), seed=st.integers(0, 2**32 - 1))
    def sample_n_steps(self, batch_size, n_step, seed):
        batch = self.store.sample(batch_size, rng=seed, n_step=n_step, gamma=0.5)
        for i, step in enumerate(batch.index.tolist()):
            window = self.window(step, n_step)
            first, last = self.ref.transition(step), self.ref.transition(window[-1])
            np.testing.assert_array_equal(batch.obs[i], self.ref.expected([step])["obs"][0])
            np.testing.assert_array_equal(batch.next_obs[i], self.ref.expected([window[-1]])["next_obs"][0])
            assert (batch.terminated[i], batch.truncated[i]) == (last.terminated, last.truncated)
        assert_fields_match(batch.fields, self.ref, batch.index)  # the window's first transition's

    @precondition(lambda self: len(self.ref) > 0)
    @rule(batch_size=st.integers(1, 4), length=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
    def sample_sequences(self, batch_size, length, seed):
        batch = self.store.sample_sequences(batch_size, length, rng=seed)
        for i in range(batch_size):
            window = self.window(int(batch.index[i, 0]), length)
            assert batch.index[i].tolist() == window + [-1] * (length - len(window))
            assert_batch_matches_window(batch, i, window, self.ref)
        filled = np.where(batch.mask, batch.index, batch.index[:, :1])
        assert_fields_match(batch.fields, self.ref, filled, batch.mask)

    @rule(batch_size=st.integers(1, 5), data=st.data())
    def iterate_equals_read_of_the_stored_steps(self, batch_size, data):
        stored = self.ref.stored_steps()
        oldest = int(stored[0]) if len(stored) else self.ref.transitions_added  # none stored: after a clear()
        start = data.draw(st.integers(oldest, self.ref.transitions_added), label="start")
        stop = data.draw(st.integers(start, self.ref.transitions_added), label="stop")
        batches = list(self.store.iterate(batch_size, start=start, stop=stop))
        assert [len(b) for b in batches] == [min(batch_size, stop - s) for s in range(start, stop, batch_size)]
        steps = np.arange(start, stop, dtype=np.int64)
        assert np.concatenate([b.index for b in batches] or [steps]).tolist() == steps.tolist()
        for batch in batches:
            assert_batch_matches(batch, self.ref, batch.index)

    @rule()
    def clear(self):
        self.store.clear()
        self.ref.clear()  # steps keep counting: no index is reused
        assert len(self.store) == 0 and self.store.transitions_added == self.ref.transitions_added
    def window(self, step: int, length: int) -> list[int]:
        """The reference's n-step window from ``step``: its episode's transitions until one ends."""
        env = self.ref.transition(step).env_index
        episode = next(e for e in self.ref.episodes[env] if e[0].step <= step <= e[-1].step)
        window = []
        for item in episode:
            if item.step >= step and len(window) < length:
                window.append(item.step)
                if item.terminated or item.truncated:
                    break
        return window

    @precondition(lambda self: self.ref.transitions_added > 0)
    @rule(data=st.data())
    def read_of_an_unstored_step_raises_index_error(self, data):
        stored = self.ref.stored_steps()
        first = int(stored[0]) if len(stored) else self.ref.transitions_added  # none stored: after a clear()
        unstored = [-1, self.ref.transitions_added, self.ref.transitions_added + 7]
        unstored += list(range(max(0, first - 3), first))
        step = data.draw(st.sampled_from(unstored), label="unstored step")
        with pytest.raises(IndexError):
            self.store.read([step])

    @invariant()
    def store_equals_reference(self):
        if self.store is not None:
            assert_store_matches(self.store, self.ref)

    def teardown(self):
        try:
            if self.store is not None and not self.store.closed:
                self.store.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def assert_batch_matches_window(batch, i, window, ref) -> None:
    """Row ``i`` of a SequenceBatch holds the reference's transitions ``window``, zeros after it."""
    for position, step in enumerate(window):
        item = ref.transition(step)
        np.testing.assert_array_equal(batch.obs[i, position], ref.padded(item.obs, item.obs_padding))
        np.testing.assert_array_equal(batch.next_obs[i, position], ref.padded(item.next_obs, item.next_padding))
        assert batch.mask[i, position]
    assert not batch.mask[i, len(window):].any()
    assert not batch.obs[i, len(window):].any()


class FieldsStoreMachine(StoreMachine):
    """The same machine on stores with one to three user fields of random shapes and dtypes."""

    with_fields = True


class ReferenceStoreMachine(StoreMachine):
    """The same machine over frames compressed against references: groups of 4 (two levels of references)
    that restart every 12 frame steps at most, so that every boundary case meets a group boundary."""

    create_options = {
        "frame_encoding": "lz4-reference",
        "reference_scheme": ReferenceScheme(group_size=4, branching=2, max_distance=12),
    }


class ZeroPaddingStoreMachine(StoreMachine):
    """The same machine over a store whose stacks at an episode start are zero-padded (Dopamine's)."""

    create_options = {"stack_padding": "zeros"}


MODEL_SETTINGS = settings(
    max_examples=80,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestStoreModel = StoreMachine.TestCase
TestStoreModel.settings = MODEL_SETTINGS
TestReferenceStoreModel = ReferenceStoreMachine.TestCase
TestReferenceStoreModel.settings = MODEL_SETTINGS
TestFieldsStoreModel = FieldsStoreMachine.TestCase
TestFieldsStoreModel.settings = MODEL_SETTINGS
TestZeroPaddingStoreModel = ZeroPaddingStoreMachine.TestCase
TestZeroPaddingStoreModel.settings = MODEL_SETTINGS
