"""The store's reads, each run as one read by the store's collaborator (``Role.consistent``: a follower
that the writer overtook refreshes and reads again): ``sample`` and ``sample_sequences`` (a draw by the
store's sampler, then a reader's batch), ``read`` (given steps) and ``episodes`` (the list).

Each checks its arguments, then reads everything under the files' lock, so a prefetching thread and the
caller's adds never interleave within one read.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mmreplay.batch import Batch, SequenceBatch
from mmreplay.rows.episode_windows import follow_episodes
from mmreplay.store.reading.episode_list import EpisodeList, split_episodes
from mmreplay.store.reading.mapped_files import MappedFiles
from mmreplay.store.reading.transition_reader import SharedOutError, TransitionReader
from mmreplay.store.role import Role
from mmreplay.store.reading.stored_steps import check_stored, stored_steps
from mmreplay.validation import (
    check_out,
    parse_number,
    parse_positive_int,
    parse_rng,
    parse_steps,
)


def draw_steps(
    files: MappedFiles, transitions_added: int, batch_size: int, rng: np.random.Generator, first_step: int = 0
) -> npt.NDArray[np.int64]:
    """``batch_size`` stored steps, drawn by the store's sampler (``first_step``: the epoch's first)."""
    stored = stored_steps(transitions_added, files.layout.capacity, first_step)
    if not stored:
        raise ValueError("cannot sample from an empty store: add transitions first")
    return files.sampler.sample(batch_size, stored=stored, rng=rng)


def draw_batches(
    files: MappedFiles, role: Role, batch_size: int, count: int, generator: np.random.Generator, beta: float
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """``count`` batches' steps and weights, each batch drawn and weighed as ``sample`` draws and weighs
    it, in order, back to back (one batch: exactly ``sample``'s)."""
    first = role.committed.first_step
    if count == 1:
        steps = draw_steps(files, role.transitions_added, batch_size, generator, first)
        return steps, files.sampler.weights(steps, beta=beta)
    parts = [draw_steps(files, role.transitions_added, batch_size, generator, first) for _ in range(count)]
    weights = [files.sampler.weights(part, beta=beta) for part in parts]
    return np.concatenate(parts), np.concatenate(weights)


def sample_transitions(
    role: Role,
    reader: TransitionReader,
    batch_size: int,
    rng: np.random.Generator | int | None,
    *,
    beta: float,
    n_step: int,
    gamma: float,
    out: Batch | None,
    replace_shared_out: bool,
    count: int = 1,
) -> Batch:
    """``ReplayStore.sample`` of an open store, read by ``reader``; with ``replace_shared_out``, a batch
    that ``out`` cannot hold (``SharedOutError``) comes back in new arrays, obs and next_obs separate,
    rather than raising (``batches(reuse=True)``, which then refills that batch). ``count``: that many
    batches drawn in order, as that many calls would draw them, read as one batch of ``count *
    batch_size`` rows (``batches(device=...)``' groups: one read's Python for several batches)."""
    if out is not None:
        check_out(out, Batch)
    # What a training loop passes at every call (Python ints and floats in range) is taken as it
    # stands: the parse_* calls cost ~0.6 us, a twentieth of sampling a batch of small frames. Any
    # other value goes through them, accepted or refused as always.
    if type(batch_size) is not int or batch_size < 1:
        batch_size = parse_positive_int(batch_size, "batch_size")
    if type(n_step) is not int or n_step < 1:
        n_step = parse_positive_int(n_step, "n_step")
    if type(beta) is not float or not 0.0 <= beta:  # parse_number takes inf too, and refuses nan
        beta = parse_number(beta, "beta", low=0.0)
    if type(gamma) is not float or not 0.0 <= gamma <= 1.0:
        gamma = parse_number(gamma, "gamma", low=0.0, high=1.0)
    generator = rng if type(rng) is np.random.Generator else parse_rng(rng)
    files = role.files

    def draw_and_read() -> Batch:
        with files.lock:
            steps, weight = draw_batches(files, role, batch_size, count, generator, beta)
            reader.prefetch(steps)
            if n_step == 1:
                discount = np.empty(len(steps), np.float32)
                discount.fill(gamma)  # np.full costs twice as much for a batch
                try:
                    return reader.transitions(steps, weight=weight, discount=discount, out=out)
                except SharedOutError:
                    if not replace_shared_out:
                        raise
                    return reader.transitions(steps, weight=weight, discount=discount)
            return reader.n_step(
                steps, n_step=n_step, gamma=gamma, weight=weight, newest_exclusive=role.transitions_added, out=out
            )

    return role.consistent(draw_and_read)


def sample_sequences(
    role: Role,
    reader: TransitionReader,
    batch_size: int,
    length: int,
    rng: np.random.Generator | int | None,
    *,
    beta: float,
    out: SequenceBatch | None,
    count: int = 1,
) -> SequenceBatch:
    """``ReplayStore.sample_sequences`` of an open store, read by ``reader``: windows of ``length``
    transitions from each drawn step, along its episode. ``count``: as ``sample_transitions``'."""
    check_out(out, SequenceBatch)
    batch_size = parse_positive_int(batch_size, "batch_size")
    length = parse_positive_int(length, "length")
    beta = parse_number(beta, "beta", low=0.0)
    generator = parse_rng(rng)
    files = role.files

    def draw_and_read() -> SequenceBatch:
        with files.lock:
            steps, weight = draw_batches(files, role, batch_size, count, generator, beta)
            window, mask = follow_episodes(
                steps,
                length,
                rows_of=files.table.read,
                newest_exclusive=role.transitions_added,
                stacks=files.frames.stacks,
                stack_size=files.layout.stack_size,
                table_path=files.table.path,
            )
            return reader.sequences(window, mask, weight, out)

    return role.consistent(draw_and_read)


def read_steps(role: Role, reader: TransitionReader, steps: npt.ArrayLike) -> Batch:
    """``ReplayStore.read`` of an open store: the stored transitions with these steps, in this order."""
    array = parse_steps(steps, "steps")
    ones = np.ones(len(array), np.float32)
    files = role.files

    def check_and_read() -> Batch:
        with files.lock:
            first = role.committed.first_step
            check_stored(array, stored_steps(role.transitions_added, files.layout.capacity, first), first)
            return reader.transitions(array, weight=ones, discount=ones.copy())

    return role.consistent(check_and_read)


def list_episodes(role: Role) -> EpisodeList:
    """``ReplayStore.episodes`` of an open store."""
    files = role.files

    def split() -> EpisodeList:
        with files.lock:
            stored = stored_steps(role.transitions_added, files.layout.capacity, role.committed.first_step)
            columns = files.table.columns(stored.start, stored.stop, ("env", "flags", "reward"))
            return split_episodes(
                np.arange(stored.start, stored.stop, dtype=np.int64),
                columns["env"],
                columns["flags"],
                columns["reward"],
                open_envs=role.open_envs(),
            )

    return role.consistent(split)
