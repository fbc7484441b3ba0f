"""Publish claimed jobs to Celery, in batches, with confirms awaited per batch on RabbitMQ."""

from __future__ import annotations

import itertools
import logging
import time
import weakref
from collections.abc import Sequence

from celery import Celery
from kombu import Connection

from scheduler_app.celery.routing import celery_queue
from scheduler_app.celery.tasks import RUN_JOB, RUN_JOBS
from scheduler_app.worker.execution import ClaimedJob

logger = logging.getLogger("scheduler_app.celery")

#: A publish that fails is retried this briefly; after that the relay hands the job back.
RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}

#: Most seconds a batch waits for RabbitMQ's confirms; what is unconfirmed then goes back.
CONFIRM_TIMEOUT = 10.0


def offers_confirms(connection: Connection) -> bool:
    """Return whether the broker of ``connection`` confirms publishes (RabbitMQ, whatever
    the URL's scheme: amqp://, pyamqp://, amqps://). Redis has no confirms: a publish
    there returns once Redis has the message."""
    return connection.transport.driver_type == "amqp"


class Confirms:
    """The publisher confirms of one AMQP channel.

    Once a channel is in confirm mode, RabbitMQ numbers its publishes from 1
    and answers each with an ack (it has the message) or a nack (it refused
    it), one tag at a time or, with ``multiple``, every tag up to one.
    """

    def __init__(self) -> None:
        self.published = 0  # the tag of the channel's last publish
        self._answered_upto = 0  # every tag up to this one is answered
        self._answers: dict[int, bool] = {}  # tag -> acked, for tags not yet forgotten
        self._forgotten_upto = 0  # answers up to this tag are no longer wanted

    def answer(self, tag: int, multiple: bool, *, acked: bool) -> None:
        """Take the broker's ack (``acked``) or nack of ``tag``, or of every tag up to it."""
        if not multiple:
            if tag > self._forgotten_upto:
                self._answers.setdefault(tag, acked)
            return
        for earlier in range(max(self._answered_upto, self._forgotten_upto) + 1, tag + 1):
            self._answers.setdefault(earlier, acked)
        self._answered_upto = max(self._answered_upto, tag)

    def confirmed(self, tags: range) -> int | None:
        """Return how many of ``tags``, from the first, were acked before one was not;
        None while some are unanswered."""
        if any(tag not in self._answers for tag in tags):
            return None
        return self.forget(tags)

    def forget(self, tags: range) -> int:
        """Drop ``tags``' answers; return how many, from the first, were acked in a row."""
        acked = 0
        for tag in tags:
            if not self._answers.pop(tag, False):
                break
            acked += 1
        for tag in tags[acked:]:
            self._answers.pop(tag, None)
        self._forgotten_upto = max(self._forgotten_upto, tags[-1] if tags else 0)
        return acked


_confirms: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # channel -> Confirms


def confirms_of(channel) -> Confirms:
    """Return ``channel``'s Confirms, putting the channel in confirm mode on first use."""
    if channel not in _confirms:
        confirms = Confirms()
        channel.confirm_select()
        channel.events["basic_ack"].add(
            lambda tag, multiple: confirms.answer(tag, multiple, acked=True)
        )
        channel.events["basic_nack"].add(
            lambda tag, multiple: confirms.answer(tag, multiple, acked=False)
        )
        _confirms[channel] = confirms
    return _confirms[channel]


def messages_of(
    jobs: Sequence[tuple[str, ClaimedJob]], jobs_per_message: int
) -> list[tuple[str, list[ClaimedJob]]]:
    """Split (queue, job) pairs, in order, into (queue, jobs) messages: each run of one
    queue's jobs into as few messages as ``jobs_per_message`` allows, of even sizes (10
    jobs at most 4 a message: 4, 3, 3), so the Celery workers' threads share them evenly."""
    messages: list[tuple[str, list[ClaimedJob]]] = []
    for queue, run in itertools.groupby(jobs, key=lambda pair: pair[0]):
        batch = [job for _, job in run]
        count = -(-len(batch) // jobs_per_message)  # ceil
        size, larger = divmod(len(batch), count)
        start = 0
        for n in range(count):
            end = start + size + (n < larger)
            messages.append((queue, batch[start:end]))
            start = end
    return messages


def publish_jobs(
    app: Celery,
    jobs: Sequence[tuple[str, ClaimedJob]],
    *,
    lease_seconds: float,
    jobs_per_message: int = 1,
) -> int:
    """Publish (queue, job) pairs in order over one producer, up to ``jobs_per_message``
    jobs a message (see messages_of); return how many jobs, from the first, the broker
    took.

    On RabbitMQ the messages go out back to back and the batch then waits
    once for their confirms (up to CONFIRM_TIMEOUT). Stops at the first
    publish the broker refuses or leaves unconfirmed (logged): the jobs from
    there on count as unpublished, and the caller hands them back (a message
    of theirs that does arrive is refused, its token spent).
    """
    messages = messages_of(jobs, jobs_per_message)
    published = 0  # messages
    try:
        with app.producer_or_acquire() as producer:
            channel = producer.channel
            confirms = confirms_of(channel) if offers_confirms(producer.connection) else None
            first = confirms.published + 1 if confirms else 0
            for queue, message in messages:
                app.send_task(
                    *_task_of(message),
                    kwargs={"lease_seconds": lease_seconds},
                    queue=celery_queue(queue),
                    producer=producer,
                    retry_policy=RETRY_POLICY,
                )
                published += 1
                if confirms:
                    confirms.published += 1
            if confirms:
                published = await_confirms(
                    producer, channel, confirms, range(first, first + published)
                )
    except Exception:
        # Whatever the broker or its client raise: the job stays ours and goes back.
        logger.exception(
            "publish failed, handing back the rest of the batch published=%s unpublished=%s",
            sum(len(message) for _, message in messages[:published]),
            sum(len(message) for _, message in messages[published:]),
        )
    return sum(len(message) for _, message in messages[:published])


def _task_of(message: list[ClaimedJob]) -> tuple[str, tuple]:
    """Return the task and arguments of a message: run_job for one job, which the Celery
    workers of every release run (relays and Celery workers upgrade in any order), run_jobs
    for several."""
    if len(message) == 1:
        return RUN_JOB, (message[0].id, message[0].lease_token)
    return RUN_JOBS, ([[job.id, job.lease_token] for job in message],)


def await_confirms(producer, channel, confirms: Confirms, tags: range) -> int:
    """Wait for RabbitMQ to answer ``tags``; return how many, from the first, it acked."""
    if producer.channel is not channel:
        # The producer reconnected mid-batch: the new channel numbers its publishes anew and
        # is not in confirm mode. Nothing of the batch counts as confirmed.
        logger.warning("publish channel replaced mid-batch, handing back batch=%s", len(tags))
        return 0
    give_up = time.monotonic() + CONFIRM_TIMEOUT
    while (acked := confirms.confirmed(tags)) is None:
        remaining = give_up - time.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError
            channel.connection.drain_events(timeout=remaining)
        except TimeoutError:
            acked = confirms.forget(tags)
            logger.warning(
                "publisher confirms not all received within %ss, handing back the unconfirmed "
                "confirmed=%s unconfirmed=%s",
                CONFIRM_TIMEOUT,
                acked,
                len(tags) - acked,
            )
            return acked
    if acked < len(tags):
        logger.warning(
            "RabbitMQ refused a publish (nack), handing back the rest of the batch "
            "confirmed=%s refused_or_after=%s",
            acked,
            len(tags) - acked,
        )
    return acked
