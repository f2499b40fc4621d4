"""One env's scalars (action, reward, terminated, truncated) parsed in one compiled call
(``_lz4batch.one_env_values``) where they have the forms a training loop passes at nearly every step, for
``Writer._add_one_env``. The Python parse (``parse_one_env_values`` without ``form``) is the model: the
compiled call returns exactly its result, or None (the Python parse then decides), and never None for the
common forms. test_fast_add checks that stores written through it hold the general path's bytes.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmreplay import extensions
from mmreplay.store.add_arguments import AddShapes, one_env_values_form, parse_one_env_values

_lz4batch = extensions.load("_lz4batch")
pytestmark = pytest.mark.skipif(_lz4batch is None, reason="needs mmreplay._lz4batch")

TERMINATED, TRUNCATED = 1, 2
ACTION_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "float32", "float64", "bool"]


def shapes_of(action_dtype: str, *, num_envs: int = 1, action_shape: tuple[int, ...] = ()) -> AddShapes:
    return AddShapes.of(frame_shape=(2, 3), stack_size=4, num_envs=num_envs, action_shape=action_shape,
                        action_dtype=np.dtype(action_dtype))


def python_parse(shapes: AddShapes, action: object, reward: object, terminated: object, truncated: object) -> object:
    return parse_one_env_values(shapes, action, reward, terminated, truncated, terminated_bit=TERMINATED,
                                truncated_bit=TRUNCATED)


def same(compiled: object, python: object) -> bool:
    """Equal to the bit: the action's bytes, the reward's float64 bits (-0.0 is not 0.0), the flags."""
    if compiled is None or python is None:
        return compiled is python
    assert isinstance(compiled, tuple) and isinstance(python, tuple)
    (action, reward, flags), (action_py, reward_py, flags_py) = compiled, python
    return (type(action) is bytes and action == action_py and type(reward) is float
            and struct.pack("<d", reward) == struct.pack("<d", reward_py) and type(flags) is int and flags == flags_py)


numpy_scalars = st.sampled_from([np.int8, np.int16, np.int32, np.int64, np.uint8, np.float32, np.float64]).flatmap(
    lambda t: st.integers(-128, 127).map(lambda v: t(v) if np.dtype(t).kind != "u" else t(abs(v)))
)
actions = st.one_of(
    st.integers(-(2**70), 2**70), st.integers(-300, 300), st.booleans(), numpy_scalars,
    st.floats(allow_nan=True, allow_infinity=True), st.none(), st.just("1"),
)
rewards = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.floats(-1e6, 1e6), st.sampled_from([-0.0, 3.5e38, -3.5e38]),
    st.integers(-(2**60), 2**60), st.sampled_from([2**53, 2**53 + 1, -(2**53) - 1]), st.booleans(),
    st.floats(-10, 10).map(np.float32), st.floats(-10, 10).map(np.float64), st.none(),
)
flag_values = st.one_of(st.booleans(), st.booleans().map(np.bool_), st.integers(0, 2), st.none())


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(ACTION_DTYPES), actions, rewards, flag_values, flag_values)
def test_the_compiled_parse_equals_the_python_parse_or_leaves_it_to_it(
    dtype: str, action: object, reward: object, terminated: object, truncated: object
) -> None:
    shapes = shapes_of(dtype)
    form = one_env_values_form(shapes, terminated_bit=TERMINATED, truncated_bit=TRUNCATED)
    assert form is not None
    compiled = _lz4batch.one_env_values(action, reward, terminated, truncated, form)
    python = python_parse(shapes, action, reward, terminated, truncated)
    if compiled is not None:
        assert same(compiled, python), (compiled, python)
    assert same(parse_one_env_values(shapes, action, reward, terminated, truncated, terminated_bit=TERMINATED,
                                     truncated_bit=TRUNCATED, form=form), python)
    # The forms a training loop passes at nearly every step are all taken.
    bounds = np.iinfo(dtype) if np.dtype(dtype).kind == "i" else None
    common_action = (type(action) is np.dtype(dtype).type
                     or (bounds is not None and type(action) is int and bounds.min <= action <= bounds.max))
    common_reward = ((type(reward) is float and not math.isnan(reward) and abs(reward) <= float(np.finfo(np.float32).max))
                     or (type(reward) is int and abs(reward) <= 2**53))
    if common_action and common_reward and type(terminated) is bool and type(truncated) is bool:
        assert compiled is not None


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_a_signed_action_at_and_past_its_bounds(dtype: str) -> None:
    shapes = shapes_of(dtype)
    form = one_env_values_form(shapes, terminated_bit=TERMINATED, truncated_bit=TRUNCATED)
    info = np.iinfo(dtype)
    for value in (int(info.min), int(info.max), 0, -1):
        compiled = _lz4batch.one_env_values(value, 1.0, False, True, form)
        assert compiled == (np.array(value, dtype).astype(np.dtype(dtype).newbyteorder("<")).tobytes(), 1.0, TRUNCATED)
        assert same(compiled, python_parse(shapes, value, 1.0, False, True))
    for value in (int(info.min) - 1, int(info.max) + 1):
        assert _lz4batch.one_env_values(value, 1.0, False, False, form) is None
        assert python_parse(shapes, value, 1.0, False, False) is None  # parse_add refuses it: so does the add


def test_the_flags_and_the_reward_as_the_row_stores_them() -> None:
    form = one_env_values_form(shapes_of("int64"), terminated_bit=TERMINATED, truncated_bit=TRUNCATED)
    assert _lz4batch.one_env_values(np.int64(7), -0.5, True, True, form) == (
        (7).to_bytes(8, "little"), -0.5, TERMINATED | TRUNCATED)
    assert _lz4batch.one_env_values(2, 3, True, False, form) == ((2).to_bytes(8, "little"), 3.0, TERMINATED)
    # Past float32's range, nan, an int not exact as a float64, numpy flags: the Python parse decides.
    for reward in (3.5e38, math.nan, math.inf, 2**53 + 1, np.float32(1.0)):
        assert _lz4batch.one_env_values(2, reward, False, False, form) is None
    assert _lz4batch.one_env_values(2, 1.0, np.bool_(True), False, form) is None
    assert _lz4batch.one_env_values(2, 1.0, False, 1, form) is None


def test_stores_without_a_compiled_form() -> None:
    """Several envs, an action with a shape, or a scalar wider than 8 bytes: the Python parse alone."""
    assert one_env_values_form(shapes_of("int64", num_envs=2), terminated_bit=1, truncated_bit=2) is None
    assert one_env_values_form(shapes_of("float32", action_shape=(2,)), terminated_bit=1, truncated_bit=2) is None
    assert one_env_values_form(shapes_of("complex128"), terminated_bit=1, truncated_bit=2) is None
    assert one_env_values_form(shapes_of("uint64"), terminated_bit=1, truncated_bit=2)[2] is False  # no int packing


def test_the_wrong_arguments_are_refused() -> None:
    form = one_env_values_form(shapes_of("int64"), terminated_bit=TERMINATED, truncated_bit=TRUNCATED)
    with pytest.raises(TypeError, match="takes 5 arguments"):
        _lz4batch.one_env_values(1, 1.0, False, False)
    with pytest.raises(TypeError, match="form must be a tuple"):
        _lz4batch.one_env_values(1, 1.0, False, False, list(form))
    with pytest.raises(ValueError, match="1 to 8 bytes; got 9"):
        _lz4batch.one_env_values(1, 1.0, False, False, (np.int64, 9, True, 1, 2))
