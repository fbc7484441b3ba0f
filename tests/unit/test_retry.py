"""RetryPolicy: capped full-jitter backoff and which exceptions retry."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from scheduler_app.retry import DEFAULT_RETRY_POLICY, RetryPolicy

SECOND = dt.timedelta(seconds=1)


class Transient(Exception):
    pass


class Permanent(Exception):
    pass


@pytest.mark.parametrize("attempt", [1, 2, 3, 4, 5, 8, 10])
def test_backoff_stays_within_full_jitter_bounds(attempt):
    policy = RetryPolicy(base=2 * SECOND, cap=dt.timedelta(minutes=10))
    upper = min(policy.cap, policy.base * 2 ** (attempt - 1))
    rng = random.Random(1234 + attempt)

    waits = [policy.backoff(attempt, rng) for _ in range(2000)]

    assert all(dt.timedelta(0) <= wait <= upper for wait in waits)
    # Full jitter spreads over the whole range, not just near the top.
    assert min(waits) < upper * 0.05
    assert max(waits) > upper * 0.95


def test_backoff_upper_bound_doubles_per_attempt_until_the_cap():
    policy = RetryPolicy(base=SECOND, cap=dt.timedelta(seconds=10))

    assert [policy.max_backoff(n) for n in range(1, 7)] == [
        SECOND,
        2 * SECOND,
        4 * SECOND,
        8 * SECOND,
        10 * SECOND,
        10 * SECOND,
    ]


def test_backoff_with_the_same_seed_is_reproducible():
    policy = RetryPolicy()

    first = [policy.backoff(3, random.Random(7)) for _ in range(5)]
    second = [policy.backoff(3, random.Random(7)) for _ in range(5)]

    assert first == second


@pytest.mark.parametrize("attempt", [11, 20, 30, 46])
def test_backoff_never_exceeds_the_cap_for_late_attempts(attempt):
    policy = RetryPolicy(base=2 * SECOND, cap=dt.timedelta(minutes=10))
    rng = random.Random(attempt)

    assert policy.max_backoff(attempt) == policy.cap
    assert all(dt.timedelta(0) <= policy.backoff(attempt, rng) <= policy.cap for _ in range(500))


@pytest.mark.parametrize("attempt", [47, 63, 100, 10_000])
def test_backoff_never_exceeds_the_cap_for_very_large_attempts(attempt):
    assert DEFAULT_RETRY_POLICY.max_backoff(attempt) == DEFAULT_RETRY_POLICY.cap
    assert DEFAULT_RETRY_POLICY.backoff(attempt, random.Random(0)) <= DEFAULT_RETRY_POLICY.cap


@pytest.mark.parametrize("attempt", [0, -3])
def test_backoff_for_attempt_below_one_uses_the_base(attempt):
    policy = RetryPolicy(base=3 * SECOND, cap=dt.timedelta(minutes=1))

    assert policy.max_backoff(attempt) == 3 * SECOND


def test_default_policy_retries_any_exception():
    assert DEFAULT_RETRY_POLICY.should_retry(Permanent("boom"))
    assert DEFAULT_RETRY_POLICY.should_retry(ValueError("bad"))


def test_should_retry_only_listed_exceptions_and_their_subclasses():
    class VeryTransient(Transient):
        pass

    policy = RetryPolicy(retry_on=(Transient, TimeoutError))

    assert policy.should_retry(Transient())
    assert policy.should_retry(VeryTransient())
    assert policy.should_retry(TimeoutError())
    assert not policy.should_retry(Permanent())
    assert not policy.should_retry(ValueError())


def test_empty_retry_on_never_retries():
    assert not RetryPolicy(retry_on=()).should_retry(Transient())


@pytest.mark.parametrize(
    ("base", "cap"),
    [
        (dt.timedelta(0), dt.timedelta(seconds=10)),
        (-SECOND, dt.timedelta(seconds=10)),
        (dt.timedelta(seconds=10), dt.timedelta(seconds=5)),
    ],
)
def test_policy_refuses_non_positive_base_or_cap_below_base(base, cap):
    with pytest.raises(ValueError, match=r"^RetryPolicy needs 0 < base <= cap$"):
        RetryPolicy(base=base, cap=cap)


def test_policy_is_frozen_and_keyword_only():
    policy = RetryPolicy()

    with pytest.raises(AttributeError):
        policy.base = SECOND  # type: ignore[misc]
    with pytest.raises(TypeError):
        RetryPolicy(SECOND)  # type: ignore[misc]
