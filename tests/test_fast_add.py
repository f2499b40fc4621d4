"""``add``'s fast path (``Writer._add_single_frames``: each env continues its episode with one new
frame, given alone or as the newest of a stack) writes exactly what the general path writes: a store fed
with it on and one fed the same adds with it off hold the same files, byte for byte, and both equal the
in-memory reference model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lz4
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from atari_data import load_stream
from reference import ReferenceStore, assert_store_matches
from strategies import FrameSource, draw_add, store_configs

from mmreplay import PrioritizedSampler, ReplayStore, extensions
from mmreplay.rows.transitions import TERMINATED, TRUNCATED
from mmreplay.store import internals
from mmreplay.store.writing.add_arguments import parse_add, parse_single_frames

_lz4batch = extensions.load("_lz4batch")
# Byte-identical segments need the system's liblz4 (the extension's compressor) and python-lz4's
# bundled one to compress alike; the rows and the decoded frames must agree whatever they are.
SAME_COMPRESSOR = _lz4batch is None or _lz4batch.LZ4_VERSION == lz4.library_version_number()


class CountingStore:
    """Two stores fed the same adds, the first with the fast path on and the second with it off. With
    ``threads``, the fast store compresses a vector add's frames on 4 threads, as from 4 usable cores, on
    any machine."""

    def __init__(self, directory: Path, *, prioritized: bool = False, threads: bool = False, **config: Any) -> None:
        sampler = (lambda: PrioritizedSampler(alpha=0.6)) if prioritized else (lambda: None)
        if _lz4batch is None:  # without the extension only plain frames take a fast path: the default's is compiled
            config.setdefault("frame_encoding", "lz4")
        self.fast = ReplayStore.create(directory / "fast.mmr", sampler=sampler(), **config)
        self.general = ReplayStore.create(directory / "general.mmr", sampler=sampler(), **config)
        internals.writer_of(self.general).fast_add = False
        self._fast_writer = internals.writer_of(self.fast)
        if threads and _lz4batch is not None:
            self._fast_writer.append_threads = 4

    @property
    def fast_adds(self) -> int:
        """The adds the fast store's fast path took."""
        return self._fast_writer.fast_adds

    def add(self, *args: Any, **kwargs: Any) -> None:
        self.fast.add(*args, **kwargs)
        self.general.add(*args, **kwargs)

    def close_and_compare(self) -> None:
        self.fast.close()
        self.general.close()
        fast_files, general_files = files_of(self.fast.path), files_of(self.general.path)
        assert fast_files.keys() == general_files.keys()
        for name in fast_files:
            if SAME_COMPRESSOR or name == "transitions.tbl":
                assert fast_files[name] == general_files[name], f"{name} differs"


def files_of(path: Path) -> dict[str, bytes]:
    return {str(file.relative_to(path)): file.read_bytes() for file in sorted(path.rglob("*")) if file.is_file()}


def fast_path_form(args: tuple[Any, ...], num_envs: int) -> tuple[Any, ...]:
    """One env's drawn add with a numpy scalar action and a float reward, the form the fast path takes."""
    obs, action, reward, next_obs, terminated, truncated = args
    if num_envs == 1 and np.ndim(action) == 0:
        action = action[()]
    return obs, action, float(reward) if num_envs == 1 else reward, next_obs, terminated, truncated


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=store_configs(), data=st.data())
def test_the_fast_path_writes_what_the_general_path_writes(tmp_path_factory, config, data) -> None:
    """In stores of uint8 frames, plain or compressed against references (``lz4-reference``, drawn)."""
    if np.dtype(config["frame_dtype"]) == np.uint8 and data.draw(st.booleans(), label="reference frames"):
        config = {**config, "frame_encoding": "lz4-reference"}
    pair = CountingStore(tmp_path_factory.mktemp("fast"), **config)
    ref = ReferenceStore(**config)
    frames = FrameSource.of(config)
    try:
        for _ in range(data.draw(st.integers(1, 40), label="adds")):
            args = fast_path_form(draw_add(data, ref, frames).as_tuple(), config["num_envs"])
            pair.add(*args)
            ref.add(*args)
        assert_store_matches(pair.fast, ref)
    finally:
        pair.close_and_compare()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=store_configs(), data=st.data())
def test_an_add_the_fast_parse_accepted_reaches_the_general_path_as_parse_add_gives_it(
    tmp_path_factory, config, data
) -> None:
    """An add that the fast path parsed and then declined (an episode start, a commit due first) goes on
    to the general path as ``SingleFrames.arguments``, not through ``parse_add`` again: the same arrays
    (dtype, shape and bytes), envs and flags as ``parse_add`` gives."""
    with ReplayStore.create(tmp_path_factory.mktemp("parse") / "s.mmr", **config) as store:
        shapes = internals.writer_of(store).add_shapes
    ref = ReferenceStore(**config)
    frames = FrameSource.of(config)
    accepted = 0
    for _ in range(data.draw(st.integers(1, 12), label="adds")):
        args = fast_path_form(draw_add(data, ref, frames).as_tuple(), config["num_envs"])
        ref.add(*args)
        parsed = parse_single_frames(shapes, *args, terminated_bit=TERMINATED, truncated_bit=TRUNCATED)
        if parsed is None:
            continue
        accepted += 1
        got = parsed.arguments(shapes, terminated_bit=TERMINATED, truncated_bit=TRUNCATED)
        want = parse_add(*args, None, shapes)
        for name, expected in want._asdict().items():
            value = getattr(got, name)
            if isinstance(expected, np.ndarray):
                assert (value.dtype, value.shape) == (expected.dtype, expected.shape), name
                assert value.tobytes() == expected.tobytes(), name
            else:
                assert value == expected, name
    assume(accepted > 0)


REFERENCE = "lz4-reference"


@pytest.mark.parametrize(
    "num_envs,stacked,prioritized,threads,encoding",
    [(1, False, False, False, "lz4"), (8, False, False, False, "lz4"), (300, False, False, False, "lz4"),
     (1, True, False, False, "lz4"), (8, True, False, False, "lz4"), (8, False, True, False, "lz4"),
     (1, True, False, True, "lz4"), (1, False, False, True, "lz4"), (8, True, False, True, "lz4"),
     (300, False, False, True, "lz4"),
     (1, False, False, False, REFERENCE), (1, True, False, False, REFERENCE), (8, False, False, False, REFERENCE),
     (8, True, True, False, REFERENCE), (8, True, True, False, "lz4"), (300, False, False, False, REFERENCE),
     (8, True, False, True, REFERENCE), (300, False, False, True, REFERENCE), (1, False, False, True, REFERENCE),
     (1, True, False, True, REFERENCE)],
)
def test_real_frames_take_the_fast_path_across_segments_eviction_and_episode_ends(
    tmp_path: Path, num_envs: int, stacked: bool, prioritized: bool, threads: bool, encoding: str
) -> None:
    """Pong frames and noise (which does not compress: a 1 MiB segment fills every ~150 frames), evicted
    many times over, with episode ends; given as single frames or as stacks of 4 (an episode's first
    stack repeats its first frame, as gymnasium's FrameStackObservation pads it). ``threads``: a vector
    add's frames compressed on the pool's threads, as from 4 usable cores. ``lz4-reference``:
    frames compressed against their references (groups, key frames, episode restarts) by add's compiled
    call, byte for byte what the general path's encoder writes."""
    frames = load_stream("pong", ("frames",), 600)["frames"]
    noise = np.random.default_rng(num_envs).integers(0, 256, (400, *frames.shape[1:]), dtype=np.uint8)
    frames = np.concatenate([frames, noise])
    capacity = 40 * num_envs
    pair = CountingStore(tmp_path, frame_shape=frames.shape[1:], capacity=capacity, num_envs=num_envs,
                         prioritized=prioritized, threads=threads, frame_encoding=encoding)
    rng = np.random.default_rng(0)
    position = rng.integers(0, len(frames) - 1, num_envs)
    episode_start = position.copy()

    def observed(at: np.ndarray) -> np.ndarray:
        if not stacked:
            return frames[at]
        return frames[np.maximum(at[:, None] + np.arange(-3, 1), episode_start[:, None])]

    adds = 1200 if num_envs == 1 else 300
    for _ in range(adds):
        ended = rng.random(num_envs) < 0.05 / num_envs  # an env's new episode takes the general path
        terminated, truncated = ended & (rng.random(num_envs) < 0.5), ended & (rng.random(num_envs) >= 0.5)
        obs, next_obs = observed(position), observed(position + 1)
        if num_envs == 1:
            pair.add(obs[0], np.int64(rng.integers(6)), float(rng.random()), next_obs[0], terminated[0], truncated[0])
        else:
            # gymnasium's next-step autoreset recipe passes env_mask at every step, nearly always all True
            # (which the fast path takes); now and then one env is masked out (which it does not).
            choice = rng.random()
            env_mask = None if choice < 0.3 else np.ones(num_envs, bool)
            if choice > 0.97:
                env_mask[rng.integers(num_envs)] = False
            pair.add(obs, rng.integers(0, 6, num_envs), rng.random(num_envs), next_obs, terminated, truncated,
                     env_mask=env_mask)
        restart = ended | (position + 2 >= len(frames))
        position = np.where(restart, rng.integers(0, len(frames) - 1, num_envs), position + 1)
        episode_start = np.where(restart, position, episode_start)
    # The rest: new episodes, masked envs, commits, and segment ends (with 300 envs, nearly every other add).
    # Reference frames take the fast path through the extension's groups; without it, never.
    if encoding == REFERENCE and _lz4batch is None:
        assert pair.fast_adds == 0, pair.fast_adds
    else:
        assert pair.fast_adds > adds // 3, pair.fast_adds
    pair.close_and_compare()
    header = json.loads((pair.fast.path / "header.json").read_text())
    assert header["commit"]["bytes_written"] > 3 * header["layout"]["segment_bytes"]  # crossed segment ends


# -- every kind of number parse_add accepts takes the fast path ------------------------------------------------

# Action specs beyond strategies.ACTION_SPECS: every integer width and signedness the kinds below cast
# into, bool, a big-endian dtype, and one-env array actions (SB3 passes shape (1,) for a Discrete space).
KIND_ACTION_SPECS = [
    ((), np.int64), ((), np.int32), ((), np.int8), ((), np.uint8), ((), np.uint64), ((), np.float32),
    ((), np.float64), ((), np.bool_), ((), ">i4"), ((1,), np.int64), ((2,), np.float32),
]
SOURCE_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                 np.float16, np.float32, np.float64]


def action_values(action_shape: tuple[int, ...], action_dtype: Any) -> st.SearchStrategy[np.ndarray]:
    """Actions over the dtype's whole range (its extremes included); floats with nan and infinities,
    which a float action may hold."""
    dtype = np.dtype(action_dtype)
    if dtype.kind == "b":
        elements: st.SearchStrategy[Any] = st.booleans()
    elif dtype.kind == "f":
        elements = st.floats(width=8 * dtype.itemsize)
    else:
        info = np.iinfo(dtype)
        elements = st.integers(int(info.min), int(info.max))
    size = int(np.prod(action_shape))
    return st.lists(elements, min_size=size, max_size=size).map(lambda xs: np.array(xs, dtype).reshape(action_shape))


# float32 rewards, and whole numbers past 2**53 (which a float64 no longer holds exactly).
reward_values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.integers(-(2**62), 2**62).map(lambda n: float(np.float32(n))),
)


def stored_action(form: Any, dtype: np.dtype) -> bytes | None:
    """The bytes ``add`` stores for an action given as ``form``: numpy's "same_kind" casts (an int64 goes
    to signed integers and floats, not to unsigned ones), and only values the cast keeps equal; None
    where ``add`` refuses it."""
    array = np.asarray(form)
    if array.dtype.kind not in "iufb" or not np.can_cast(array.dtype, dtype, "same_kind"):
        return None
    with np.errstate(all="ignore"):
        cast = array.astype(dtype)
    if not np.can_cast(array.dtype, dtype) and not np.array_equal(cast, array, equal_nan=dtype.kind == "f"):
        return None
    return cast.tobytes()


def stored_reward(form: Any) -> bytes | None:
    """The bytes ``add`` stores for a reward given as ``form`` (any real number, rounded to float32)."""
    array = np.asarray(form)
    if array.dtype.kind not in "iuf":
        return None
    with np.errstate(all="ignore"):
        cast = array.astype(np.float32)
    return cast.tobytes() if np.isfinite(cast).all() else None


def kinds_of(value: np.ndarray, sources: list[Any], stored: Any) -> list[Any]:
    """``value`` as every kind of number (numpy scalars, 0-d arrays and Python scalars for one number;
    arrays, lists and strided views for several) that ``stored`` maps to the same bytes as ``value``."""
    forms: list[Any] = []
    for source in sources:
        with np.errstate(all="ignore"):
            array = value.astype(source)
        if array.ndim == 0:
            forms += [array[()], array, array.item()]
        else:
            forms += [array, array.tolist(), np.stack([array, array], axis=-1)[..., 0]]
    return [form for form in forms if stored(form) == stored(value)]


def flag_kinds(flag: Any) -> list[Any]:
    array = np.asarray(flag, dtype=bool)
    if array.ndim == 0:
        return [bool(array), array[()], array]
    return [array, array.tolist(), np.stack([array, array], axis=-1)[..., 0]]


def frame_kinds(frames: np.ndarray) -> list[np.ndarray]:
    """C-contiguous frames, or the same pixels as a strided view."""
    return [frames, np.stack([frames, frames], axis=-1)[..., 0]]


class KindStores:
    """Three stores fed the same transitions: ``canonical`` in the form the fast path always took (numpy
    values of the store's dtypes, float rewards, bool flags), ``fast`` and ``general`` as other kinds of
    numbers, with the fast path on and off. Each counts the adds that took the fast path."""

    def __init__(self, directory: Path, **config: Any) -> None:
        self.stores = {name: ReplayStore.create(directory / f"{name}.mmr", **config)
                       for name in ("canonical", "fast", "general")}
        internals.writer_of(self.stores["general"]).fast_add = False

    @property
    def taken(self) -> dict[str, int]:
        """The adds each store's fast path took."""
        return {name: internals.writer_of(store).fast_adds for name, store in self.stores.items()}

    def close_and_compare(self) -> None:
        for store in self.stores.values():
            store.close()
        files = {name: files_of(store.path) for name, store in self.stores.items()}
        for name in ("canonical", "fast"):
            assert files[name].keys() == files["general"].keys()
            for file in files[name]:
                if SAME_COMPRESSOR or file == "transitions.tbl":
                    assert files[name][file] == files["general"][file], f"{name}: {file} differs"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=store_configs(), action_spec=st.sampled_from(KIND_ACTION_SPECS), data=st.data())
def test_every_kind_of_number_that_add_accepts_takes_the_fast_path_and_stores_the_same_bytes(
    tmp_path_factory, config, action_spec, data
) -> None:
    """Python ints, floats and bools, numpy scalars and 0-d arrays of any integer or float kind, lists and
    arrays of any dtype that casts to the store's, strided frames: each add takes the fast path exactly
    when the same add in the canonical form does, and the stores' files are equal byte for byte."""
    action_shape, action_dtype = action_spec
    config = {**config, "action_shape": action_shape, "action_dtype": action_dtype}
    dtype = np.dtype(action_dtype)
    stores = KindStores(tmp_path_factory.mktemp("kinds"), **config)
    # draw_add supplies the frames and episode ends; the reference only tracks each env's last next_obs.
    frames_ref = ReferenceStore(**{**config, "action_dtype": np.int64})
    frames = FrameSource.of(config)
    num_envs = config["num_envs"]
    try:
        for i in range(data.draw(st.integers(1, 30), label="adds")):
            drawn = draw_add(data, frames_ref, frames).as_tuple()
            frames_ref.add(*drawn)
            obs, _, _, next_obs, terminated, truncated = drawn
            env_axis = (num_envs,) if num_envs > 1 else ()
            action = data.draw(action_values(env_axis + action_shape, dtype), label=f"add {i} action")
            reward = np.array(data.draw(st.lists(reward_values, min_size=num_envs, max_size=num_envs),
                                        label=f"add {i} rewards"), np.float32).reshape(env_axis)
            canonical = (obs, action if action.ndim else action[()], reward if num_envs > 1 else float(reward),
                         next_obs, terminated, truncated)
            other = tuple(data.draw(st.sampled_from(kinds), label=f"add {i} {name}") for name, kinds in (
                ("obs", frame_kinds(obs)),
                ("action", kinds_of(action, SOURCE_DTYPES, lambda form: stored_action(form, dtype))),
                ("reward", kinds_of(reward, SOURCE_DTYPES[1:], stored_reward)),
                ("next_obs", frame_kinds(next_obs)),
                ("terminated", flag_kinds(terminated)),
                ("truncated", flag_kinds(truncated)),
            ))
            before = dict(stores.taken)
            stores.stores["canonical"].add(*canonical)
            stores.stores["fast"].add(*other)
            stores.stores["general"].add(*other)
            took = {name: stores.taken[name] - before[name] for name in ("canonical", "fast")}
            assert took["fast"] == took["canonical"], (took, [type(x).__name__ for x in other])
        assert stores.taken["general"] == 0
    finally:
        stores.close_and_compare()


def numbered_stacks(count: int, *, stack_size: int, frame_shape: tuple[int, ...] = (6, 6)) -> list[np.ndarray]:
    """The stacks of one episode of ``count + stack_size - 1`` numbered frames, each shifted by one frame."""
    frames = FrameSource(frame_shape)
    episode = np.array([frames.frame() for _ in range(count + stack_size - 1)])
    return [episode[i : i + stack_size] for i in range(count)]


def one_env_add(form: str, obs: np.ndarray, next_obs: np.ndarray, i: int) -> tuple[Any, ...]:
    """The i-th add of one env as a training loop of each kind passes it."""
    if form == "python scalars":  # CleanRL's and most hand-written loops: add(stack, 1, 0.0, next_stack, False, False)
        return obs, i % 6, float(i % 3 - 1), next_obs, False, False
    if form == "one-env arrays":  # SB3's buffer for one env: a (1,) action, a float32 reward, numpy bools
        return obs, np.array([i % 6]), np.float32(i % 3 - 1), next_obs, np.False_, np.False_
    if form == "other numpy kinds":  # int32 actions (gymnasium's Discrete space), float64 rewards, 0-d flags
        return obs, np.int32(i % 6), np.float64(i % 3 - 1), next_obs, np.array(False), np.array(False)
    raise AssertionError(form)


@pytest.mark.parametrize("stacked", [True, False], ids=["stacks", "single frames"])
@pytest.mark.parametrize("form", ["python scalars", "one-env arrays", "other numpy kinds"])
def test_the_adds_one_env_training_loops_make_take_the_fast_path(tmp_path: Path, form: str, stacked: bool) -> None:
    action_shape = (1,) if form == "one-env arrays" else ()
    pair = CountingStore(tmp_path, frame_shape=(6, 6), capacity=1000, stack_size=4, action_shape=action_shape)
    stacks = numbered_stacks(50, stack_size=4)
    for i in range(len(stacks) - 1):
        obs, next_obs = (stacks[i], stacks[i + 1]) if stacked else (stacks[i][-1], stacks[i + 1][-1])
        pair.add(*one_env_add(form, obs, next_obs, i))
    assert pair.fast_adds == len(stacks) - 2  # all but the episode's first
    pair.close_and_compare()


@pytest.mark.parametrize("changed", [0, 1, 2, 3], ids=["oldest frame", "second", "third", "newest"])
@pytest.mark.parametrize("num_envs", [1, 2])
def test_an_obs_stack_differing_in_any_one_frame_from_the_last_next_obs_is_stored_as_given(
    tmp_path: Path, changed: int, num_envs: int
) -> None:
    # An episode continues only where the whole obs stack equals the env's last next_obs, compared frame by
    # frame: a stack that differs in one frame anywhere is a new start, stored as given, on both paths.
    pair = CountingStore(tmp_path, frame_shape=(6, 6), capacity=100, stack_size=4, num_envs=num_envs)
    stacks = numbered_stacks(3, stack_size=4)
    other = FrameSource((6, 6))
    # numbered_stacks' frames differ from each other and from other's: no frame matches by chance

    def per_env(stack: np.ndarray) -> np.ndarray:
        return stack if num_envs == 1 else np.stack([stack] * num_envs)

    action, flags = (0, False) if num_envs == 1 else (np.zeros(num_envs, np.int64), np.zeros(num_envs, np.bool_))
    reward = 0.0 if num_envs == 1 else np.zeros(num_envs, np.float32)
    pair.add(per_env(stacks[0]), action, reward, per_env(stacks[1]), flags, flags)
    pair.add(per_env(stacks[1]), action, reward, per_env(stacks[2]), flags, flags)
    assert pair.fast_adds == 1  # the whole stack equal: the episode continues (one new frame, linked)
    obs = stacks[2].copy()
    obs[changed] = other.frame()  # differs from the last next_obs in this one frame
    next_obs = np.concatenate([obs[1:], other.frame()[None]])
    pair.add(per_env(obs), action, reward, per_env(next_obs), flags, flags)
    assert pair.fast_adds == 1  # one frame differs: a new start, which the general path writes
    for store in (pair.fast, pair.general):
        batch = store.read(np.arange(2 * num_envs, 3 * num_envs))
        np.testing.assert_array_equal(batch.obs, np.stack([obs] * num_envs))
        np.testing.assert_array_equal(batch.next_obs, np.stack([next_obs] * num_envs))
    pair.close_and_compare()


def test_a_vector_add_of_lists_and_other_dtypes_takes_the_fast_path(tmp_path: Path) -> None:
    """Actions as int32 arrays and lists of Python ints, rewards as float64 arrays and lists of ints, flags
    as lists of bools."""
    num_envs = 3
    pair = CountingStore(tmp_path, frame_shape=(6, 6), capacity=1000, stack_size=2, num_envs=num_envs)
    envs = [numbered_stacks(20, stack_size=2) for _ in range(num_envs)]
    for i in range(19):
        obs, next_obs = np.array([env[i] for env in envs]), np.array([env[i + 1] for env in envs])
        if i % 2:
            action, reward, ended = np.arange(num_envs, dtype=np.int32), np.full(num_envs, 0.5), np.zeros(num_envs, bool)
        else:
            action, reward, ended = [i, 2**40, -1], [1, 0, -(2**60)], [False] * num_envs
        pair.add(obs, action, reward, next_obs, ended, ended)
    assert pair.fast_adds == 18
    pair.close_and_compare()


def test_a_big_endian_action_dtype_is_stored_by_value_on_the_fast_path(tmp_path: Path) -> None:
    """The rows hold actions little-endian whatever the store's dtype: an array of a big-endian dtype is
    converted, not copied byte for byte (the fast path once stored 3 as 50331648 here)."""
    store = ReplayStore.create(tmp_path / "s.mmr", frame_shape=(2, 2), capacity=10, num_envs=2, action_dtype=">i4")
    frames = [np.full((2, 2, 2), value, np.uint8) for value in range(4)]
    no = np.zeros(2, bool)
    for i in range(3):
        store.add(frames[i], np.array([2 * i + 1, 2 * i + 2], ">i4"), np.zeros(2, np.float32), frames[i + 1], no, no)
    batch = store.read(np.arange(6))
    assert batch.action.tolist() == [1, 2, 3, 4, 5, 6]
    store.close()


# Adds the fast path would take but for one value that add refuses: (store options, the bad argument,
# add's error). An int for a uint8 action is refused because np.asarray makes an int64 of it.
REFUSED = [
    ({"action_dtype": np.uint8}, {"action": -1}, ValueError, "action has values out of range for uint8: [-1]"),
    ({"action_dtype": np.int8}, {"action": 128}, ValueError, "action has values out of range for int8: [128]"),
    ({}, {"action": 2**63}, ValueError, "action has values out of range for int64: [9223372036854775808]"),
    ({}, {"action": 2**64}, TypeError, "action has dtype object; expected values castable to int64"),
    ({}, {"action": 1.0}, TypeError, "action has dtype float64; expected values castable to int64"),
    ({"action_dtype": np.float32}, {"action": 0.1}, ValueError, "action has values out of range for float32: [0.1]"),
    ({}, {"reward": float("nan")}, ValueError, "reward must be finite; got nan"),
    ({}, {"reward": -float("inf")}, ValueError, "reward must be finite; got -inf"),
    ({}, {"reward": 1e39}, ValueError, "reward must be finite; got inf"),
    ({}, {"reward": 10**40}, TypeError, "reward must be a real number; got dtype object"),
    ({}, {"reward": True}, TypeError, "reward must be a real number; got dtype bool"),
    ({}, {"terminated": 1}, TypeError, "terminated must be bool; got dtype int64"),
    ({}, {"truncated": np.array([False])}, ValueError, "truncated has shape (1,); expected () for num_envs=1"),
]


@pytest.mark.parametrize("options,bad,error,message", REFUSED, ids=[str(case[1]) for case in REFUSED])
def test_a_value_add_refuses_is_refused_by_the_fast_path_with_add_s_message_and_nothing_written(
    tmp_path: Path, options: dict[str, Any], bad: dict[str, Any], error: type, message: str
) -> None:
    pair = CountingStore(tmp_path, frame_shape=(2, 2), capacity=10, stack_size=2, **options)
    first, second, third = numbered_stacks(3, stack_size=2, frame_shape=(2, 2))
    pair.add(first, np.zeros((), pair.fast.action_dtype), 0.0, second, False, False)
    pair.fast.flush()
    before = files_of(pair.fast.path)
    good = {"obs": second, "action": np.ones((), pair.fast.action_dtype), "reward": 0.0, "next_obs": third,
            "terminated": False, "truncated": False}
    for store in (pair.fast, pair.general):
        with pytest.raises(error) as refused:
            store.add(**(good | bad))
        assert str(refused.value) == message
    pair.fast.flush()
    assert files_of(pair.fast.path) == before
    assert pair.fast_adds == 0
    pair.fast.add(**good)  # the same add with the value fixed takes the fast path
    pair.general.add(**good)
    assert pair.fast_adds == 1
    pair.close_and_compare()
