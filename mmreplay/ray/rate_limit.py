"""Rate limiting as Reverb defines it: a minimum size before sampling, and samples per insert kept
within an error bound, by holding back the faster side.

Vocabulary (Reverb's ``rate_limiters.py``): with ``inserts`` transitions added and ``samples``
transitions drawn, the *diff* is ``inserts * samples_per_insert - samples``. A sample of n is allowed
when the store holds at least ``min_size_to_sample`` transitions and ``diff - n >= min_diff``; an insert
of n when ``diff + n * samples_per_insert <= max_diff``, with ``min_diff`` and ``max_diff`` the
bounds ``min_size_to_sample * samples_per_insert -/+ error_buffer``. Before ``min_size_to_sample``
inserts, inserts are always allowed.

A sharded replay gives each shard a limiter with ``1/num_shards`` of the minimum size and of the
error buffer (``RateLimit.for_shard``): each shard keeps its own diff within its bounds, so the sum
over shards stays within the whole replay's (a shard may hold back while another has room: the
bound is kept conservatively).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RateLimit:
    """Reverb's ``SampleToInsertRatio(samples_per_insert, min_size_to_sample, error_buffer)`` rate limit.

    With ``inserts`` transitions added and ``samples`` drawn, the *diff* is
    ``inserts * samples_per_insert - samples``. A sample of n is allowed when the store holds at least
    ``min_size_to_sample`` transitions and ``diff - n >= min_diff``; an insert of n when
    ``diff + n * samples_per_insert <= max_diff``. Before ``min_size_to_sample`` inserts, inserts are
    always allowed. ``RateLimit.min_size(n)`` is Reverb's ``MinSize`` (no ratio).

    Attributes:
        samples_per_insert: the target ratio of samples to inserts, > 0.
        min_size_to_sample: transitions stored before the first sample, >= 1.
        error_buffer: how far the diff may stray from its target, at least ``samples_per_insert``
            (inf: no bound).

    Raises:
        ValueError: a field is out of range.
    """

    samples_per_insert: float
    min_size_to_sample: int = 1
    error_buffer: float = math.inf

    def __post_init__(self) -> None:
        if not (isinstance(self.samples_per_insert, (int, float)) and self.samples_per_insert > 0):
            raise ValueError(f"samples_per_insert must be a number > 0; got {self.samples_per_insert!r}")
        if not (isinstance(self.min_size_to_sample, int) and self.min_size_to_sample >= 1):
            raise ValueError(f"min_size_to_sample must be an int >= 1; got {self.min_size_to_sample!r}")
        if not (isinstance(self.error_buffer, (int, float)) and self.error_buffer >= 0):
            raise ValueError(f"error_buffer must be a number >= 0; got {self.error_buffer!r}")
        if self.error_buffer < self.samples_per_insert and math.isfinite(self.error_buffer):
            raise ValueError(
                f"error_buffer is {self.error_buffer}; expected at least samples_per_insert "
                f"({self.samples_per_insert}), or no insert could ever be allowed"
            )

    @classmethod
    def min_size(cls, min_size_to_sample: int) -> RateLimit:
        """Only a minimum size before sampling, Reverb's ``MinSize``.

        Args:
            min_size_to_sample: transitions stored before the first sample.

        Returns:
            The rate limit, with no bound on the ratio.
        """
        return cls(samples_per_insert=1.0, min_size_to_sample=min_size_to_sample)

    @property
    def min_diff(self) -> float:
        """The lowest diff a sample may leave.

        Returns:
            ``min_size_to_sample * samples_per_insert - error_buffer``.
        """
        return self.min_size_to_sample * self.samples_per_insert - self.error_buffer

    @property
    def max_diff(self) -> float:
        """The highest diff an insert may leave.

        Returns:
            ``min_size_to_sample * samples_per_insert + error_buffer``.
        """
        return self.min_size_to_sample * self.samples_per_insert + self.error_buffer

    def for_shard(self, num_shards: int) -> RateLimit:
        """One of ``num_shards`` shards' share: the minimum size and the error buffer divided among them.

        Each shard keeps its own diff within its bounds, so the sum over shards stays within the whole
        replay's.

        Args:
            num_shards: the shards sharing the limit.

        Returns:
            The shard's rate limit.
        """
        return RateLimit(
            samples_per_insert=self.samples_per_insert,
            min_size_to_sample=max(1, math.ceil(self.min_size_to_sample / num_shards)),
            error_buffer=max(self.error_buffer / num_shards, self.samples_per_insert),
        )

    def diff(self, inserts: int, samples: int) -> float:
        """The diff ``inserts * samples_per_insert - samples``.

        Args:
            inserts: transitions added so far.
            samples: transitions drawn so far.

        Returns:
            The diff.
        """
        return inserts * self.samples_per_insert - samples

    def can_insert(self, count: int, *, inserts: int, samples: int) -> bool:
        """Whether ``count`` inserts are allowed now.

        Args:
            count: the inserts asked for.
            inserts: transitions added so far.
            samples: transitions drawn so far.

        Returns:
            True if allowed.
        """
        if inserts + count <= self.min_size_to_sample:
            return True
        return self.diff(inserts, samples) + count * self.samples_per_insert <= self.max_diff

    def insertable(self, count: int, *, inserts: int, samples: int) -> int:
        """The most of ``count`` inserts allowed now, in closed form rather than one step at a time.

        Args:
            count: the inserts asked for.
            inserts: transitions added so far.
            samples: transitions drawn so far.

        Returns:
            The largest n <= count with ``can_insert(n)`` (which holds for every smaller n too).
        """
        if self.can_insert(count, inserts=inserts, samples=samples):
            return count
        by_size = max(0, self.min_size_to_sample - inserts)
        by_diff = math.floor((self.max_diff - self.diff(inserts, samples)) / self.samples_per_insert)
        allowed = min(count, max(by_size, by_diff, 0))
        # Float rounding may put the closed form one off: settle on the exact boundary.
        while allowed > 0 and not self.can_insert(allowed, inserts=inserts, samples=samples):
            allowed -= 1
        while allowed < count and self.can_insert(allowed + 1, inserts=inserts, samples=samples):
            allowed += 1
        return allowed

    def can_sample(self, count: int, *, inserts: int, samples: int, size: int) -> bool:
        """Whether a sample of ``count`` is allowed now.

        Args:
            count: the transitions asked for.
            inserts: transitions added so far.
            samples: transitions drawn so far.
            size: the transitions stored now.

        Returns:
            True if allowed.
        """
        if size < self.min_size_to_sample:
            return False
        return self.diff(inserts, samples) - count >= self.min_diff
