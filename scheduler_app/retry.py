"""RetryPolicy: which failures retry, and how long to wait before the next attempt."""

from __future__ import annotations

import dataclasses
import datetime as dt
import random


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Capped full-jitter exponential backoff.

    The wait before attempt ``n + 1`` is uniform in
    ``[0, min(cap, base * 2 ** (n - 1))]`` ("full jitter", so retries of many
    jobs that failed together spread out). Only exceptions that are instances
    of ``retry_on`` retry; any other exception fails the job at once.
    ``retry_later_budget`` bounds how far ``RetryLater`` may push a job past
    its first deferral without using attempts.
    """

    base: dt.timedelta = dt.timedelta(seconds=2)
    cap: dt.timedelta = dt.timedelta(minutes=10)
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    retry_later_budget: dt.timedelta = dt.timedelta(hours=1)

    def __post_init__(self) -> None:
        if self.base <= dt.timedelta(0) or self.cap < self.base:
            raise ValueError("RetryPolicy needs 0 < base <= cap")

    def should_retry(self, exc: BaseException) -> bool:
        """Return True if ``exc`` is a retryable failure."""
        return isinstance(exc, self.retry_on)

    def max_backoff(self, attempt: int) -> dt.timedelta:
        """Return the upper bound of the wait after failed attempt ``attempt`` (1-based)."""
        exponent = max(attempt - 1, 0)
        # Compare before multiplying: base * 2**47 already overflows a timedelta.
        if 2**exponent >= self.cap / self.base:
            return self.cap
        return self.base * 2**exponent

    def backoff(self, attempt: int, rng: random.Random | None = None) -> dt.timedelta:
        """Return a random wait after failed attempt ``attempt`` (1-based)."""
        upper = self.max_backoff(attempt).total_seconds()
        return dt.timedelta(seconds=(rng or random).uniform(0, upper))


DEFAULT_RETRY_POLICY = RetryPolicy()
