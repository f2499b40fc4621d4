"""How a ``ShardedReplay`` client draws groups of batches over its shards, from what it knows of them.

A draw (``Draws.request``) takes the counts per shard from the shards' newest known states
(``ShardStates``), asks each shard that got rows for them in one call, and asks each shard that got none
for its state, collected later without waiting. A direct draw (``direct_read=True``) asks each shard's
``ShardReader`` instead: in this process for a shard on this node, an actor on the shard's node for any
other; the readers' states (of the shards' last commits) stand in for the shards' own.
``Draws.gather`` waits for the rows and records the states their answers carry; ``Draws.group`` joins
the parts into the batches (``GroupBatches``). ``ShardedReplay``'s module docstring gives the sampling
rules this follows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import ray

from mmreplay import Batch
from mmreplay.ray.assembly import GroupBatches, Part, SequenceParts, join_batches
from mmreplay.ray.shard_reader import ShardReader, start_reader
from mmreplay.ray.shard_states import LOST as _LOST
from mmreplay.ray.shard_states import ShardStates

# One shard's part of a draw: (shard, the call's ticket (0: a reader's), the call, or a reader's answer
# read in this process, the shard's state the draw used (a reader's; None for the shard's own call), its
# rows per batch).
Request = tuple[int, int, Any, "dict[str, Any] | None", npt.NDArray[np.int64]]
# The longest wait for a new reader actor's first answer: starting a worker process on a loaded node can
# take tens of seconds, and a draw that left the shard out meanwhile would not be the draw over the union.
READER_START_S = 120


class Draws:
    """The draws of one client over ``shards`` (actor handles), from ``states``; the shards' readers for
    direct draws, started on first use: ``readers`` (in this process, for the shards on this node) and
    ``remote_readers`` (actors on the shards' nodes: (node id, handle)), with the states the remote ones
    last reported (``read_states``) and the state calls sent to them but not collected yet."""

    def __init__(
        self, shards: list[Any], states: ShardStates, *, stack_size: int, rate_limited: bool,
        decode_threads: int | None,
    ) -> None:
        self.shards = shards
        self.states = states
        self.stack_size = stack_size
        self.rate_limited = rate_limited
        self.decode_threads = decode_threads
        self.readers: dict[int, ShardReader] = {}
        self.remote_readers: dict[int, tuple[str, Any]] = {}
        self.read_states: dict[int, dict[str, Any]] = {}
        self.read_calls: dict[int, Any] = {}
        self.node_id = ray.get_runtime_context().get_node_id()

    def refresh(self) -> list[dict[str, Any] | None]:
        """Ask every shard for its state now, and wait (None for one that does not answer within 30 s).

        ``sample`` and ``batches`` draw from the states the shards' previous answers carried, with no call
        of their own to learn them; call this first for a draw from the state at this moment.

        Raises:
            Exception: the error of a priority update sent earlier, as ``update_priorities`` says (this
                waits for their answers first).
        """
        self.states.collect(wait=True)
        calls = []
        for k, shard in enumerate(self.shards):
            calls.append((k, self.states.ticket(), shard.info.remote()))
        for k, ticket, call in calls:
            try:
                self.states.record(k, ticket, ray.get(call, timeout=30))
            except (*_LOST, ray.exceptions.GetTimeoutError):
                self.states.record(k, ticket, None)
        return list(self.states.infos)

    def request(
        self, batch_size: int, group: int, seed: int, beta: float | None, n_step: int, gamma: float, *,
        direct_read: bool,
    ) -> list[Request] | None:
        """Ask the shards for a group of ``group`` batches drawn from the shards' last known state: per
        shard, one call (to the shard, or to its reader: ``direct_read``) for its rows of all of them, as
        ``Request`` says; None when no shard holds anything yet (and a rate
        limit is set; without one, ``ValueError``). A shard given no rows is asked for its state, its
        answer collected by a later draw without waiting. Only when no known state holds anything are
        the shards asked first (``refresh``).

        ``default_rng(seed)`` draws each batch's counts per shard (``Multinomial(batch_size, mass_k /
        total)``), then one seed per shard. Shard k draws its rows of the whole group at once, with its
        seed: one draw of n transitions is n independent draws, as n draws spread over several calls
        would be, and a group of one batch is exactly what ``sample`` draws with ``seed``."""
        return self._request(batch_size, group, seed, direct_read, "sample",
                             beta=0.4 if beta is None else beta, n_step=n_step, gamma=gamma)

    def request_sequences(
        self, batch_size: int, length: int, group: int, seed: int, beta: float | None, *, direct_read: bool
    ) -> list[Request] | None:
        """Ask the shards for a group of ``group`` batches of ``batch_size`` windows of ``length``, drawn as
        ``request`` draws transitions: each batch's counts per shard ``Multinomial(batch_size, mass_k /
        total)`` from ``default_rng(seed)``, then one seed per shard, and one call per shard (or its
        reader, ``direct_read``) for its windows of the whole group (a window never crosses an episode:
        the shard's store draws it). Returns the requests as ``request`` does; None when no shard holds
        anything yet under a rate limit.

        Raises:
            ValueError: no shard that answers holds a transition (without a rate limit).
        """
        return self._request(batch_size, group, seed, direct_read, "sample_sequences", length=length,
                             beta=0.4 if beta is None else beta)

    def sample_here(
        self, batch_size: int, seed: int, beta: float | None, n_step: int, gamma: float
    ) -> Batch | None:
        """One batch drawn as ``request(batch_size, 1, seed, ...)`` draws it with ``direct_read``, when every
        shard it draws from is on this node: each shard's rows drawn and decoded by its reader in this
        process and joined (``join_batches``), with no encoded step; None when a shard it draws from is
        on another node or holds nothing left (the caller draws through ``request`` then).

        Raises:
            ValueError: no shard that answers holds a transition (without a rate limit).
        """
        known = self._masses(direct_read=True)
        if known is None:
            return None
        masses, infos = known
        counts, shard_seeds = self._split(batch_size, 1, seed, masses)
        drawn = [k for k in range(len(self.shards)) if counts[0, k]]
        if not all(infos[k] is not None and self.is_local(k) for k in drawn):
            return None
        beta_value = 0.4 if beta is None else beta
        parts = []
        for k in drawn:
            batch, state = self.reader(k).sample(int(counts[0, k]), int(shard_seeds[k]), beta=beta_value,
                                                 n_step=n_step, gamma=gamma, decoded=True)
            if batch is None:
                return None
            parts.append((k, batch, {**infos[k], **state}))
        return join_batches(parts, global_min=self.global_min([info for _, _, info in parts]), beta=beta_value)

    def _request(
        self, batch_size: int, group: int, seed: int, direct_read: bool, method: str, **arguments: Any
    ) -> list[Request] | None:
        """``request``'s and ``request_sequences``' draw: the counts per shard and one call of ``method``
        (``"sample"`` or ``"sample_sequences"``, which a shard and a ``ShardReader`` both answer) per
        shard that got rows, with ``arguments``; a state request to each shard that got none."""
        known = self._masses(direct_read)
        if known is None:
            return None
        masses, infos = known
        counts, shard_seeds = self._split(batch_size, group, seed, masses)
        requests: list[Request] = []
        drawn = counts.sum(axis=0)
        for k in range(len(self.shards)):
            total, shard_seed = int(drawn[k]), int(shard_seeds[k])
            if direct_read and infos[k] is not None:
                if self.is_local(k):
                    if total:
                        # encoded here too: gathering its blocks costs less than decoding the whole group's
                        # rows at once, and each batch then decodes from every part's blocks into its array
                        answer = getattr(self.reader(k), method)(total, shard_seed, **arguments)
                        requests.append((k, 0, answer, infos[k], counts[:, k]))
                elif total:
                    call = getattr(self.remote_reader(k), method).remote(total, shard_seed, **arguments)
                    requests.append((k, 0, call, infos[k], counts[:, k]))
                elif k not in self.read_calls:  # no rows this time: its reader's state, for the next draws
                    self.read_calls[k] = self.remote_reader(k).state.remote()
            elif total:
                ticket = self.states.ticket()
                call = getattr(self.shards[k], method).remote(total, shard_seed, **arguments)
                requests.append((k, ticket, call, None, counts[:, k]))
            elif not self.states.watching(k):  # no rows this time: its state, for the draws after this one
                self.states.watch(k, self.states.ticket(), self.shards[k].info.remote())
        return requests

    def _masses(self, direct_read: bool) -> tuple[npt.NDArray[np.float64], list[dict[str, Any] | None]] | None:
        """Each shard's mass and state as last known (``known_states``), asking the shards first when none
        is known to hold anything; None when none holds anything under a rate limit.

        Raises:
            ValueError: no shard that answers holds a transition (without a rate limit).
        """
        infos = self.known_states(direct_read)
        masses = np.array([0.0 if info is None else info["mass"] for info in infos])
        if not masses.sum() > 0:
            self.refresh()  # nothing known yet, or everything known was empty: ask before giving up
            infos = self.known_states(direct_read, wait=True)
            masses = np.array([0.0 if info is None else info["mass"] for info in infos])
        if not masses.sum() > 0:
            if self.rate_limited:
                return None
            raise ValueError("cannot sample: no shard that answers holds a transition")
        return masses, infos

    def _split(
        self, batch_size: int, group: int, seed: int, masses: npt.NDArray[np.float64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """From ``default_rng(seed)``: each of ``group`` batches' counts per shard, ``Multinomial(batch_size,
        mass_k / total)`` as a (group, shards) array, then one seed per shard."""
        generator = np.random.default_rng(seed)
        counts = generator.multinomial(batch_size, masses / masses.sum(), size=group)
        return counts, generator.integers(2**63, size=len(self.shards))

    def sequence_group(self, parts: list[Part], batch_size: int, beta: float | None) -> SequenceParts:
        """The batches of windows of a group's parts (``Part.batch`` holding windows): global ids, weights
        normalised by the global minimum."""
        return SequenceParts(parts, batch_size=batch_size, stack_size=self.stack_size,
                             global_min=self.global_min([part.info for part in parts]),
                             beta=0.4 if beta is None else beta, decode_threads=self.decode_threads)

    def known_states(self, direct_read: bool, *, wait: bool = False) -> list[dict[str, Any] | None]:
        """Each shard's state as last known; for a direct draw, as its reader sees it: a shard on this
        node read now, one on another node as its reader last reported (asked now when it never did,
        or ``wait``)."""
        infos = list(self.states.infos)
        if not direct_read:
            return infos
        for k, info in enumerate(infos):
            if info is None:
                continue
            if self.is_local(k):
                infos[k] = {**info, **self.reader(k).state()}
                continue
            self._collect_read_state(k, wait=wait or k not in self.read_states)
            infos[k] = {**info, **self.read_states[k]} if k in self.read_states else None
        return infos

    def _collect_read_state(self, k: int, *, wait: bool) -> None:
        """Record the state shard k's remote reader answered (``wait``: ask it now, or wait for the
        answer asked for before: up to ``READER_START_S`` for a reader that never answered (it may be
        starting on a loaded node), else 30 s; one that does not answer in time is asked again by the next
        draw, its shard left out of this one). A lost reader is dropped (started again by the next draw
        that reads its shard)."""
        call = self.read_calls.pop(k, None)
        if call is None and not wait:
            return
        if call is None:
            call = self.remote_reader(k).state.remote()
        timeout = (30 if k in self.read_states else READER_START_S) if wait else 0
        if not ray.wait([call], timeout=timeout)[0]:
            self.read_calls[k] = call
            return
        try:
            self.read_states[k] = ray.get(call)
        except _LOST:
            self._drop_reader(k)

    def _drop_reader(self, k: int) -> None:
        self.read_states.pop(k, None)
        self.read_calls.pop(k, None)
        node_handle = self.remote_readers.pop(k, None)
        if node_handle is not None:
            ray.kill(node_handle[1], no_restart=True)

    def gather(
        self, requests: list[Request] | None
    ) -> list[Part] | None:
        """The parts of a requested group, each shard's state recorded from its answer; None when a shard
        refused (its rate limit) or was lost."""
        if requests is None:
            return None
        parts, complete = [], True
        for k, ticket, call, info, counts in requests:
            try:
                batch, answer = ray.get(call) if isinstance(call, ray.ObjectRef) else call
            except _LOST:
                if ticket:
                    self.states.record(k, ticket, None)
                else:
                    self._drop_reader(k)
                complete = False
                continue
            if ticket:  # the shard's own answer: its state after the draw
                self.states.record(k, ticket, answer)
            else:  # a reader's: the state of the shard's last commit, over what the shard last reported
                if k in self.remote_readers:
                    self.read_states[k] = answer
                answer = {**info, **answer}
            if batch is None:
                complete = False
            else:
                parts.append(Part(k, batch, answer, counts))
        return parts if complete else None

    def global_min(self, infos: list[dict[str, Any]]) -> float:
        """The smallest priority leaf over every shard that holds transitions, as last reported, with the
        states of ``infos`` (those the parts were drawn in) taking precedence."""
        known = list(self.states.infos)
        for info in infos:
            known[info["shard"]] = info
        return float(min(info["min_leaf"] for info in known if info is not None and info["len"] > 0))

    def group(self, parts: list[Part], batch_size: int, beta: float | None) -> GroupBatches:
        """The batches of a group's parts: global ids, weights normalised by the global minimum."""
        return GroupBatches(parts, batch_size=batch_size, stack_size=self.stack_size,
                            global_min=self.global_min([part.info for part in parts]),
                            beta=0.4 if beta is None else beta, decode_threads=self.decode_threads)

    def is_local(self, k: int) -> bool:
        info = self.states.infos[k]
        return info is not None and info["node_id"] == self.node_id

    def reader(self, k: int) -> ShardReader:
        """The reader of shard k (on this node) in this process, opened on first use."""
        reader = self.readers.get(k)
        if reader is None:
            info = self.states.infos[k]
            assert info is not None
            reader = self.readers[k] = ShardReader(info["path"], decode_threads=self.decode_threads)
        return reader

    def remote_reader(self, k: int) -> Any:
        """The reader actor of shard k on the shard's node, started on first use (again when the shard
        reports another node)."""
        info = self.states.infos[k]
        assert info is not None
        known = self.remote_readers.get(k)
        if known is not None and known[0] == info["node_id"]:
            return known[1]
        if known is not None:
            self._drop_reader(k)
        handle = start_reader(info)
        self.remote_readers[k] = (info["node_id"], handle)
        return handle

    def close(self) -> None:
        """Close the readers (those in this process, and the actors started on other nodes)."""
        for reader in self.readers.values():
            reader.close()
        self.readers.clear()
        for k in list(self.remote_readers):
            try:
                self._drop_reader(k)
            except Exception:  # noqa: BLE001 - Ray already shut down: its actors ended with it
                pass
