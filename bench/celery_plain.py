"""Plain Celery, for bench/celery_relay.py's baseline: ``celery -A celery_plain worker``.

One no-op task, published with ``send_task()`` (what ``apply_async()`` calls) and
configured as the Celery executor's workers are (acks late, prefetch 1, no result
backend). It counts itself with one Redis INCR so the bench knows when the last one ran:
the baseline pays that round trip, which the executor's no-op jobs do not.
"""

from __future__ import annotations

import os

import redis
from celery import Celery

COUNTER_URL = "redis://127.0.0.1:6379/6"

app = Celery("bench_plain")
app.conf.update(
    broker_url=os.environ.get("SCHEDULER_TEST_BROKER", "redis://127.0.0.1:6379/5"),
    broker_connection_retry_on_startup=True,
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
)
counter = redis.Redis.from_url(COUNTER_URL)


@app.task(name="bench.noop")
def noop(key: str) -> None:
    """Do nothing but count the run under ``key``."""
    counter.incr(key)
