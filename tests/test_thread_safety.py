"""Threads of one process sharing one store: every call is served whole, one at a time, or refused clearly.

Two threads adding to one store got internal errors ("arguments out of range") and transitions with the
other thread's obs, because an add read the step it writes and the env's episode
before it took the lock. Each thread here writes frames that encode (thread, t), so every stored
transition can be checked against what its add gave, wherever the threads interleaved. The switch
interval is made tiny so that the threads change places inside the calls.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from mmreplay import ClosedStoreError, ReplayStore

SHAPE = (6, 6)


@pytest.fixture(autouse=True)
def tiny_switch_interval() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def frame(owner: int, t: int) -> np.ndarray:
    """A frame that says which thread (or env) made it and at which t."""
    value = np.zeros(SHAPE, np.uint8)
    value[0, 0], value[0, 1], value[0, 2] = owner, t % 256, t // 256
    return value


def decode(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, t) of each frame of ``frames`` (..., *SHAPE)."""
    ints = frames.astype(np.int64)
    return ints[..., 0, 0], ints[..., 0, 1] + 256 * ints[..., 0, 2]


def run_threads(targets: list[Callable[[], None]]) -> list[str]:
    """Run each target in its own thread; the errors they raised."""
    errors: list[str] = []

    def guarded(target: Callable[[], None]) -> None:
        try:
            target()
        except Exception as error:  # reported by the test
            errors.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=guarded, args=(target,)) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_two_threads_adding_each_its_env_store_every_transition_with_its_own_stacks(tmp_path: Path) -> None:
    """Each thread records its own env of a two-env store (``env_mask``), 4-frame stacks of single frames:
    no add fails, and every stored obs and next_obs stack is the one its env's episode gave."""
    steps = 1500
    store = ReplayStore.create(tmp_path / "store.mmr", frame_shape=SHAPE, capacity=10 * steps, stack_size=4,
                               num_envs=2, commit_interval_s=None)

    def adding(env: int) -> Callable[[], None]:
        def run() -> None:
            mask = np.arange(2) == env
            for t in range(steps):
                obs, next_obs = np.stack([frame(env, t)] * 2), np.stack([frame(env, t + 1)] * 2)
                store.add(obs, np.full(2, t), np.zeros(2, np.float32), next_obs, np.zeros(2, bool), np.zeros(2, bool),
                          env_mask=mask)
        return run

    assert run_threads([adding(0), adding(1)]) == []
    assert store.transitions_added == 2 * steps
    batch = store.read(np.arange(2 * steps))
    owner, t = decode(batch.obs)
    next_owner, next_t = decode(batch.next_obs)
    env = batch.env_index[:, None]
    expected_t = np.maximum(batch.action[:, None] + np.arange(-3, 1), 0)  # padded with the episode's first frame
    np.testing.assert_array_equal(owner, np.broadcast_to(env, owner.shape))
    np.testing.assert_array_equal(next_owner, np.broadcast_to(env, owner.shape))
    np.testing.assert_array_equal(t, expected_t)
    np.testing.assert_array_equal(next_t, np.maximum(batch.action[:, None] + np.arange(-2, 2), 0))
    for e in (0, 1):
        np.testing.assert_array_equal(np.sort(batch.action[batch.env_index == e]), np.arange(steps))
    assert len(store.episodes()) == 2
    store.close()


def test_threads_adding_to_a_one_env_store_store_each_add_as_given(tmp_path: Path) -> None:
    """Three threads continue their own episodes in one env (``add``'s fast path while a thread keeps its
    turn, a new episode where another thread's add came between): every add that returned is stored once,
    with its own obs and next_obs."""
    steps, threads = 1000, 3
    store = ReplayStore.create(tmp_path / "store.mmr", frame_shape=SHAPE, capacity=threads * steps, stack_size=1,
                               commit_every=97, commit_interval_s=None)

    def adding(owner: int) -> Callable[[], None]:
        def run() -> None:
            for t in range(steps):
                store.add(frame(owner, t), owner * 100_000 + t, float(t), frame(owner, t + 1), False, False)
        return run

    assert run_threads([adding(k) for k in range(threads)]) == []
    assert store.transitions_added == threads * steps
    store.close()
    with ReplayStore.open(tmp_path / "store.mmr") as reopened:
        batch = reopened.read(np.arange(threads * steps))
    owner, t = decode(batch.obs[:, 0])
    next_owner, next_t = decode(batch.next_obs[:, 0])
    np.testing.assert_array_equal(batch.action, owner * 100_000 + t)
    np.testing.assert_array_equal(next_owner, owner)
    np.testing.assert_array_equal(next_t, t + 1)
    np.testing.assert_array_equal(batch.reward, t.astype(np.float32))
    np.testing.assert_array_equal(np.sort(batch.action), np.sort(np.add.outer(np.arange(threads) * 100_000,
                                                                              np.arange(steps)).ravel()))


def test_a_thread_sampling_reading_and_flushing_while_another_adds_sees_whole_adds(tmp_path: Path) -> None:
    """Reads from one thread while another adds: every batch holds transitions as they were added (never
    half an add), and the reads' own counts never run ahead of what they can read."""
    steps = 2000
    store = ReplayStore.create(tmp_path / "store.mmr", frame_shape=SHAPE, capacity=300, stack_size=2, num_envs=2,
                               commit_interval_s=None)
    done = threading.Event()
    checked = [0]

    def adding() -> None:
        try:
            for t in range(steps):
                terminated = np.array([t % 50 == 49, t % 70 == 69])
                store.add(np.stack([frame(0, t), frame(1, t)]), np.full(2, t), np.zeros(2, np.float32),
                          np.stack([frame(0, t + 1), frame(1, t + 1)]), terminated, np.zeros(2, bool))
                if t % 300 == 0:
                    store.flush()
        finally:
            done.set()

    def reading() -> None:
        while not done.is_set():
            if len(store) == 0:
                continue
            for batch in (store.sample(16, rng=checked[0]), store.read(store.stored_steps[-8:])):
                owner, t = decode(batch.next_obs[:, -1])
                np.testing.assert_array_equal(owner, batch.env_index)
                np.testing.assert_array_equal(t, batch.action + 1)
                checked[0] += 1
            store.episodes()

    assert run_threads([adding, reading]) == []
    assert checked[0] > 0
    store.close()


def test_a_clear_from_another_thread_lands_between_adds(tmp_path: Path) -> None:
    """One thread adds while another clears: each add lands wholly before or after a clear (never into the
    old store's closed files), and what is stored after the last clear is a run of whole adds."""
    store = ReplayStore.create(tmp_path / "store.mmr", frame_shape=SHAPE, capacity=500, stack_size=1,
                               commit_interval_s=None)
    done = threading.Event()

    def adding() -> None:
        try:
            for t in range(1500):
                store.add(frame(0, t), t, 0.0, frame(0, t + 1), False, False)
        finally:
            done.set()

    def clearing() -> None:
        while not done.is_set():
            store.clear()

    assert run_threads([adding, clearing]) == []
    assert store.transitions_added == 1500
    batch = store.read(store.stored_steps)
    np.testing.assert_array_equal(decode(batch.obs[:, 0])[1], batch.action)
    np.testing.assert_array_equal(decode(batch.next_obs[:, 0])[1], batch.action + 1)
    store.close()


def test_a_close_from_another_thread_makes_later_calls_raise_closed(tmp_path: Path) -> None:
    """A thread sampling while another closes the store: each sample returns a whole batch or raises
    ClosedStoreError once the store is closed; no read touches the released files."""
    store = ReplayStore.create(tmp_path / "store.mmr", frame_shape=SHAPE, capacity=100, stack_size=2)
    for t in range(100):
        store.add(frame(0, t), t, 0.0, frame(0, t + 1), False, False)
    outcomes: list[str] = []
    started = threading.Event()

    def sampling() -> None:
        while True:
            try:
                batch = store.sample(32, rng=1)
            except ClosedStoreError:
                outcomes.append("closed")
                return
            np.testing.assert_array_equal(decode(batch.next_obs[:, -1])[1], batch.action + 1)
            started.set()

    def closing() -> None:
        started.wait(30)
        store.close()

    assert run_threads([sampling, closing]) == []
    assert outcomes == ["closed"]
