"""The setups and checks of the JAX and EnvPool guide's examples (``docs/guide/jax.md``), which
``tests/test_readme.py`` runs with the manual's other examples: real Pong transitions and envs, a small
jitted update standing in for the reader's network, real EnvPool Breakout."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest


def _update() -> Callable[..., Any]:
    """A jitted update of the reader's kind: a linear Q over mean pixels, its TD error for the batch."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def update(params: Any, opt_state: Any, batch: Any) -> tuple[Any, Any, Any]:
        def q(obs: Any) -> Any:
            return params * obs.reshape(obs.shape[0], -1).mean(axis=1) / 255

        td_error = batch.reward + batch.discount * q(batch.next_obs) - q(batch.obs)
        return params - 0.01 * td_error.mean(), opt_state + 1, td_error

    return update


def setup_jax_batches(namespace: dict[str, Any]) -> None:
    pytest.importorskip("jax", reason="jax is not installed here: test.sh installs the jax extra")
    import jax.numpy as jnp
    from test_readme import pong_transitions

    from mmreplay import PrioritizedSampler, ReplayStore

    store = ReplayStore.create("pong.mmr", frame_shape=(84, 84), capacity=1000, sampler=PrioritizedSampler())
    for transition in pong_transitions(200, episode_steps=50):
        store.add(*transition)
    namespace.update(store=store, update=_update(), params=jnp.float32(1.0), opt_state=jnp.int32(0))


def check_jax_batches(namespace: dict[str, Any]) -> None:
    import jax

    batch = namespace["batch"]
    assert batch.obs.shape == (32, 4, 84, 84) and batch.obs.devices() == {jax.devices("cpu")[0]}
    assert int(namespace["opt_state"]) == 20 and batch.index.dtype == np.int64


def setup_jax_flashbax_loop(namespace: dict[str, Any]) -> None:
    pytest.importorskip("jax", reason="jax is not installed here: test.sh installs the jax extra")
    import gymnasium
    import jax
    import jax.numpy as jnp
    from test_readme import make_pong

    env = make_pong(max_episode_steps=9)()

    def policy(params: Any, obs: Any, key: Any) -> int:
        return int(jax.random.randint(key, (), 0, 6))

    namespace.update(env=env, policy=policy, update=_update(), params=jnp.float32(1.0), opt_state=jnp.int32(0),
                     total_steps=40, learning_starts=10, gymnasium=gymnasium)


def check_jax_flashbax_loop(namespace: dict[str, Any]) -> None:
    store = namespace["store"]
    assert store.transitions_added == 40 and int(namespace["opt_state"]) == 31
    assert [e.ended_by for e in store.episodes()].count("truncated") == 4  # 9-step episodes
    namespace["env"].close()


def _envpool_setup(namespace: dict[str, Any]) -> None:
    envpool = pytest.importorskip("envpool", reason="EnvPool is not installed here: test.sh installs it")
    from test_readme import Countdown

    rng = np.random.default_rng(0)
    namespace.update(envpool=envpool, path="envpool.mmr", training=Countdown(120),  # the async loop follows the first
                     policy=lambda obs: rng.integers(0, 4, len(obs)))


def check_envpool(namespace: dict[str, Any]) -> None:
    store = namespace["store"]
    assert 0 < store.transitions_added <= 8 * 120
    batch = store.read(store.stored_steps)
    assert batch.obs.shape[1:] == (4, 84, 84)
    namespace["envs"].close()


JAX_EXAMPLES: dict[str, tuple[Callable[[dict[str, Any]], None], Callable[[dict[str, Any]], None]]] = {
    "jax-batches": (setup_jax_batches, check_jax_batches),
    "jax-flashbax-loop": (setup_jax_flashbax_loop, check_jax_flashbax_loop),
    "envpool-step": (_envpool_setup, check_envpool),
    "envpool-async": (_envpool_setup, check_envpool),
}
# The examples' sizes, cut for a test (``test_readme.SMALL_SIZES``).
JAX_SMALL_SIZES = {"jax-batches": [("range(1000)", "range(20)")]}
