"""``ShardedReplay``: one replay spread over shard actors, sampled exactly as one store would be.

Vocabulary: a *shard* is one store and the Ray actor that is its only writer; a *global id* names a
sampled transition across shards and restarts: ``shard << 48 | epoch << 40 | step`` (16, 8 and 40 bits;
``Batch.index`` of a sharded batch holds them). The learner-side client draws a batch as follows:

1. Each shard's *mass*: its length (uniform) or the sum of its priority leaves (prioritized).
2. ``counts ~ Multinomial(batch_size, mass_k / total)``; shard k draws ``counts[k]`` by its own sampler,
   so each transition is drawn with probability 1/N (uniform) or p_i / sum p (prioritized) over the union,
   unlike one random shard per batch (Ape-X), which oversamples small shards.
3. A prioritized shard normalises weights by its own smallest leaf; the client rescales them to the global
   one: ``w = w_k * (min_k / min)^-beta``, which is ``(p_i / p_min)^-beta`` over the union.

Shards send their frames encoded (``ReplayStore.sample_encoded``) and the client decodes them in the
learner. A draw can pass by the shard actors (``direct_read=True``): each
shard's last commit is read by a ``ShardReader`` (its store opened read-only), in the learner's process
for a shard on its node and in a reader actor on the shard's node for any other, so the draw never waits
behind a shard's adds.
A shard that does not answer (its actor or node lost) is left out of the draw until it answers again.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import ray

from mmreplay import Batch, EncodedBatch, PrioritizedSampler, SequenceBatch, UniformSampler
from mmreplay.ray.assembly import SHARD_BITS, split_ids
from mmreplay.ray.draws import Draws
from mmreplay.ray.prefetch_streams import KeptStream, sequence_stream, transition_stream, waited_parts
from mmreplay.ray.rate_limit import RateLimit
from mmreplay.ray.shard import ShardConfig
from mmreplay.ray.shard_actors import shard_name, start_actors
from mmreplay.ray.shard_states import LOST, ShardStates
from mmreplay.ray.writer import ShardWriter
from mmreplay.sampling.samplers import limited_sampler
from mmreplay.validation import (
    parse_decode_threads, parse_field_specs, parse_non_negative_int, parse_number, parse_positive_int, parse_priorities,
    parse_rng, parse_steps,
)

_LOST = LOST
FRAME_ENCODINGS = ("lz4", "lz4-reference")  # ReplayStore.create's, checked before any shard starts


class ShardedReplay:
    """A replay over ``num_shards`` shard actors; ``create`` it once, ``connect`` to it from anywhere.

    A *shard* is one store and the Ray actor that is its only writer; a *global id* names a sampled
    transition across shards and restarts (``split_ids``). Batches are drawn over the union of the
    shards as one store would draw them.

    Args:
        name: the replay's name, under which ``connect`` finds it.
        description: the replay's layout as ``create`` recorded it.
        shards: the shard actors' handles.
        decode_threads: this process's cap on the threads a batch decodes on (None: the cores it may use).
    """

    def __init__(
        self, name: str, description: dict[str, Any], shards: list[Any], *, decode_threads: int | None = None
    ) -> None:
        self.name = name
        # This process's cap on the threads a batch decodes on (the shards' own stores decode nothing:
        # they send blocks), for the batches it assembles and the stores it reads directly.
        self.decode_threads = parse_decode_threads(decode_threads)
        self._description = description
        self._shards = shards
        self._states = ShardStates(len(shards))
        self._infos = self._states.infos  # each shard's newest reported state (the same list)
        self._draws = Draws(shards, self._states, stack_size=description["stack_size"],
                            rate_limited=description["rate_limited"], decode_threads=self.decode_threads)
        self._ahead = KeptStream()  # sample(prefetch=)'s
        self._closed = False

    # -- setup ---------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        name: str,
        root: str,
        *,
        num_shards: int,
        frame_shape: tuple[int, ...],
        capacity: int,
        stack_size: int = 4,
        sampler: UniformSampler | PrioritizedSampler | None = None,
        placement: str | list[str] = "spread",
        envs_per_shard: int = 256,
        action_shape: tuple[int, ...] = (),
        action_dtype: str = "int64",
        rate_limit: RateLimit | None = None,
        max_restarts: int = -1,
        namespace: str | None = None,
        detached: bool = True,
        commit_interval_s: float | None = 5.0,
        decode_threads: int | None = None,
        frame_encoding: str | None = None,
        fields: dict[str, tuple[tuple[int, ...], npt.DTypeLike]] | None = None,
        max_times_sampled: int | None = None,
    ) -> ShardedReplay:
        """Start ``num_shards`` shard actors, each owning ``<root>/shard-<k>`` on its node's disk.

        A shard's store that exists is reopened at its last commit.

        Args:
            name: the replay's name, under which ``connect`` finds it.
            root: the directory of the shards' stores, on each shard's node.
            num_shards: how many shard actors.
            frame_shape: one frame's shape, as in ``ReplayStore.create``.
            capacity: the total over all shards, at least ``envs_per_shard`` per shard.
            stack_size: frames per obs.
            sampler: each shard's store's sampler (None: uniform).
            placement: ``"spread"`` (over the cluster's nodes), ``"local"`` (this node: the learner's, for
                ``direct_read``), or a list of Ray node ids, one per shard.
            envs_per_shard: each shard's store's envs, shared out to the writers.
            action_shape: one action's shape.
            action_dtype: the actions' dtype.
            rate_limit: Reverb's rate limit over inserts and samples, shared out to the shards (None:
                none).
            max_restarts: how often Ray restarts a dead shard (-1: always).
            namespace: the Ray namespace of the actors (None: the creating job's).
            detached: the actors outlive the process that created them (``close(destroy=True)`` ends
                them).
            commit_interval_s: each shard's store's, as in ``ReplayStore.open``.
            decode_threads: this process's cap on the threads a sampled batch decodes on (None: the cores
                it may use), as ``ReplayStore.open``'s.
            frame_encoding: each shard's store's, as in ``ReplayStore.create`` (None: its default);
                ``"lz4-reference"`` batches travel with the frames their blocks are compressed against.
            fields: user fields kept with each transition, as in ``ReplayStore.create``: name -> (shape,
                dtype); the writers' ``add(..., fields=)`` takes them and the batches carry them
                (``batch.fields``).
            max_times_sampled: each shard's store's, as in ``ReplayStore.create``: a transition drawn
                that many times leaves the sampling set (None or 0: no limit); a shard reports what it
                has left to draw, so the draw over the shards stays exact over the remaining transitions.

        Returns:
            The replay's client in this process.

        Raises:
            TypeError: a number is not an int.
            ValueError: a number is out of range, ``capacity`` is below ``envs_per_shard`` per shard,
                ``placement`` is not one of its forms, ``frame_encoding`` is not one of its choices, or a
                field's name or shape is not allowed (as ``ReplayStore.create`` says).
        """
        if frame_encoding is not None and frame_encoding not in FRAME_ENCODINGS:
            raise ValueError(f"frame_encoding is {frame_encoding!r}; expected None or one of {FRAME_ENCODINGS}")
        decode_threads = parse_decode_threads(decode_threads)
        field_specs = parse_field_specs(fields)
        num_shards = parse_positive_int(num_shards, "num_shards")
        capacity = parse_positive_int(capacity, "capacity")
        if capacity < num_shards:
            raise ValueError(f"capacity must be >= num_shards ({num_shards}); got {capacity}")
        envs_per_shard = parse_positive_int(envs_per_shard, "envs_per_shard")
        if capacity // num_shards < envs_per_shard:
            raise ValueError(
                f"capacity is {capacity}: {capacity // num_shards} per shard, fewer than envs_per_shard "
                f"({envs_per_shard}); expected at least {envs_per_shard * num_shards}, or a smaller envs_per_shard"
            )
        if num_shards >= 1 << SHARD_BITS:
            raise ValueError(f"num_shards must be < {1 << SHARD_BITS}; got {num_shards}")
        if isinstance(placement, str) and placement not in ("spread", "local"):
            raise ValueError(f"placement is {placement!r}; expected 'spread', 'local' or a list of node ids")
        if not isinstance(placement, str) and len(placement) != num_shards:
            raise ValueError(f"placement lists {len(placement)} node ids; expected {num_shards}, one per shard")
        limited = limited_sampler(sampler, max_times_sampled)
        sampler_config = None if limited is None else limited.config()
        namespace = namespace or ray.get_runtime_context().namespace
        description = {
            "root": str(root), "num_shards": num_shards, "frame_shape": tuple(frame_shape), "stack_size": stack_size,
            "namespace": namespace, "rate_limited": rate_limit is not None,
            "prioritized": isinstance(sampler, PrioritizedSampler), "fields": field_specs,
        }
        configs = [
            ShardConfig(
                frame_shape=tuple(frame_shape), capacity=capacity // num_shards + (k < capacity % num_shards),
                stack_size=stack_size, num_envs=envs_per_shard, action_shape=tuple(action_shape),
                action_dtype=action_dtype, sampler=sampler_config,
                rate_limit=None if rate_limit is None else rate_limit.for_shard(num_shards),
                commit_interval_s=commit_interval_s, frame_encoding=frame_encoding, fields=field_specs,
            )
            for k in range(num_shards)
        ]
        shards = start_actors(name, str(root), configs, description, placement=placement, namespace=namespace,
                              detached=detached, max_restarts=max_restarts)
        replay = cls(name, description, shards, decode_threads=decode_threads)
        replay.refresh()
        return replay

    @classmethod
    def connect(cls, name: str, *, namespace: str | None = None, decode_threads: int | None = None) -> ShardedReplay:
        """The replay that ``create`` started under ``name``, from any process of the Ray cluster.

        Args:
            name: the replay's name.
            namespace: the one it was created in (None: this job's).
            decode_threads: as ``create``'s.

        Returns:
            A client of the replay.
        """
        namespace = namespace or ray.get_runtime_context().namespace
        directory = ray.get_actor(name, namespace=namespace)
        description: dict[str, Any] = ray.get(directory.get.remote())  # type: ignore[assignment]
        shards = [ray.get_actor(shard_name(name, k), namespace=namespace) for k in range(description["num_shards"])]
        replay = cls(name, description, shards, decode_threads=decode_threads)
        replay.refresh()
        return replay

    @property
    def num_shards(self) -> int:
        """The number of shards.

        Returns:
            The shard count.
        """
        return len(self._shards)

    def shard(self, k: int) -> Any:
        """Shard k's actor handle, to kill it in a test or call it directly.

        Args:
            k: the shard's index.

        Returns:
            The Ray actor handle.
        """
        return self._shards[k]

    # -- writing -------------------------------------------------------------------------------

    def writer(
        self, key: str | int, *, num_envs: int = 1, steps_per_send: int = 32, max_in_flight: int = 4,
        shard: int | None = None, reconnect_timeout_s: float = 60.0,
    ) -> ShardWriter:
        """A writer for the acting process ``key``: always the same shard and the same envs of its store.

        When its shard restarts, the writer waits up to ``reconnect_timeout_s`` for it and carries on
        (``ShardWriter``).

        Args:
            key: the acting process's name.
            num_envs: the envs it writes.
            steps_per_send: steps buffered per env before they are sent.
            max_in_flight: sends not yet acknowledged before ``add`` waits.
            shard: the shard to write to (None: the key's CRC-32 modulo the number of shards).
            reconnect_timeout_s: the longest wait for a restarted shard before ``add`` raises.

        Returns:
            The writer.

        Raises:
            TypeError: a number is not an int.
            ValueError: a number is below 1, or ``shard`` is out of range.
        """
        num_envs = parse_positive_int(num_envs, "num_envs")
        reconnect_timeout_s = parse_number(reconnect_timeout_s, "reconnect_timeout_s", low=0.0)
        shard_index = zlib.crc32(str(key).encode()) % self.num_shards if shard is None else shard
        if not 0 <= shard_index < self.num_shards:
            raise ValueError(f"shard is {shard}; expected 0 <= shard < {self.num_shards}")
        actor = self._shards[shard_index]
        first_env = ray.get(actor.register.remote(str(key), num_envs))
        return ShardWriter(
            actor, key=str(key), shard_index=shard_index, first_env=first_env, num_envs=num_envs,
            stack_size=self._description["stack_size"], frame_shape=tuple(self._description["frame_shape"]),
            steps_per_send=parse_positive_int(steps_per_send, "steps_per_send"),
            max_in_flight=parse_positive_int(max_in_flight, "max_in_flight"),
            prioritized=self._description.get("prioritized"), reconnect_timeout_s=reconnect_timeout_s,
            fields=tuple(self._description.get("fields", ())),
        )

    # -- sampling ------------------------------------------------------------------------------

    def refresh(self) -> list[dict[str, Any] | None]:
        """Ask every shard for its state now, and wait (None for one that does not answer within 30 s).

        ``sample`` and ``batches`` draw from the states the shards' previous answers carried, with no call
        of their own to learn them; call this first for a draw from the state at this moment.

        Returns:
            One dict per shard, None for one that does not answer.

        Raises:
            Exception: the error of a priority update sent earlier, as ``update_priorities`` says (this
                waits for their answers first).
        """
        return self._draws.refresh()

    def sample(
        self,
        batch_size: int,
        rng: np.random.Generator | int | None = None,
        beta: float | None = None,
        n_step: int = 1,
        gamma: float = 0.99,
        *,
        direct_read: bool = False,
        timeout_s: float | None = None,
        prefetch: int = 0,
        group: int = 16,
    ) -> Batch:
        """Draw ``batch_size`` transitions over the union of the shards, as one store would.

        One call per shard: the counts per shard are drawn from the states the shards' previous answers
        carried (each answer carries its shard's state after its draw; ``refresh`` first for the state at
        this moment), so they lag by what was added or updated since those answers. Waits while a rate
        limiter holds sampling back. With ``prefetch``, no call at all while a group fetched ahead lasts:
        the batch is the next of ``batches(batch_size, prefetch=prefetch, group=group, ...)``, a stream this
        client keeps between calls.

        Args:
            batch_size: how many transitions.
            rng: a ``np.random.Generator``, an int seed or None, as in ``ReplayStore.sample``; one draw
                from it seeds the whole request.
            beta: the importance exponent (None: the stores' default, 0.4).
            n_step: as in ``ReplayStore.sample``.
            gamma: as in ``ReplayStore.sample``.
            direct_read: draw from each shard's last commit outside its actor, so that the draw never
                waits behind the shard's adds: a shard on this node read in this process, one on another
                node by a reader actor of this client's there (started on first use). Such a draw lags
                each shard by at most its commit interval and passes outside its rate limiter.
            timeout_s: the longest wait while a rate limiter holds sampling back (None: no limit).
            prefetch: 0 (the default): this batch is drawn now, as above. From 1: it comes from groups
                of ``group`` batches requested ``prefetch`` deep ahead (as ``batches`` requests them), so
                its draw lags the adds and priority updates by up to ``prefetch * group`` batches. The
                stream is seeded by one draw of the first call's ``rng`` (later calls with the same
                arguments do not use theirs); a call with other arguments starts a new stream, dropping
                the groups fetched ahead for the old one.
            group: batches per request when ``prefetch`` is 1 or more.

        Returns:
            A ``Batch`` whose ``index`` holds global ids.

        Raises:
            TimeoutError: no batch within ``timeout_s``; the message says which shard's limit holds it
                back and, when no insert has reached such a shard meanwhile, that its writers look gone.
            ValueError: no shard that answers holds a transition (without a rate limit), or ``prefetch``
                is negative or ``group`` below 1.
            TypeError: ``prefetch`` or ``group`` is not an int.
        """
        batch_size = parse_positive_int(batch_size, "batch_size")
        if parse_non_negative_int(prefetch, "prefetch"):
            key = (batch_size, beta, n_step, gamma, direct_read, timeout_s, prefetch, parse_positive_int(group, "group"))
            return self._ahead.next(key, lambda: self.batches(
                batch_size, prefetch=prefetch, rng=int(parse_rng(rng).integers(2**63)), beta=beta, n_step=n_step,
                gamma=gamma, direct_read=direct_read, group=group, timeout_s=timeout_s))
        seed = int(parse_rng(rng).integers(2**63))  # one draw from the caller's rng, however long we wait
        if direct_read:  # every shard drawn from on this node: decoded by their readers, no encoded step
            self._states.collect()
            batch = self._draws.sample_here(batch_size, seed, beta, n_step, gamma)
            if batch is not None:
                return batch
        parts = waited_parts(self._draws, self._states, batch_size, seed, beta, n_step, gamma, direct_read=direct_read,
                             timeout_s=timeout_s)
        return self._draws.group(parts, batch_size, beta).batch(0)

    def sample_encoded(
        self,
        batch_size: int,
        rng: np.random.Generator | int | None = None,
        beta: float | None = None,
        n_step: int = 1,
        gamma: float = 0.99,
        *,
        direct_read: bool = False,
        timeout_s: float | None = None,
    ) -> list[tuple[int, EncodedBatch, dict[str, Any]]]:
        """The parts of a batch as the shards return them; ``sample`` decodes and joins them.

        Args:
            batch_size: as in ``sample``.
            rng: as in ``sample``.
            beta: as in ``sample``.
            n_step: as in ``sample``.
            gamma: as in ``sample``.
            direct_read: as in ``sample``; directly read shards give theirs encoded too.
            timeout_s: as in ``sample``.

        Returns:
            (shard, encoded batch, the shard's info at the draw) for each shard drawn from.

        Raises:
            TimeoutError: no batch within ``timeout_s``.
        """
        batch_size = parse_positive_int(batch_size, "batch_size")
        seed = int(parse_rng(rng).integers(2**63))  # one draw from the caller's rng, however long we wait
        parts = waited_parts(self._draws, self._states, batch_size, seed, beta, n_step, gamma, direct_read=direct_read,
                             timeout_s=timeout_s)
        return [(part.shard, part.batch, part.info) for part in parts]

    def sample_sequences(
        self,
        batch_size: int,
        length: int,
        rng: np.random.Generator | int | None = None,
        beta: float | None = None,
        *,
        direct_read: bool = False,
    ) -> SequenceBatch:
        """Draw windows of ``length`` transitions of one env and episode over the union of the shards.

        As ``ReplayStore.sample_sequences``, the windows drawn over the shards as ``sample`` draws
        transitions; the shards send them encoded and the client decodes them in one call.

        Args:
            batch_size: how many windows.
            length: transitions per window.
            rng: as in ``sample``.
            beta: as in ``sample``.
            direct_read: as in ``sample``.

        Returns:
            A ``SequenceBatch`` whose ``index`` holds global ids (-1 past a window's end).

        Raises:
            ValueError: no shard that answers holds a transition, or a shard's rate limit holds sampling
                back (``sample_sequences`` does not wait; ``sequence_batches`` does).
        """
        batch_size = parse_positive_int(batch_size, "batch_size")
        length = parse_positive_int(length, "length")
        seed = int(parse_rng(rng).integers(2**63))
        self._states.collect()
        parts = self._draws.gather(self._draws.request_sequences(batch_size, length, 1, seed, beta,
                                                                  direct_read=direct_read))
        self._states.collect()
        if parts is None:
            reasons = "; ".join(info["held_back"] for info in self._infos if info is not None and info.get("held_back"))
            raise ValueError(f"a shard's rate limit holds sampling back ({reasons or 'a shard was lost'}); "
                             "sample_sequences does not wait: use sequence_batches(timeout_s=)")
        return self._draws.sequence_group(parts, batch_size, beta).batch(0)

    def sequence_batches(
        self, batch_size: int, length: int, *, prefetch: int = 2, rng: np.random.Generator | int | None = None,
        beta: float | None = None, group: int = 4, timeout_s: float | None = None, direct_read: bool = False,
    ) -> Iterator[SequenceBatch]:
        """An endless iterator of batches of windows (R2D2's sequences) requested ahead from the shards.

        As ``batches`` is for transitions: each request is for ``group`` batches of ``batch_size`` windows
        of ``length``, one call per shard for them all, ``prefetch`` requests in flight; each batch's
        windows are drawn over the shards as ``sample_sequences`` draws them (counts per shard in
        proportion to their masses, from the shards' states as their previous answers reported them), and
        a window never crosses an episode. A group that a shard's rate limit refused, or that a lost
        shard did not answer, is drawn again, waiting up to ``timeout_s``.

        Args:
            batch_size: windows per batch.
            length: transitions per window.
            prefetch: requests in flight.
            rng: as in ``sample``; one generator, advanced request after request.
            beta: as in ``sample``.
            group: batches per request.
            timeout_s: the longest wait for a batch a rate limit holds back (None: for ever).
            direct_read: as in ``sample``.

        Returns:
            An endless iterator of ``SequenceBatch`` records whose ``index`` holds global ids (-1 past a
            window's end); its arguments are checked here, before the first ``next``.

        Raises:
            TypeError: a number is not an int.
            ValueError: a number is below 1, or (from ``next``) no shard that answers holds a transition
                (without a rate limit).
            TimeoutError: (from ``next``) a batch held back by a rate limit for ``timeout_s``, as ``sample``
                says: when the writers are gone, the message says so.
        """
        batch_size = parse_positive_int(batch_size, "batch_size")
        length = parse_positive_int(length, "length")
        prefetch = parse_positive_int(prefetch, "prefetch")
        group = parse_positive_int(group, "group")
        if timeout_s is not None:
            timeout_s = parse_number(timeout_s, "timeout_s", low=0.0)
        generator = parse_rng(rng)
        return sequence_stream(self._draws, self._states, batch_size=batch_size, length=length, prefetch=prefetch,
                               generator=generator, beta=beta, group=group, timeout_s=timeout_s,
                               direct_read=direct_read)

    def batches(
        self, batch_size: int, *, prefetch: int = 2, rng: np.random.Generator | int | None = None,
        beta: float | None = None, n_step: int = 1, gamma: float = 0.99, direct_read: bool = False,
        group: int = 16, timeout_s: float | None = None,
    ) -> Iterator[Batch]:
        """An endless iterator of batches requested ahead from the shards, which travel while the learner trains.

        Each request is for ``group`` batches: one call per shard for them all, which draws the shard's
        rows of the whole group at once, so Ray's per-call overhead and the shard's per-call work are paid
        once a group. Each batch's frames are decoded, from every shard's blocks in one call, when it is
        yielded. Each batch is drawn from the shards' state as their previous answers reported it, as
        ``sample``'s are: here the proportions lag by the adds of up to ``prefetch * group`` batches. The
        batches of a group that a shard refused or lost are drawn again by ``sample``. The benchmarks page
        has the rates by group size.

        Args:
            batch_size: as in ``sample``.
            prefetch: requests in flight.
            rng: as in ``sample``; one generator, advanced request after request.
            beta: as in ``sample``.
            n_step: as in ``sample``.
            gamma: as in ``sample``.
            direct_read: as in ``sample``.
            group: batches per request.
            timeout_s: the longest wait for a batch a rate limit holds back (None: for ever).

        Yields:
            ``Batch`` records whose ``index`` holds global ids.

        Raises:
            TypeError: a number is not an int.
            ValueError: a number is below 1.
            TimeoutError: (from ``next``) a batch held back by a rate limit for ``timeout_s``, as ``sample``
                says: when the writers are gone, the message says so.
        """
        batch_size = parse_positive_int(batch_size, "batch_size")
        prefetch = parse_positive_int(prefetch, "prefetch")
        group = parse_positive_int(group, "group")
        if timeout_s is not None:
            timeout_s = parse_number(timeout_s, "timeout_s", low=0.0)
        generator = parse_rng(rng)
        yield from transition_stream(
            self._draws, self._states,
            lambda batch_rng: self.sample(batch_size, batch_rng, beta, n_step, gamma, direct_read=direct_read,
                                          timeout_s=timeout_s),
            batch_size=batch_size, prefetch=prefetch, generator=generator, beta=beta, n_step=n_step, gamma=gamma,
            direct_read=direct_read, group=group,
        )

    def update_priorities(self, index: npt.ArrayLike, priorities: npt.ArrayLike) -> None:
        """Set the priorities of sampled transitions by global id, each sent to the shard that owns it.

        It does not wait for the shards. Ids of an earlier epoch of their shard (it restarted since) are
        dropped there. A shard runs this client's calls in order, so a later ``sample`` draws from the
        updated priorities; the masses the counts per shard are drawn from follow once the answers are
        back (collected, without waiting, by the next draw).

        Args:
            index: global ids, as a sharded batch's ``index`` holds them.
            priorities: one per id.

        Raises:
            TypeError: the replay samples uniformly, or ``index``/``priorities`` are not numbers.
            ValueError: shapes differ, a priority is negative or not finite, or an id names no shard.
            Exception: the error of an update sent by an earlier call (a shard that refused it), as Ray
                raises it (an instance of the shard's exception class): raised by the next call that
                finds its answer back (this one, ``sample``, a ``batches`` draw; ``refresh``, ``stats``
                and ``close`` wait for it).
        """
        if self._description.get("prioritized") is False:
            raise TypeError("update_priorities needs a replay created with sampler=PrioritizedSampler(...); "
                            "this one samples uniformly")
        ids = parse_steps(index, "index")
        values = parse_priorities(priorities, like=ids)
        shards, epochs, steps = split_ids(ids)
        outside = (shards < 0) | (shards >= self.num_shards)
        if outside.any():
            raise ValueError(f"index holds an id of shard {int(shards[outside][0])}; expected 0 <= shard < {self.num_shards}")
        self._states.collect()
        for k in np.unique(shards).tolist():
            for epoch in np.unique(epochs[shards == k]).tolist():
                chosen = (shards == k) & (epochs == epoch)
                call = self._shards[k].update_priorities.remote(epoch, steps[chosen], values[chosen])
                self._states.watch(k, self._states.ticket(), call, counted=True)

    # -- direct reads --------------------------------------------------------------------------

    # -- state ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return sum(info["len"] for info in self.refresh() if info is not None)

    def stats(self) -> list[dict[str, Any] | None]:
        """Each shard's state, asked now.

        Returns:
            One dict per shard (None for a shard that does not answer), with ``len``, ``epoch``,
            ``mass``, the rate limiter's ``inserts`` and ``samples``, ``path`` and ``node_id``.
        """
        return self.refresh()

    def close(self, *, destroy: bool = False) -> None:
        """Release this client and its direct readers, once the priority updates it sent are answered.

        Args:
            destroy: also commit and end the shard actors and the named directory: the stores stay on
                disk, and ``create`` with the same root reopens them.

        Raises:
            Exception: the error of a priority update sent earlier, after everything is released.
        """
        try:
            self._states.collect(wait=True)
        finally:
            self._states.forget()
            self._release(destroy=destroy)

    def _release(self, *, destroy: bool) -> None:
        self._ahead.drop()
        self._draws.close()
        if destroy and not self._closed:
            for shard in self._shards:
                try:
                    ray.get(shard.close.remote())
                    ray.kill(shard, no_restart=True)
                except _LOST:
                    pass
            try:
                ray.kill(ray.get_actor(self.name, namespace=self._description["namespace"]), no_restart=True)
            except ValueError:
                pass
        self._closed = True

    def __repr__(self) -> str:
        return f"<ShardedReplay {self.name!r} shards={self.num_shards} root={self._description['root']!r}>"

