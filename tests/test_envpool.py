"""EnvPool's vector envs into a store: its reset-on-next-step autoreset with ``env_mask``, in the
synchronous ``step`` loop and the asynchronous ``recv``/``send`` loop.

EnvPool resets an env on the call after its episode ended: that call ignores the env's action and hands
back the reset observation with reward 0 and no ending, which is no transition. The recipe masks it out
(``env_mask=~resetting``). Each test records real Breakout (EnvPool's own ALE) through the recipe and,
from the same env outputs, a reference list of the transitions a user means to keep; the store must
give back exactly that list, in order, every stack bit for bit, and never a reset entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

envpool = pytest.importorskip("envpool", reason="EnvPool is not installed here: test.sh installs it (envpool==1.2.5)")

from mmreplay import ReplayStore  # noqa: E402

# Breakout with episodic_life: an episode ends at each lost life (terminated), and at 40 steps (truncated),
# so that both endings and their resets come within a few hundred steps. EnvPool's reset after a lost life
# continues the game (the reset observation is the final one shifted by a frame), after a game over or a
# time limit it starts anew: both kinds are masked alike.
GAME = dict(task_id="Breakout-v5", env_type="gymnasium", episodic_life=True, max_episode_steps=40)


def make_envs(num_envs: int, **kwargs: Any) -> Any:
    return envpool.make(num_envs=num_envs, seed=0, **GAME, **kwargs)


def assert_store_holds(store: ReplayStore, reference: list[dict[str, Any]]) -> None:
    """The store holds exactly ``reference``'s transitions, in order, every array bit for bit."""
    assert store.transitions_added == len(reference) == len(store)
    batch = store.read(np.arange(len(reference)))
    for name in ("obs", "action", "reward", "next_obs", "terminated", "truncated", "env_index"):
        want = np.array([transition[name] for transition in reference])
        got = getattr(batch, name)
        assert got.shape == want.shape, f"{name}: {got.shape} against {want.shape}"
        differ = np.flatnonzero((got != want).reshape(len(reference), -1).any(axis=1))
        assert not len(differ), f"{name} differs at {len(differ)} steps, first {differ[0]}: {reference[differ[0]]['note']}"


def assert_episodes_match(store: ReplayStore, reference: list[dict[str, Any]]) -> None:
    """The store's episodes are the reference's: each env's transitions up to each ending, the same steps,
    ended the same way (the last ones of each env still in progress)."""
    expected, current = [], {}  # (env, steps, ended_by); each env's episode so far
    for step, transition in enumerate(reference):
        steps = current.setdefault(transition["env_index"], [])
        steps.append(step)
        if transition["terminated"] or transition["truncated"]:
            ended = "terminated" if transition["terminated"] else "truncated"
            expected.append((transition["env_index"], steps, ended))
            del current[transition["env_index"]]
    expected += [(env, steps, "in progress") for env, steps in current.items()]
    listed = [(e.env_index, e.steps.tolist(), e.ended_by) for e in store.episodes()]
    assert sorted(listed) == sorted(expected)
    assert all(e.complete for e in store.episodes())


def test_the_step_loop_with_env_mask_stores_every_transition_and_no_reset_entry(tmp_path: Path) -> None:
    num_envs, steps = 3, 240
    envs = make_envs(num_envs)
    rng = np.random.default_rng(0)
    reference: list[dict[str, Any]] = []
    resets = 0
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(84, 84), capacity=10_000, num_envs=num_envs) as store:
        obs, _ = envs.reset()
        resetting = np.zeros(num_envs, bool)
        for t in range(steps):
            action = rng.integers(0, 4, num_envs)
            next_obs, reward, terminated, truncated, info = envs.step(action)
            store.add(obs, action, reward, next_obs, terminated, truncated, env_mask=~resetting)
            for env in range(num_envs):
                if resetting[env]:
                    # EnvPool's reset entry: no reward, no ending, and its elapsed steps did not advance
                    assert reward[env] == 0 and not terminated[env] and not truncated[env]
                    resets += 1
                    continue
                reference.append(dict(obs=obs[env].copy(), action=action[env], reward=reward[env], next_obs=next_obs[env].copy(),
                                      terminated=terminated[env], truncated=truncated[env], env_index=env,
                                      note=f"step call {t}, env {env}"))
            resetting = terminated | truncated
            obs = next_obs
        endings = sum(1 for transition in reference if transition["terminated"] or transition["truncated"])
        assert {True} <= {bool(tr["terminated"]) for tr in reference} and any(tr["truncated"] for tr in reference)
        assert resets == endings - int(resetting.sum())  # one reset entry after each ending, the last ones to come
        assert_store_holds(store, reference)
        assert_episodes_match(store, reference)
    envs.close()


def test_the_async_recv_send_loop_with_env_mask_stores_every_transition_and_no_reset_entry(tmp_path: Path) -> None:
    """``batch_size`` < ``num_envs``: each ``recv`` hands over some of the envs, in any order. A store with
    one lane per env takes all of them at every add; the envs not received are masked out too."""
    num_envs, batch_size, calls = 4, 2, 400
    envs = make_envs(num_envs, batch_size=batch_size)
    rng = np.random.default_rng(1)
    reference: list[dict[str, Any]] = []
    with ReplayStore.create(tmp_path / "s.mmr", frame_shape=(84, 84), capacity=10_000, num_envs=num_envs) as store:
        last_obs = np.zeros((num_envs, 4, 84, 84), np.uint8)
        last_action = np.zeros(num_envs, np.int64)
        started = np.zeros(num_envs, bool)  # the env's first recv (its reset observation) has come
        resetting = np.zeros(num_envs, bool)
        zeros = np.zeros(num_envs)
        envs.async_reset()
        for t in range(calls):
            obs, reward, terminated, truncated, info = envs.recv()
            env_id = info["env_id"]
            received = np.zeros(num_envs, bool)
            received[env_id] = True
            next_obs = last_obs.copy()
            next_obs[env_id] = obs
            full = [zeros.astype(np.float32), zeros.astype(bool), zeros.astype(bool)]
            full[0][env_id], full[1][env_id], full[2][env_id] = reward, terminated, truncated
            record = received & started & ~resetting
            store.add(last_obs, last_action, full[0], next_obs, full[1], full[2], env_mask=record)
            for env in np.flatnonzero(record):
                reference.append(dict(obs=last_obs[env].copy(), action=last_action[env], reward=full[0][env],
                                      next_obs=next_obs[env].copy(), terminated=full[1][env], truncated=full[2][env],
                                      env_index=int(env), note=f"recv {t}, env {env}"))
            resetting[env_id] = terminated | truncated
            started[env_id] = True
            last_obs[env_id] = obs
            action = rng.integers(0, 4, len(env_id))
            last_action[env_id] = action
            envs.send(action, env_id)
        assert any(tr["terminated"] for tr in reference) and any(tr["truncated"] for tr in reference)
        assert len({tr["env_index"] for tr in reference}) == num_envs
        assert_store_holds(store, reference)
        assert_episodes_match(store, reference)
    envs.close()
