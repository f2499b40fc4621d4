"""The reference model's windows: n-step returns and sequence windows read off the plain episode lists of
``reference.ReferenceStore``, the chi-square tolerances sampled distributions are checked against, and a
sampler that fails on purpose.

A window of an episode is found by walking the reference's per-env list of episodes: it is the
transitions from the sampled one to the end of its episode (a flag, a cut without a flag or the env's
newest transition), cut to ``length``. No links, slots or masks are involved.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from reference import RefTransition, ReferenceStore, bits

from mmreplay import UniformSampler


def episode_tail(ref: ReferenceStore, step: int, length: int) -> list[RefTransition]:
    """Up to ``length`` transitions of ``step``'s episode, starting at ``step``."""
    item = ref.transition(step)
    for episode in ref.episodes[item.env_index]:
        steps = [t.step for t in episode]
        if step in steps:
            position = steps.index(step)
            return episode[position : position + length]
    raise AssertionError(f"step {step} is in no episode of env {item.env_index}")


def expected_n_step(ref: ReferenceStore, steps: np.ndarray, n_step: int, gamma: float) -> dict[str, np.ndarray]:
    """The fields ``sample(..., n_step=n_step, gamma=gamma)`` must return for these sampled steps."""
    rows = []
    for step in np.asarray(steps).tolist():
        window = episode_tail(ref, step, n_step)
        reward = sum(float(t.reward) * gamma**k for k, t in enumerate(window))
        last = window[-1]
        rows.append((window[0], reward, last, len(window)))
    n = len(rows)
    return {
        "obs": np.array([first.obs for first, _, _, _ in rows], ref.frame_dtype).reshape(n, ref.stack_size, *ref.frame_shape),
        "action": np.array([first.action for first, _, _, _ in rows], ref.action_dtype).reshape(n, *ref.action_shape),
        "reward": np.array([r for _, r, _, _ in rows], np.float64),
        "reward_scale": np.array(
            [sum(abs(float(t.reward)) * gamma**k for k, t in enumerate(episode_tail(ref, int(first.step), n_step)))
             for first, _, _, _ in rows], np.float64),
        "next_obs": np.array([last.next_obs for _, _, last, _ in rows], ref.frame_dtype).reshape(
            n, ref.stack_size, *ref.frame_shape
        ),
        "terminated": np.array([last.terminated for _, _, last, _ in rows], bool),
        "truncated": np.array([last.truncated for _, _, last, _ in rows], bool),
        "index": np.array([first.step for first, _, _, _ in rows], np.int64),
        "env_index": np.array([first.env_index for first, _, _, _ in rows], np.int64),
        "discount": np.array([0.0 if last.terminated else gamma**m for _, _, last, m in rows], np.float64),
        "used": np.array([m for _, _, _, m in rows], np.int64),
    }


def assert_n_step_matches(batch: Any, ref: ReferenceStore, n_step: int, gamma: float) -> None:
    """Every row of an n-step batch equals the reference's window for its sampled step."""
    stored = set(ref.stored_steps().tolist())
    outside = sorted(set(batch.index.tolist()) - stored)
    assert not outside, f"batch.index holds steps {outside} that are not stored"
    want = expected_n_step(ref, batch.index, n_step, gamma)
    for name in ("obs", "action", "next_obs", "terminated", "truncated", "index", "env_index"):
        got = getattr(batch, name)
        assert got.dtype == want[name].dtype, f"batch.{name} has dtype {got.dtype}; expected {want[name].dtype}"
        np.testing.assert_array_equal(bits(got), bits(want[name]), err_msg=f"batch.{name} (steps {batch.index.tolist()})")
    assert batch.reward.dtype == np.float32 and batch.discount.dtype == np.float32
    # Rounding: each term is exact in float64; allow a few float32 ulps of the sum of the terms' sizes.
    got, expected, scale = batch.reward.astype(np.float64), want["reward"], want["reward_scale"]
    finite = np.isfinite(expected.astype(np.float32))
    bad = finite & ~(np.abs(got - expected) <= 4 * np.finfo(np.float32).eps * scale + 1e-30)
    bad |= ~finite & (got != expected.astype(np.float32))
    assert not bad.any(), (
        f"n-step reward differs at rows {np.flatnonzero(bad).tolist()}: got {got[bad].tolist()}, "
        f"expected {expected[bad].tolist()} (windows of {want['used'][bad].tolist()} steps)"
    )
    np.testing.assert_allclose(batch.discount, want["discount"], rtol=1e-6,
                               err_msg=f"discount (windows of {want['used'].tolist()} steps)")


def expected_sequences(ref: ReferenceStore, starts: np.ndarray, length: int) -> dict[str, np.ndarray]:
    """The fields ``sample_sequences(..., length)`` must return for windows starting at ``starts``."""
    b = len(starts)
    stack = (ref.stack_size, *ref.frame_shape)
    out = {
        "obs": np.zeros((b, length, *stack), ref.frame_dtype),
        "next_obs": np.zeros((b, length, *stack), ref.frame_dtype),
        "action": np.zeros((b, length, *ref.action_shape), ref.action_dtype),
        "reward": np.zeros((b, length), np.float32),
        "terminated": np.zeros((b, length), bool),
        "truncated": np.zeros((b, length), bool),
        "mask": np.zeros((b, length), bool),
        "index": np.full((b, length), -1, np.int64),
        "env_index": np.zeros(b, np.int64),
    }
    for i, start in enumerate(np.asarray(starts).tolist()):
        window = episode_tail(ref, start, length)
        out["env_index"][i] = window[0].env_index
        for k, t in enumerate(window):
            out["obs"][i, k] = t.obs
            out["next_obs"][i, k] = t.next_obs
            out["action"][i, k] = t.action
            out["reward"][i, k] = t.reward
            out["terminated"][i, k] = t.terminated
            out["truncated"][i, k] = t.truncated
            out["mask"][i, k] = True
            out["index"][i, k] = t.step
    return out


SEQUENCE_FIELDS = ("obs", "next_obs", "action", "reward", "terminated", "truncated", "mask", "index", "env_index")


def assert_sequences_match(batch: Any, ref: ReferenceStore, length: int) -> None:
    """Every window equals the reference's episode tail from its first step, zero-filled past its end."""
    starts = batch.index[:, 0]
    stored = set(ref.stored_steps().tolist())
    outside = sorted(set(starts.tolist()) - stored)
    assert not outside, f"windows start at steps {outside} that are not stored"
    want = expected_sequences(ref, starts, length)
    for name in SEQUENCE_FIELDS:
        got = getattr(batch, name)
        assert got.dtype == want[name].dtype, f"batch.{name} has dtype {got.dtype}; expected {want[name].dtype}"
        assert got.shape == want[name].shape, f"batch.{name} has shape {got.shape}; expected {want[name].shape}"
        np.testing.assert_array_equal(bits(got), bits(want[name]), err_msg=f"batch.{name} (windows from {starts.tolist()})")


def add_masked(ref: ReferenceStore, args: tuple[Any, ...], env_mask: np.ndarray) -> list[int]:
    """``ref.add`` for a vector add with ``env_mask``: only the envs marked True record a transition."""
    obs, action, reward, next_obs, terminated, truncated = args
    steps = []
    for env in np.flatnonzero(env_mask).tolist():
        steps.append(
            ref._add_one(
                env,
                np.asarray(obs[env], ref.frame_dtype),
                np.asarray(action[env]),
                reward[env],
                np.asarray(next_obs[env], ref.frame_dtype),
                bool(terminated[env]),
                bool(truncated[env]),
            )
        )
    return steps


# -- distributions ---------------------------------------------------------------------------------


def chi_square_bound(df: int, z: float = 5.0) -> float:
    """An upper quantile of the chi-square distribution with ``df`` degrees of freedom, by the
    Wilson-Hilferty normal approximation: z = 5 leaves about 3e-7 above it (a fixed seed makes the test
    deterministic; the bound says how far from the expected counts a correct sampler could land)."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


def chi_square(counts: np.ndarray, probabilities: np.ndarray) -> float:
    """Pearson's statistic of observed ``counts`` against ``probabilities`` (all > 0)."""
    expected = counts.sum() * np.asarray(probabilities, np.float64)
    return float(((counts - expected) ** 2 / expected).sum())


def assert_distribution(draws: np.ndarray, support: np.ndarray, probabilities: np.ndarray) -> None:
    """``draws`` fall in ``support`` only, with frequencies consistent with ``probabilities``."""
    support = np.asarray(support)
    outside = sorted(set(np.asarray(draws).tolist()) - set(support.tolist()))
    assert not outside, f"drew {outside[:10]}, outside the support {support.min()}..{support.max()}"
    counts = np.array([(draws == s).sum() for s in support], np.float64)
    expected = len(draws) * np.asarray(probabilities, np.float64)
    assert expected.min() >= 5, "too few draws for a chi-square test; draw more"
    statistic = chi_square(counts, probabilities)
    bound = chi_square_bound(len(support) - 1)
    assert statistic < bound, (
        f"chi-square {statistic:.1f} >= {bound:.1f} ({len(support) - 1} degrees of freedom, {len(draws)} draws);\n"
        f"counts   {counts.astype(int).tolist()}\nexpected {np.round(expected, 1).tolist()}"
    )


class FailingSampler(UniformSampler):
    """A uniform sampler whose ``fail_at``-th draw (1-based) raises ``RuntimeError``: a fault injected
    through the public sampler protocol."""

    def __init__(self, fail_at: int) -> None:
        self.fail_at = fail_at
        self.calls = 0

    def sample(self, batch_size: int, *, stored: range, rng: np.random.Generator) -> np.ndarray:
        self.calls += 1
        if self.calls >= self.fail_at:
            raise RuntimeError(f"injected failure in draw {self.calls}")
        return super().sample(batch_size, stored=stored, rng=rng)


def continues_after_eviction(ref: ReferenceStore, args: tuple[Any, ...], env_mask: np.ndarray) -> np.ndarray:
    """Per env: the add continues the env's episode although the env's previous transition was evicted
    (by other envs' adds). The store starts a new episode there instead (a known bug, see
    ``test_n_step.py``); random tests leave such envs out of the add so that they test the rest."""
    oldest = max(0, ref.transitions_added - ref.capacity)
    hit = np.zeros(ref.num_envs, bool)
    for env in np.flatnonzero(env_mask).tolist():
        last = ref.last_transition(env)
        obs = np.asarray(args[0][env], ref.frame_dtype)
        if last is not None and last.step < oldest and not ref._starts_episode(env, obs):
            hit[env] = True
    return hit
