"""What a ``ShardedReplay`` client knows of each shard: the newest state any of its answers carried.

Every answer of a shard carries its state (``ReplayShard.info``: size, epoch, mass, smallest leaf, the
limiter's counts), taken after the call's work. The client draws each batch's counts per shard from
these states, so a draw needs no call of its own to learn them: a synchronous ``sample`` is one Ray call
per shard, not a refresh and then a draw.

Vocabulary: a *ticket* numbers the calls this client makes to its shards, in the order it makes them. A
Ray actor runs one caller's calls in that order, so of two answers of one shard, the one with the later
ticket holds the later state; an answer collected late (a state request or a priority update, collected
without waiting) never replaces a newer one. *Watched* calls are those whose answers are collected
without waiting, the next time the client draws: state requests and priority updates.
"""

from __future__ import annotations

from typing import Any

import ray

LOST = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)
# Priority updates kept unanswered per shard before ``update_priorities`` waits for the oldest: a learner
# that only updates, never sampling (each sample waits for the updates sent before it, in the shard).
MAX_WATCHED_PER_SHARD = 64


class ShardStates:
    """Each shard's newest reported state (``infos[k]``; None while unknown or after the shard was lost)."""

    def __init__(self, num_shards: int) -> None:
        self.infos: list[dict[str, Any] | None] = [None] * num_shards
        self._tickets = [-1] * num_shards  # the ticket of the call whose answer infos[k] is
        self._next_ticket = 0
        self._watched: list[tuple[int, int, Any, bool]] = []  # (shard, ticket, call, carries a count first)

    def ticket(self) -> int:
        """The next call's ticket: take one right before making each call."""
        self._next_ticket += 1
        return self._next_ticket

    def record(self, k: int, ticket: int, info: dict[str, Any] | None) -> None:
        """Shard k's state as the answer of call ``ticket`` reported it (None: the call found it lost),
        unless an answer of a later call reported it already."""
        if ticket > self._tickets[k]:
            self.infos[k] = info
            self._tickets[k] = ticket

    def known(self) -> bool:
        """Whether any shard's state is known."""
        return any(info is not None for info in self.infos)

    def held_back_message(self, batch_size: int, timeout_s: float | None) -> str:
        """Why no batch of ``batch_size`` came within ``timeout_s``: what each refusing shard's limit waits
        for, and whether its writers look gone (no insert reached it for longer than the wait)."""
        known = [info for info in self.infos if info is not None]
        refusals = [info for info in known if info.get("held_back")]
        reasons = "; ".join(info["held_back"] for info in refusals) or "no shard that answers holds a transition"
        message = f"no batch of {batch_size} within {timeout_s} s: a rate limit holds sampling back ({reasons})"
        idle = [info for info in (refusals or known) if timeout_s is not None and info["idle_s"] >= timeout_s]
        if idle:
            shards = ", ".join(str(info["shard"]) for info in idle)
            message += (f"; no insert has reached shard {shards} for {min(info['idle_s'] for info in idle):.1f} s: "
                        "its writers look gone")
        return message

    def watching(self, k: int) -> bool:
        """Whether a watched call to shard k is unanswered."""
        return any(shard == k for shard, _, _, _ in self._watched)

    def watch(self, k: int, ticket: int, call: Any, *, counted: bool = False) -> None:
        """Collect the answer of ``call`` to shard k later, without waiting for it: a state (``info``), or,
        ``counted``, a pair (a count, the state) as ``update_priorities`` answers. Waits for shard k's
        oldest watched call once it has ``MAX_WATCHED_PER_SHARD`` unanswered."""
        self._watched.append((k, ticket, call, counted))
        mine = [entry for entry in self._watched if entry[0] == k]
        if len(mine) > MAX_WATCHED_PER_SHARD:
            self._settle([mine[0]])

    def collect(self, *, wait: bool = False) -> None:
        """Record the states of the watched calls answered by now (``wait``: of all of them, waiting).

        Raises:
            Exception: the error of a priority update sent earlier (a shard that refused it), as Ray
                raises it (an instance of the shard's exception class), once every answered call's
                state is recorded.
        """
        if not self._watched:
            return
        if wait:
            ready = self._watched
        else:
            done, _ = ray.wait([call for _, _, call, _ in self._watched], num_returns=len(self._watched), timeout=0)
            finished = set(done)
            ready = [entry for entry in self._watched if entry[2] in finished]
        self._settle(ready)

    def _settle(self, entries: list[tuple[int, int, Any, bool]]) -> None:
        """Record these watched calls' answers and stop watching them; the first error is raised after all
        of them are recorded."""
        error: BaseException | None = None
        settled = {id(entry) for entry in entries}
        self._watched = [entry for entry in self._watched if id(entry) not in settled]
        for k, ticket, call, counted in entries:
            try:
                answer = ray.get(call)
            except LOST:
                self.record(k, ticket, None)
                continue
            except Exception as raised:  # noqa: BLE001 - surfaced once the others are recorded
                error = error or raised
                continue
            self.record(k, ticket, answer[1] if counted else answer)
        if error is not None:
            raise error

    def forget(self) -> None:
        """Stop watching every call (the client is closing)."""
        self._watched.clear()
