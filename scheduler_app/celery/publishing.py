"""Publish claimed jobs to Celery, in batches, with confirms where the broker offers them."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from celery import Celery

from scheduler_app.celery.routing import celery_queue
from scheduler_app.celery.tasks import RUN_JOB
from scheduler_app.worker.execution import ClaimedJob

logger = logging.getLogger("scheduler_app.celery")

#: A publish that fails is retried this briefly; after that the relay hands the job back.
RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}


def ask_for_confirms(app: Celery) -> None:
    """Make publishes to RabbitMQ wait for the broker's confirm (py-amqp's confirm_publish).

    Redis offers no confirms: a publish there returns once Redis has the message.
    """
    # The transport kombu picks for the URL (amqp://, amqps://, pyamqp://, or Celery's
    # default); making it opens no connection.
    with app.connection_for_write() as connection:
        driver = connection.transport.driver_type
    if driver == "amqp":
        options = dict(app.conf.broker_transport_options or {})
        options.setdefault("confirm_publish", True)
        app.conf.broker_transport_options = options


def publish_jobs(
    app: Celery, jobs: Sequence[tuple[str, ClaimedJob]], *, lease_seconds: float
) -> int:
    """Publish (queue, job) pairs in order over one producer; return how many were published.

    Stops at the first publish the broker refuses (logged): the jobs from
    there on were not published, and the caller hands them back.
    """
    published = 0
    try:
        with app.producer_or_acquire() as producer:
            for queue, job in jobs:
                app.send_task(
                    RUN_JOB,
                    args=(job.id, job.lease_token),
                    kwargs={"lease_seconds": lease_seconds},
                    queue=celery_queue(queue),
                    producer=producer,
                    retry_policy=RETRY_POLICY,
                )
                published += 1
    except Exception:
        # Whatever the broker or its client raise: the job stays ours and goes back.
        logger.exception(
            "publish failed, handing back the rest of the batch published=%s unpublished=%s",
            published,
            len(jobs) - published,
        )
    return published
