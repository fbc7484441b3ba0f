"""RabbitMQ's publisher confirms, read per batch: which broker offers them, and how a batch's
acks and nacks count (no broker needed; tests/celery publishes to real brokers)."""

from __future__ import annotations

import pytest
from celery import Celery

from scheduler_app.celery.publishing import Confirms, offers_confirms


@pytest.mark.parametrize(
    "url",
    [
        "amqp://guest:guest@127.0.0.1:5672//",
        "pyamqp://guest:guest@127.0.0.1:5672//",
        "amqps://guest:guest@rabbitmq.example:5671//",
        "amqps://guest:guest@a.example:5671//;amqps://guest:guest@b.example:5671//",
    ],
    ids=["amqp", "pyamqp", "amqps", "amqps-failover"],
)
def test_rabbitmq_publishes_wait_for_confirms(url):
    """TLS (amqps://) is RabbitMQ too: a batch must count only what the broker confirmed."""
    with Celery("confirms", broker=url).connection_for_write() as connection:
        assert offers_confirms(connection)


def test_redis_has_no_confirms():
    with Celery("confirms", broker="redis://127.0.0.1:6379/0").connection_for_write() as connection:
        assert not offers_confirms(connection)


def test_a_batch_counts_once_every_tag_is_answered():
    confirms = Confirms()
    batch = range(1, 6)
    confirms.answer(2, False, acked=True)
    assert confirms.confirmed(batch) is None
    confirms.answer(4, True, acked=True)  # tags 1, 3 and 4
    assert confirms.confirmed(batch) is None
    confirms.answer(5, False, acked=True)
    assert confirms.confirmed(batch) == 5
    assert confirms.confirmed(batch) is None  # read once: the answers are forgotten


def test_a_nack_ends_the_confirmed_run_of_a_batch():
    """A refused publish and everything after it go back, even what was acked after it."""
    confirms = Confirms()
    confirms.answer(7, True, acked=True)  # an earlier batch: 1-7
    assert confirms.confirmed(range(1, 8)) == 7
    confirms.answer(9, False, acked=False)
    confirms.answer(12, True, acked=True)  # 8, 10, 11, 12 acked; 9 stays nacked
    assert confirms.confirmed(range(8, 13)) == 1


def test_unanswered_tags_are_forgotten_with_the_acked_run_before_them():
    confirms = Confirms()
    confirms.answer(2, True, acked=True)
    assert confirms.forget(range(1, 5)) == 2
    confirms.answer(4, False, acked=True)  # late answers for forgotten tags are dropped
    confirms.answer(6, True, acked=False)
    assert confirms.confirmed(range(5, 7)) == 0
    assert confirms._answers == {}
