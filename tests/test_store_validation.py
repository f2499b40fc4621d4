"""Every bad input is refused with the right error, naming the argument, and changes nothing.

A rejected ``add`` must leave the store exactly as it was: the same ``len``, the same
``transitions_added``, the same ``read`` results, and the env's episode still in progress, so that the
next valid add continues it. This holds for vector adds where only one env's value is bad.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from reference import assert_same_snapshot, snapshot
from strategies import OBS, frame, stack

from mmreplay import ReplayStore

STACK = 3  # stack_size of every store here; differs from the num_envs used, so shapes are unambiguous


@dataclass
class Args:
    obs: Any
    action: Any
    reward: Any
    next_obs: Any
    terminated: Any
    truncated: Any

    def as_tuple(self) -> tuple[Any, ...]:
        return (self.obs, self.action, self.reward, self.next_obs, self.terminated, self.truncated)


@dataclass
class Case:
    """One way to spoil a valid add: the error type, a pattern naming the argument, what was received."""

    spoil: Callable[[Args], None]
    error: type
    name: str
    received: str | None = None
    stacks: bool = False  # spoil a valid add given as stacks rather than single frames
    kwargs: dict = field(default_factory=dict)  # store configuration beyond the defaults


def set_(attr: str, value: Any) -> Callable[[Args], None]:
    def spoil(args: Args) -> None:
        setattr(args, attr, value() if callable(value) else value)

    return spoil


def valid_args(pair, *, stacks: bool) -> Args:
    """A valid add that continues every env's episode in progress (frames: env e at 10 * e + t)."""
    n = pair.store.num_envs
    prev = [pair.ref.previous_next_obs(e) for e in range(n)]
    if stacks:
        obs = [p.copy() for p in prev]
        nxt = [np.concatenate([p[1:], (p[-1:] + 1)], axis=0) for p in prev]
    else:
        obs = [p[-1].copy() for p in prev]
        nxt = [p[-1] + 1 for p in prev]
    action_shape = pair.store.action_shape
    if n == 1:
        return Args(obs[0], np.zeros(action_shape, pair.store.action_dtype), 0.5, nxt[0], False, False)
    return Args(
        np.array(obs), np.zeros((n, *action_shape), pair.store.action_dtype), np.full(n, 0.5),
        np.array(nxt), np.zeros(n, bool), np.zeros(n, bool),
    )


@pytest.fixture
def primed(make_pair):
    """``primed(num_envs, **kwargs)``: a store with two transitions per env, every episode in progress."""

    def make(num_envs: int = 1, **kwargs: Any):
        pair = make_pair(stack_size=STACK, num_envs=num_envs, capacity=16, **kwargs)
        action_shape = kwargs.get("action_shape", ())
        dtype = kwargs.get("action_dtype", np.int64)
        for t in range(2):
            values = [10 * e + t + 1 for e in range(num_envs)]
            if num_envs == 1:
                pair.add(frame(values[0]), np.zeros(action_shape, dtype), 1.0, frame(values[0] + 1))
            else:
                pair.add(
                    np.array([frame(v) for v in values]), np.zeros((num_envs, *action_shape), dtype),
                    np.ones(num_envs), np.array([frame(v + 1) for v in values]), np.zeros(num_envs, bool),
                    np.zeros(num_envs, bool),
                )
        return pair

    return make


def assert_rejected_add_changes_nothing(pair, case: Case) -> pytest.ExceptionInfo:
    args = valid_args(pair, stacks=case.stacks)
    good = Args(*(np.copy(x) if isinstance(x, np.ndarray) else x for x in args.as_tuple()))
    case.spoil(args)
    before = snapshot(pair.store)
    with pytest.raises(case.error, match=case.name) as info:
        pair.store.add(*args.as_tuple())
    assert_same_snapshot(before, snapshot(pair.store))
    # The episode in progress is untouched: the valid add continues it, as in the reference.
    pair.add(*good.as_tuple())
    pair.check()
    return info


# -- single env (no env axis) ----------------------------------------------------------------------

SINGLE_ENV_CASES = {
    "obs_float32": Case(set_("obs", np.zeros((3, 4), np.float32)), TypeError, OBS, "float32"),
    "obs_int64": Case(set_("obs", np.zeros((3, 4), np.int64)), TypeError, OBS, "int64"),
    "obs_bool": Case(set_("obs", np.zeros((3, 4), bool)), TypeError, OBS, "bool"),
    "next_obs_float64": Case(set_("next_obs", np.zeros((3, 4))), TypeError, "next_obs", "float64"),
    "obs_stack_float32": Case(set_("obs", np.zeros((STACK, 3, 4), np.float32)), TypeError, OBS, "float32",
                              stacks=True),
    "obs_frame_shape": Case(set_("obs", np.zeros((3, 5), np.uint8)), ValueError, OBS, "(3, 5)"),
    "obs_flat": Case(set_("obs", np.zeros(12, np.uint8)), ValueError, OBS, "(12,)"),
    "obs_scalar": Case(set_("obs", np.uint8(3)), ValueError, OBS, "()"),
    "next_obs_frame_shape": Case(set_("next_obs", np.zeros((4, 3), np.uint8)), ValueError, "next_obs", "(4, 3)"),
    "obs_stack_too_short": Case(set_("obs", np.zeros((STACK - 1, 3, 4), np.uint8)), ValueError, OBS,
                                "(2, 3, 4)", stacks=True),
    "obs_stack_too_long": Case(set_("obs", np.zeros((STACK + 1, 3, 4), np.uint8)), ValueError, OBS,
                               "(4, 3, 4)", stacks=True),
    "next_obs_stack_too_long": Case(set_("next_obs", np.zeros((STACK + 1, 3, 4), np.uint8)), ValueError,
                                    "next_obs", "(4, 3, 4)", stacks=True),
    "obs_frame_next_obs_stack": Case(set_("next_obs", lambda: stack(0, 0, 0)), ValueError, "obs"),
    "obs_stack_next_obs_frame": Case(set_("next_obs", lambda: frame(0)), ValueError, "obs", stacks=True),
    "next_obs_stack_not_shifted": Case(
        lambda a: a.next_obs.__setitem__(0, 255 - a.next_obs[0]), ValueError, "next_obs", stacks=True
    ),
    "action_shape": Case(set_("action", np.array([1, 2])), ValueError, "action", "(2,)"),
    "action_float_into_int": Case(set_("action", np.float64(1.0)), TypeError, "action", "float64"),
    "action_python_float_into_int": Case(set_("action", 1.5), TypeError, "action", "float"),
    "action_float32_array_into_int": Case(set_("action", np.array(2, np.float32)), TypeError, "action",
                                          "float32"),
    "action_string": Case(set_("action", "left"), TypeError, "action"),
    "action_none": Case(set_("action", None), TypeError, "action"),
    "reward_nan": Case(set_("reward", float("nan")), ValueError, "reward", "nan"),
    "reward_inf": Case(set_("reward", float("inf")), ValueError, "reward", "inf"),
    "reward_beyond_float32": Case(set_("reward", np.float64(1e300)), ValueError, "reward", "inf"),
    "reward_minus_inf": Case(set_("reward", np.float32("-inf")), ValueError, "reward", "-inf"),
    "reward_string": Case(set_("reward", "1.0"), TypeError, "reward"),
    "reward_none": Case(set_("reward", None), TypeError, "reward"),
    "reward_complex": Case(set_("reward", 1 + 2j), TypeError, "reward"),
    "reward_shape": Case(set_("reward", np.zeros(2)), ValueError, "reward", "(2,)"),
    "terminated_int": Case(set_("terminated", 1), TypeError, "terminated"),
    "terminated_string": Case(set_("terminated", "yes"), TypeError, "terminated"),
    "terminated_none": Case(set_("terminated", None), TypeError, "terminated"),
    "terminated_float_array": Case(set_("terminated", np.float32(0.0)), TypeError, "terminated", "float32"),
    "terminated_shape": Case(set_("terminated", np.zeros(2, bool)), ValueError, "terminated", "(2,)"),
    "truncated_int": Case(set_("truncated", 0), TypeError, "truncated"),
    "truncated_shape": Case(set_("truncated", np.zeros(1, bool)), ValueError, "truncated", "(1,)"),
}


@pytest.mark.parametrize("case", SINGLE_ENV_CASES.values(), ids=SINGLE_ENV_CASES.keys())
def test_bad_single_env_add_is_refused_naming_the_argument_and_changes_nothing(primed, case):
    assert_rejected_add_changes_nothing(primed(1), case)


ACTION_SHAPE_CASES = {
    "scalar_for_shape_2": Case(set_("action", 0), ValueError, "action", "()"),
    "shape_3_for_shape_2": Case(set_("action", np.zeros(3, np.float32)), ValueError, "action", "(3,)"),
    "shape_2_1_for_shape_2": Case(set_("action", np.zeros((2, 1), np.float32)), ValueError, "action",
                                  "(2, 1)"),
}


@pytest.mark.parametrize("case", ACTION_SHAPE_CASES.values(), ids=ACTION_SHAPE_CASES.keys())
def test_action_of_the_wrong_shape_is_refused(primed, case):
    assert_rejected_add_changes_nothing(primed(1, action_shape=(2,), action_dtype=np.float32), case)


# -- vector envs (a leading env axis on every argument) --------------------------------------------

VECTOR_CASES = {
    "obs_missing_env_axis": Case(set_("obs", lambda: frame(1)), ValueError, OBS, "(3, 4)"),
    "obs_stack_missing_env_axis": Case(set_("obs", lambda: stack(1, 2, 3)), ValueError, OBS, "(3, 3, 4)",
                                       stacks=True),
    "obs_env_axis_too_short": Case(set_("obs", np.zeros((1, 3, 4), np.uint8)), ValueError, OBS, "(1, 3, 4)"),
    "next_obs_missing_env_axis": Case(set_("next_obs", lambda: frame(1)), ValueError, "next_obs", "(3, 4)"),
    "next_obs_env_axis_too_long": Case(set_("next_obs", np.zeros((3, 3, 4), np.uint8)), ValueError,
                                       "next_obs", "(3, 3, 4)"),
    "obs_float": Case(set_("obs", np.zeros((2, 3, 4), np.float64)), TypeError, OBS, "float64"),
    "action_missing_env_axis": Case(set_("action", 0), ValueError, "action", "()"),
    "action_env_axis_too_long": Case(set_("action", np.zeros(3, np.int64)), ValueError, "action", "(3,)"),
    "action_float": Case(set_("action", np.zeros(2, np.float32)), TypeError, "action", "float32"),
    "reward_missing_env_axis": Case(set_("reward", 0.0), ValueError, "reward", "()"),
    "reward_env_axis_too_long": Case(set_("reward", np.zeros(3)), ValueError, "reward", "(3,)"),
    "terminated_missing_env_axis": Case(set_("terminated", False), ValueError, "terminated", "()"),
    "terminated_int_array": Case(set_("terminated", np.zeros(2, np.int64)), TypeError, "terminated", "int64"),
    "truncated_missing_env_axis": Case(set_("truncated", np.bool_(False)), ValueError, "truncated", "()"),
    "truncated_env_axis_too_long": Case(set_("truncated", np.zeros(3, bool)), ValueError, "truncated", "(3,)"),
}


@pytest.mark.parametrize("case", VECTOR_CASES.values(), ids=VECTOR_CASES.keys())
def test_bad_vector_add_is_refused_naming_the_argument_and_changes_nothing(primed, case):
    assert_rejected_add_changes_nothing(primed(2), case)


def env3(attr: str, value: Any) -> Callable[[Args], None]:
    def spoil(args: Args) -> None:
        getattr(args, attr)[3] = value

    return spoil


def unshift_env3(args: Args) -> None:
    args.next_obs[3, 0] = 255 - args.next_obs[3, 0]


PARTIAL_CASES = {
    "reward_nan_in_env_3": Case(env3("reward", np.nan), ValueError, "reward"),
    "reward_inf_in_env_3": Case(env3("reward", np.inf), ValueError, "reward"),
    "reward_nan_in_env_3_with_stacks": Case(env3("reward", np.nan), ValueError, "reward", stacks=True),
    "next_obs_not_shifted_in_env_3": Case(unshift_env3, ValueError, "next_obs", stacks=True),
}


@pytest.mark.parametrize("case", PARTIAL_CASES.values(), ids=PARTIAL_CASES.keys())
def test_vector_add_bad_only_in_env_3_changes_nothing_for_any_env(primed, case):
    assert_rejected_add_changes_nothing(primed(4), case)


def add_with_env_3_masked(pair, args: Args) -> None:
    """``add`` with env 3 masked out, in the store and in the reference (which records envs 0-2)."""
    from reference_windows import add_masked

    mask = np.array([True, True, True, False])
    pair.store.add(*args.as_tuple(), env_mask=mask)
    add_masked(pair.ref, args.as_tuple(), mask)


# A masked-out env's entry is no transition (gymnasium's next-step autoreset passes the reset obs and
# whatever reward there): its values are not checked, only its shape and dtype.
MASKED_VALUE_CASES = {
    "reward_nan_in_masked_env_3": Case(env3("reward", np.nan), ValueError, "reward"),
    "reward_inf_in_masked_env_3_with_stacks": Case(env3("reward", np.inf), ValueError, "reward", stacks=True),
    "next_obs_not_shifted_in_masked_env_3": Case(unshift_env3, ValueError, "next_obs", stacks=True),
    "next_obs_a_reset_stack_in_masked_env_3": Case(
        lambda a: a.next_obs.__setitem__(3, 200), ValueError, "next_obs", stacks=True
    ),
    "action_out_of_range_in_masked_env_3": Case(
        lambda a: setattr(a, "action", np.array([0, 1, 2, 2**40], np.int64)), ValueError, "action",
        kwargs=dict(action_dtype=np.int32),
    ),
}


@pytest.mark.parametrize("case", MASKED_VALUE_CASES.values(), ids=MASKED_VALUE_CASES.keys())
def test_values_of_a_masked_out_env_are_not_checked_and_the_other_envs_are_recorded(primed, case):
    pair = primed(4, **case.kwargs)
    args = valid_args(pair, stacks=case.stacks)
    case.spoil(args)
    with pytest.raises(case.error, match=case.name):  # unmasked, the same add is refused
        pair.store.add(*args.as_tuple())
    add_with_env_3_masked(pair, args)
    pair.check()


MASKED_SHAPE_CASES = {
    "obs_dtype": Case(set_("obs", lambda: np.zeros((4, 3, 4), np.float32)), TypeError, OBS),
    "next_obs_shape": Case(set_("next_obs", lambda: np.zeros((4, 3, 5), np.uint8)), ValueError, "next_obs"),
    "reward_shape": Case(set_("reward", lambda: np.zeros(3)), ValueError, "reward"),
    "reward_kind": Case(set_("reward", lambda: np.array(["a", "b", "c", "d"])), TypeError, "reward"),
    "action_kind": Case(set_("action", lambda: np.array([0.5, 1, 2, 3])), TypeError, "action"),
    "terminated_dtype": Case(set_("terminated", lambda: np.zeros(4, np.int8)), TypeError, "terminated"),
}


@pytest.mark.parametrize("case", MASKED_SHAPE_CASES.values(), ids=MASKED_SHAPE_CASES.keys())
def test_shapes_and_dtypes_are_checked_for_masked_out_envs_too(primed, case):
    pair = primed(4)
    args = valid_args(pair, stacks=case.stacks)
    case.spoil(args)
    before = snapshot(pair.store)
    with pytest.raises(case.error, match=case.name):
        pair.store.add(*args.as_tuple(), env_mask=np.array([True, True, True, False]))
    assert_same_snapshot(before, snapshot(pair.store))


RECEIVED_CASES = {
    **{k: (1, c) for k, c in SINGLE_ENV_CASES.items() if c.received is not None},
    **{f"vector_{k}": (2, c) for k, c in VECTOR_CASES.items() if c.received is not None},
}


@pytest.mark.parametrize("num_envs,case", RECEIVED_CASES.values(), ids=RECEIVED_CASES.keys())
def test_error_message_quotes_what_was_received(primed, num_envs, case):
    pair = primed(num_envs)
    args = valid_args(pair, stacks=case.stacks)
    case.spoil(args)
    with pytest.raises(case.error) as info:
        pair.store.add(*args.as_tuple())
    assert case.received in str(info.value), f"message {str(info.value)!r} does not quote {case.received!r}"


def test_rejected_first_add_leaves_an_empty_store(make_pair):
    pair = make_pair(stack_size=2, num_envs=2)
    with pytest.raises(ValueError, match="reward"):
        pair.store.add(np.array([frame(1), frame(2)]), np.zeros(2, np.int64), np.array([0.0, np.nan]),
                       np.array([frame(3), frame(4)]), np.zeros(2, bool), np.zeros(2, bool))
    assert len(pair.store) == 0 and pair.store.transitions_added == 0
    with pytest.raises(ValueError):
        pair.store.sample(1, rng=0)
    pair.add(np.array([frame(1), frame(2)]), np.zeros(2, np.int64), np.zeros(2), np.array([frame(3), frame(4)]),
             np.zeros(2, bool), np.zeros(2, bool))
    pair.check()


def test_rejected_add_after_wraparound_changes_nothing(make_pair):
    pair = make_pair(stack_size=STACK, capacity=3)
    for t in range(1, 6):
        pair.add(frame(t), 0, 0.0, frame(t + 1))
    before = snapshot(pair.store)
    with pytest.raises(ValueError, match="next_obs"):
        pair.store.add(stack(3, 4, 6), 0, 0.0, stack(4, 9, 7), False, False)
    assert_same_snapshot(before, snapshot(pair.store))
    pair.add(frame(6), 0, 0.0, frame(7))
    pair.check()


def test_rejected_add_survives_reopen_unchanged(primed):
    pair = primed(1)
    args = valid_args(pair, stacks=False)
    with pytest.raises(ValueError, match="reward"):
        pair.store.add(args.obs, args.action, float("nan"), args.next_obs, False, False)
    pair.reopen("r+")
    pair.add(*args.as_tuple())
    pair.check()


# -- create, open, sample, read arguments ----------------------------------------------------------

CREATE_CASES = {
    "capacity_zero": (dict(capacity=0), ValueError, "capacity"),
    "capacity_negative": (dict(capacity=-5), ValueError, "capacity"),
    "capacity_below_num_envs": (dict(capacity=2, num_envs=3), ValueError, "capacity"),
    "stack_size_zero": (dict(stack_size=0), ValueError, "stack_size"),
    "num_envs_zero": (dict(num_envs=0), ValueError, "num_envs"),
    "frame_shape_with_zero": (dict(frame_shape=(0, 4)), ValueError, "frame_shape"),
    "frame_shape_negative": (dict(frame_shape=(3, -4)), ValueError, "frame_shape"),
    "action_shape_negative": (dict(action_shape=(-1,)), ValueError, "action_shape"),
    "capacity_float": (dict(capacity=2.5), (TypeError, ValueError), "capacity"),
    "capacity_string": (dict(capacity="10"), TypeError, "capacity"),
}


@pytest.mark.parametrize("kwargs,error,name", CREATE_CASES.values(), ids=CREATE_CASES.keys())
def test_bad_create_argument_is_refused_and_writes_nothing(store_path, kwargs, error, name):
    config = dict(frame_shape=(3, 4), capacity=8, stack_size=2, num_envs=1)
    config.update(kwargs)
    with pytest.raises(error, match=name):
        ReplayStore.create(store_path, **config)
    assert not store_path.exists(), "a refused create left files behind"


def test_capacity_equal_to_num_envs_is_accepted(store_path):
    store = ReplayStore.create(store_path, frame_shape=(3, 4), capacity=3, num_envs=3)
    store.close()


@pytest.mark.parametrize("batch_size,error", [(0, ValueError), (-3, ValueError), (2.5, (TypeError, ValueError)),
                                              ("4", TypeError), (None, TypeError)])
def test_bad_batch_size_is_refused(primed, batch_size, error):
    pair = primed(1)
    with pytest.raises(error, match="batch_size"):
        pair.store.sample(batch_size, rng=0)


def test_numpy_integer_batch_size_is_accepted(primed):
    pair = primed(1)
    assert pair.store.sample(np.int64(3), rng=0).index.shape == (3,)


def test_bad_rng_is_refused(primed):
    pair = primed(1)
    with pytest.raises((TypeError, ValueError), match="rng"):
        pair.store.sample(2, rng="seed")



def test_a_python_int_action_goes_into_an_unsigned_action_dtype_and_out_of_range_values_are_refused(make_store):
    store = make_store(stack_size=1, action_dtype=np.uint8)
    obs, next_obs = np.zeros((3, 4), np.uint8), np.ones((3, 4), np.uint8)
    store.add(obs, 3, 0.0, next_obs, False, False)
    store.add(next_obs, np.int64(255), 0.0, np.full((3, 4), 2, np.uint8), False, False)
    np.testing.assert_array_equal(store.read([0, 1]).action, np.array([3, 255], np.uint8))
    for bad in (-1, 256, np.int16(-5)):
        with pytest.raises(ValueError, match="action has values out of range for uint8"):
            store.add(np.full((3, 4), 2, np.uint8), bad, 0.0, np.full((3, 4), 3, np.uint8), False, False)
    assert store.transitions_added == 2
