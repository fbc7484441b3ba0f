"""The shared rate limiter: a token bucket row per key, under a frozen clock."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from scheduler_app.clock import frozen_clock
from scheduler_app.models import RateLimit
from scheduler_app.sends import limiter

T0 = dt.datetime(2027, 2, 1, 9, 0, tzinfo=dt.UTC)
MS = dt.timedelta(milliseconds=1)
SECOND = dt.timedelta(seconds=1)


@pytest.fixture
def clock_():
    with frozen_clock(T0) as frozen:
        yield frozen


@pytest.mark.django_db
def test_a_new_limit_starts_empty_and_refills_at_its_rate(clock_):
    bucket = limiter.set_rate("esp", 10)
    assert (bucket.rate, bucket.burst, bucket.tokens, bucket.updated_at) == (10, 10, 0, T0)

    assert limiter.take("esp", 3) == (0, 0.1)
    clock_.advance(100 * MS)
    assert limiter.take("esp", 3) == (1, 0.1)
    clock_.advance(300 * MS)
    assert limiter.take("esp", 3) == (3, 0.0)


@pytest.mark.django_db
def test_tokens_saved_up_are_capped_at_the_burst(clock_):
    limiter.set_rate("esp", 10, burst=5)
    clock_.advance(60 * SECOND)

    assert limiter.take("esp", 100)[0] == 5
    assert limiter.take("esp", 1) == (0, 0.1)


@pytest.mark.django_db
def test_a_partial_grant_says_how_long_until_the_next_token(clock_):
    limiter.set_rate("esp", 4, burst=10)
    clock_.advance(1250 * MS)  # 5 tokens

    granted, wait = limiter.take("esp", 8)

    assert granted == 5
    assert wait == pytest.approx(0.25)
    assert RateLimit.objects.get(key="esp").tokens == pytest.approx(0.0)


@pytest.mark.django_db
def test_rate_zero_and_an_unknown_key_are_unlimited(clock_):
    limiter.set_rate("esp", 0)

    assert limiter.take("esp", 1_000_000) == (1_000_000, 0.0)
    assert limiter.take("nobody-configured-this", 50) == (50, 0.0)
    assert limiter.reserve("esp", 1_000) == 0.0


@pytest.mark.django_db
def test_changing_the_rate_takes_effect_at_the_next_take(clock_):
    limiter.set_rate("esp", 1, burst=100)
    clock_.advance(10 * SECOND)
    assert limiter.take("esp", 100)[0] == 10

    limiter.set_rate("esp", 50)
    clock_.advance(SECOND)
    assert limiter.take("esp", 100)[0] == 50

    limiter.set_rate("esp", 2)
    clock_.advance(SECOND)
    assert limiter.take("esp", 100) == (2, 0.5)
    bucket = RateLimit.objects.get(key="esp")
    assert (bucket.rate, bucket.burst) == (2, 100)  # changing the rate keeps the burst


@pytest.mark.django_db
def test_raising_the_rate_does_not_credit_the_past_at_the_new_rate(clock_):
    limiter.set_rate("esp", 1, burst=100)
    clock_.advance(10 * SECOND)  # 10 tokens at 1/s

    limiter.set_rate("esp", 50)

    assert limiter.take("esp", 100)[0] == 10


@pytest.mark.django_db
def test_the_chunk_size_follows_the_rate(clock_):
    assert limiter.chunk_size_for("esp", 100) == 100
    limiter.set_rate("esp", 0)
    assert limiter.chunk_size_for("esp", 100) == 100
    limiter.set_rate("esp", 25.7)
    assert limiter.chunk_size_for("esp", 100) == 25
    limiter.set_rate("esp", 0.2)
    assert limiter.chunk_size_for("esp", 100) == 1
    limiter.set_rate("esp", 5000)
    assert limiter.chunk_size_for("esp", 100) == 100


@pytest.mark.django_db
def test_reserve_queues_callers_in_order_at_the_rate(clock_):
    limiter.set_rate("esp", 10, burst=1)

    # The bucket goes into debt: each caller waits one more token's time.
    assert [limiter.reserve("esp") for _ in range(3)] == [
        pytest.approx(0.1),
        pytest.approx(0.2),
        pytest.approx(0.3),
    ]
    clock_.advance(300 * MS)  # the debt is paid off
    assert limiter.reserve("esp") == pytest.approx(0.1)
    clock_.advance(60 * SECOND)  # saved up, at most the burst
    assert limiter.reserve("esp") == 0.0
    assert limiter.reserve("esp") == pytest.approx(0.1)


@pytest.mark.django_db
def test_reserve_is_free_without_a_limit(clock_):
    assert limiter.reserve("nobody-configured-this", 1000) == 0.0
    limiter.set_rate("esp", 0)
    assert limiter.reserve("esp", 1000) == 0.0
    assert RateLimit.objects.get(key="esp").tokens == 0.0


@pytest.mark.django_db
def test_is_limited_only_with_a_positive_rate(clock_):
    assert limiter.is_limited("esp") is False
    limiter.set_rate("esp", 0)
    assert limiter.is_limited("esp") is False
    limiter.set_rate("esp", 5)
    assert limiter.is_limited("esp") is True


@pytest.mark.django_db
def test_wait_for_token_returns_at_once_when_a_token_is_there(clock_):
    limiter.set_rate("esp", 10, burst=1)
    clock_.advance(SECOND)

    assert limiter.wait_for_token("esp", sleep=pytest.fail) is True


@pytest.mark.django_db
def test_wait_for_token_gives_up_when_told_to_stop(clock_):
    limiter.set_rate("esp", 1, burst=1)  # empty: the next token is a second away
    sleeps: list[float] = []

    assert limiter.wait_for_token("esp", should_stop=lambda: True, sleep=sleeps.append) is False
    assert sleeps == []


@pytest.mark.django_db
def test_wait_for_token_sleeps_until_its_turn(clock_):
    limiter.set_rate("esp", 50, burst=1)  # empty: a 20 ms wait
    started = time.monotonic()

    assert limiter.wait_for_token("esp") is True
    assert time.monotonic() - started >= 0.02
