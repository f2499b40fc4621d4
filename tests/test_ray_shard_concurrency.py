"""A shard serves draws beside adds (issue 45, item 4): ``add`` queues its send and the shard's write thread
writes it, so a draw waits for at most the one send being written, never for the sends queued behind it,
and no interleaving of the two threads ever yields a transition that was not added as it was added.

Most tests run ``ReplayShard`` in this process (the class is plain Python; Ray only wraps it), calling it
from one thread as Ray's actor thread would; one runs it as a Ray actor on a loopback cluster.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray_loopback import ray_on_loopback  # before ray

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'mmreplay[ray]' to run the Ray tests")

from mmreplay import decode_batch, encode_frames  # noqa: E402
from mmreplay.ray import RateLimit  # noqa: E402
from mmreplay.ray.shard import ReplayShard, Send, ShardConfig  # noqa: E402

FRAME = (4, 4)


@pytest.fixture
def tiny_switch_interval() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def config(*, capacity: int = 100_000, num_envs: int = 4, rate_limit: RateLimit | None = None,
           frame_encoding: str | None = "lz4") -> ShardConfig:
    return ShardConfig(frame_shape=FRAME, capacity=capacity, stack_size=1, num_envs=num_envs, action_shape=(),
                       action_dtype="int64", sampler=None, rate_limit=rate_limit, commit_interval_s=None,
                       frame_encoding=frame_encoding)


def frame(env: int, t: int) -> np.ndarray:
    """A frame that says which env made it and at which t."""
    value = np.zeros(FRAME, np.uint8)
    value[0, 0], value[0, 1], value[0, 2] = env, t % 256, t // 256
    return value


def owner(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ints = frames.astype(np.int64)
    return ints[..., 0, 0], ints[..., 0, 1] + 256 * ints[..., 0, 2]


def send(env: int, start: int, steps: int, *, key: str = "w") -> Send:
    """Steps ``start .. start + steps - 1`` of env ``env``'s one long episode: obs t, next_obs t + 1,
    action t % 5, reward t."""
    frames = encode_frames(np.stack([frame(env, start + i) for i in range(steps + 1)]))
    t = np.arange(start, start + steps)
    return Send(env_index=env, frames=frames, obs=np.arange(steps), action=t % 5, reward=t.astype(np.float32),
                next_obs=np.arange(1, steps + 1), terminated=np.zeros(steps, bool), truncated=np.zeros(steps, bool),
                key=key)


class GatedWrites:
    """Wraps a shard's ``store.add_encoded``: each write logs itself and waits until ``release`` lets it
    finish, so a test can hold the write thread inside a write."""

    def __init__(self, shard: ReplayShard, log: list[str]) -> None:
        self.started = threading.Semaphore(0)
        self.release = threading.Semaphore(0)
        self.log = log
        original = shard.store.add_encoded

        def gated(*args: Any, **kwargs: Any) -> None:
            log.append("write")
            self.started.release()
            assert self.release.acquire(timeout=30), "the test never let the write finish"
            original(*args, **kwargs)

        shard.store.add_encoded = gated  # type: ignore[method-assign]


def test_queued_adds_do_not_delay_a_draw_beyond_one_add(tmp_path: Path) -> None:
    """Five sends queued while the first is being written, then a draw: the draw is served after that one
    write and before the second (before, each add wrote its send in the call, so the draw came after all
    five)."""
    shard = ReplayShard(str(tmp_path), 0, config())
    assert shard.add(send(0, 0, 10)) == 0
    assert shard.queued() == 0  # written: the draw below has something to sample
    log: list[str] = []
    gate = GatedWrites(shard, log)
    for k in range(5):
        calls = threading.Thread(target=shard.add, args=(send(0, 10 + 10 * k, 10),), daemon=True)
        calls.start()
        calls.join(timeout=10)
        assert not calls.is_alive(), "add waited for the store: it should only queue its send"
    assert gate.started.acquire(timeout=10)  # the write thread is inside the first queued write
    drawn = threading.Thread(target=lambda: log.append(f"draw {len(shard.sample(4, 0, beta=0.4, n_step=1, gamma=0.99)[0])}"))
    drawn.start()
    time.sleep(0.05)  # the draw now waits for the lock the write holds
    gate.release.release()  # the first write may finish: the draw goes next
    drawn.join(timeout=10)
    assert not drawn.is_alive()
    for _ in range(4):
        gate.release.release()
    assert shard.queued() == 0
    assert log == ["write", "draw 4", "write", "write", "write", "write"]
    assert len(shard.store) == 60
    shard.close()


def test_a_draw_completes_while_queued_adds_are_still_being_written_by_a_ray_shard(tmp_path: Path) -> None:
    """Through Ray: five large sends, then a draw, from one caller. The draw's answer carries the shard's
    count at the draw: at most one of the five was written by then (two if the draw arrived between two
    writes), where the single-threaded shard of before wrote all five first."""
    with ray_on_loopback(namespace="mmreplay-concurrency-tests"):
        actor = ray.remote(ReplayShard).options(num_cpus=0).remote(
            str(tmp_path), 0, config(capacity=100_000, frame_encoding="lz4-reference"))
        assert ray.get(actor.add.remote(send(0, 0, 10))) == 0
        assert ray.get(actor.queued.remote()) == 0
        steps = 3000
        adds = [actor.add.remote(send(1, steps * k, steps)) for k in range(5)]
        batch, info = ray.get(actor.sample.remote(4, 0, beta=0.4, n_step=1, gamma=0.99))
        assert len(batch) == 4
        assert 10 <= info["transitions_added"] <= 10 + 2 * steps, info["transitions_added"]
        assert ray.get(adds) == [0] * 5
        assert ray.get(actor.queued.remote()) == 0
        assert ray.get(actor.info.remote())["transitions_added"] == 10 + 5 * steps
        ray.get(actor.close.remote())


def test_a_send_the_store_refuses_is_raised_by_its_writers_next_call_only(tmp_path: Path) -> None:
    shard = ReplayShard(str(tmp_path), 0, config())
    bad = send(0, 0, 5, key="a")
    bad = Send(bad.env_index, bad.frames, bad.obs, np.zeros((5, 2), np.int64), bad.reward, bad.next_obs,
               bad.terminated, bad.truncated, key="a")  # actions of shape (2,) for a store of scalar actions
    shard.add(bad)
    shard.add(send(1, 0, 5, key="b"))
    assert shard.flush("b") is True  # writer b's sends are written; a's error is not b's
    with pytest.raises(ValueError, match="action"):
        shard.waiting("a")
    assert shard.waiting("a") == 0  # raised once
    assert len(shard.store) == 5
    shard.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    calls=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(0, 2), st.integers(1, 40)),
            st.tuples(st.just("sample"), st.integers(1, 64), st.integers(0, 2**31)),
            st.tuples(st.just("flush"), st.just(0), st.just(0)),
        ),
        min_size=1, max_size=40,
    ),
    limited=st.booleans(),
)
def test_draws_beside_the_write_thread_only_ever_return_transitions_as_they_were_added(
    tmp_path_factory: pytest.TempPathFactory, tiny_switch_interval: None, calls: list[tuple[str, int, int]],
    limited: bool,
) -> None:
    """Adds, draws and flushes from the actor's thread while the write thread writes (threads switching
    every 10 us): every drawn transition is one that was sent, with its own action, reward and next obs,
    the shard never holds more than was sent, and after the last flush it holds everything sent (a rate
    limit holds sends back until draws make room: then it holds what the limit allowed, in order)."""
    limit = RateLimit(samples_per_insert=1.0, min_size_to_sample=1, error_buffer=64) if limited else None
    shard = ReplayShard(str(tmp_path_factory.mktemp("shard")), 0, config(rate_limit=limit))
    sent = [0, 0, 0]  # steps sent per env
    for call, a, b in calls:
        if call == "add":
            shard.add(send(a, sent[a], b))
            sent[a] += b
        elif call == "sample":
            batch, info = shard.sample(a, b, beta=0.4, n_step=1, gamma=0.99)
            assert info["len"] <= sum(sent)
            if batch is None:
                assert len(shard.store) == 0 or limited
                continue
            decoded = decode_batch(batch)
            env, t = owner(decoded.obs.reshape(-1, *FRAME))
            next_env, next_t = owner(decoded.next_obs.reshape(-1, *FRAME))
            assert np.all(t < np.array(sent)[env]), "a drawn step was never sent"
            np.testing.assert_array_equal(next_env, env)
            np.testing.assert_array_equal(next_t, t + 1)
            np.testing.assert_array_equal(decoded.action, t % 5)
            np.testing.assert_array_equal(decoded.reward, t.astype(np.float32))
        else:
            shard.flush()
    done = shard.flush()
    if not limited:
        assert done and len(shard.store) == sum(sent)
    else:
        assert len(shard.store) == shard.inserts <= sum(sent)
        assert done == (shard.inserts == sum(sent))
    shard.close()
