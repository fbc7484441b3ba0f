"""The relay asks RabbitMQ for publisher confirms whatever the URL's scheme (no broker needed)."""

from __future__ import annotations

import pytest
from celery import Celery

from scheduler_app.celery.publishing import ask_for_confirms


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
    """TLS (amqps://) is RabbitMQ too: a publish must return only once the broker has it."""
    app = Celery("confirms", broker=url)
    ask_for_confirms(app)
    assert app.conf.broker_transport_options["confirm_publish"] is True


def test_redis_has_no_confirms_to_ask_for():
    app = Celery("confirms", broker="redis://127.0.0.1:6379/0")
    ask_for_confirms(app)
    assert "confirm_publish" not in (app.conf.broker_transport_options or {})
