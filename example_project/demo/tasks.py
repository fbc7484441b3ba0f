"""Demo tasks: an email, a task that fails now and then, and a slow one.

scheduler_app imports this module at startup (every installed app's tasks.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import time

from django.core.mail import EmailMessage

from scheduler_app import RetryPolicy, task
from scheduler_app.sends.audience import AudienceQuery, audience

logger = logging.getLogger(__name__)


class FlakyServiceError(Exception):
    """The pretend remote service failed; trying again may work."""


@task(
    name="demo.send_email",
    queue="emails",
    max_attempts=5,
    # SMTP and connection errors are OSErrors and worth retrying; a payload
    # missing a field (KeyError) fails at once instead.
    retry=RetryPolicy(retry_on=(OSError,)),
    timeout=30,
)
def send_email(job):
    """Send one email; payload: {"to": ..., "subject": ..., "body": ...}."""
    payload = job.payload
    message = EmailMessage(
        subject=payload["subject"],
        body=payload["body"],
        to=[payload["to"]],
        # Lets a provider that honours it drop the duplicate if a crashed
        # attempt already sent this message.
        headers={"Idempotency-Key": job.idempotency_key},
    )
    message.send()
    logger.info("demo email sent job=%s to=%s", job.job_id, payload["to"])


@task(
    name="demo.flaky",
    max_attempts=5,
    retry=RetryPolicy(
        base=dt.timedelta(seconds=1),
        cap=dt.timedelta(seconds=10),
        retry_on=(FlakyServiceError,),
    ),
)
def flaky(job):
    """Fail with probability payload["failure_rate"] (default 0.5); failures retry."""
    failure_rate = float(job.payload.get("failure_rate", 0.5))
    if random.random() < failure_rate:
        raise FlakyServiceError("Simulated outage of the pretend service.")
    logger.info("demo flaky job succeeded job=%s attempt=%s", job.job_id, job.attempt)


@task(name="demo.slow", queue="slow", timeout=120)
def slow(job):
    """Sleep payload["seconds"] (default 5) seconds."""
    seconds = float(job.payload.get("seconds", 5))
    time.sleep(seconds)
    logger.info("demo slow job done job=%s slept=%s", job.job_id, seconds)


@task(name="demo.cleanup")
def cleanup(job):
    """A recurring job: report what a cleanup up to its occurrence time would delete."""
    logger.info("demo cleanup job=%s cutoff=%s", job.job_id, job.scheduled_for.isoformat())


@audience("demo.subscribers")
def subscribers(params):
    """Every demo subscriber; used by the "Welcome newsletter" batch seed_demo creates."""
    from example_project.demo.models import Subscriber

    return AudienceQuery(
        queryset=Subscriber.objects.all(),
        key="id",
        address="email",
        timezone="timezone",
        context={"first_name": "first_name"},
    )


@task(name="demo.sync_orders", max_runtime=60)
def sync_orders(job):
    """Pretend to sync new orders from a shop since the last successful run (there are none).

    The cursor moves only when the run succeeds. Every run processes 0 orders,
    so after two runs the "suspicious success" alert opens (see the schedule
    "demo-sync-orders" in settings, and Alerts in the admin).
    """
    cursor = job.cursor("shop-orders")
    since = cursor.value or job.scheduled_for.isoformat()
    orders: list[dict] = []  # a real sync would fetch the orders changed since `since`
    cursor.advance(job.scheduled_for.isoformat(), processed=len(orders))
    logger.info("demo orders synced since=%s processed=%s", since, len(orders))
    return {"since": since}
