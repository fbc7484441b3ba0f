"""The Celery executor with real Celery workers on RabbitMQ and on Redis (never eager mode)."""

from __future__ import annotations

import datetime as dt
import signal
import socket

import pytest
import redis
from django.db.models import Count
from kombu import Queue

from scheduler_app import clock, controls
from scheduler_app.cancellation import CancelOutcome, cancel
from scheduler_app.celery import RUN_JOB
from scheduler_app.celery.publishing import publish_jobs
from scheduler_app.db import backend
from scheduler_app.models import Job, JobAttempt, SendBatch
from scheduler_app.scheduling import schedule, schedule_many
from scheduler_app.worker import leases
from scheduler_app.worker.execution import ClaimedJob
from tests.celery.conftest import LEASE
from tests.celery_app import make_app
from tests.helpers import running_worker, wait_for_status, wait_until
from tests.sends_processes.conftest import assert_completed_once, batch_status, make_batch
from tests.testapp.models import Run

pytestmark = [
    pytest.mark.celery,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]

Status = Job.Status
Outcome = JobAttempt.Outcome


def all_finished() -> bool:
    return not Job.objects.unfinished().exists()


def claim_as(worker: str, job: Job) -> ClaimedJob:
    """Claim ``job`` as a relay named ``worker`` would (the same claim statement)."""
    rows = backend().claim_jobs(
        worker=worker, queues=[job.queue], limit=1, lease=dt.timedelta(seconds=30)
    )
    assert [row[0] for row in rows] == [job.pk]
    return ClaimedJob.from_row(rows[0])


def test_jobs_drain_exactly_once(broker, relay, celery_worker):
    """1,000 jobs relayed to a Celery worker each run exactly once, in the Celery worker."""
    count = 1000
    job_ids = {job.pk for job in schedule_many("tests.record", [{}] * count)}
    relay_process = relay()
    worker = celery_worker()
    wait_until(all_finished, timeout=90, interval=0.2, message="every job to finish")

    assert Job.objects.filter(status=Status.SUCCEEDED).count() == count
    assert set(Run.objects.values_list("job_id", flat=True)) == job_ids
    assert not Run.objects.values("job_id").annotate(n=Count("id")).filter(n__gt=1).exists()
    assert set(Run.objects.values_list("pid", flat=True)) == {worker.pid}
    assert relay_process.pid != worker.pid
    # Jobs waited in the broker far longer than the 2 s lease: the relay renewed them. A
    # first attempt that succeeds writes no attempt row: any row is an expiry or hand-back.
    assert not JobAttempt.objects.exists(), "leases expired or jobs were handed back"
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    worker_ids = set(Job.objects.values_list("worker_id", flat=True))
    assert all(worker_id.endswith(":%s" % worker.pid) for worker_id in worker_ids), worker_ids


def test_a_relay_publishing_several_jobs_a_message_runs_each_once(broker, relay, celery_worker):
    """With CELERY_JOBS_PER_MESSAGE, a backlog goes out several jobs a message, and each job
    runs exactly once, started in turn by the Celery worker."""
    count = 200
    job_ids = {job.pk for job in schedule_many("tests.record", [{}] * count)}
    relay(env={"SCHEDULER_CELERY_JOBS_PER_MESSAGE": "8"})
    worker = celery_worker()
    wait_until(all_finished, timeout=60, interval=0.1, message="every job to finish")

    assert sorted(Run.objects.values_list("job_id", flat=True)) == sorted(job_ids)
    assert set(Run.objects.values_list("pid", flat=True)) == {worker.pid}
    assert not JobAttempt.objects.exists(), "leases expired or jobs were handed back"
    assert set(Job.objects.values_list("status", "attempts")) == {(Status.SUCCEEDED, 1)}


def test_a_run_job_message_an_older_relay_left_in_the_broker_still_runs(broker, celery_worker):
    """Relays before CELERY_JOBS_PER_MESSAGE published run_job(job id, token): a Celery worker
    upgraded first still runs those messages, under its own worker id."""
    job = schedule("tests.record", {})
    claimed = claim_as("test-relay", job)
    make_app(broker.url).send_task(
        RUN_JOB,
        args=(claimed.id, claimed.lease_token),
        kwargs={"lease_seconds": 2.0},
        queue=broker.queue(),
    )

    worker = celery_worker()
    stored = wait_for_status(job, Status.SUCCEEDED)

    assert Run.objects.filter(job_id=job.pk).count() == 1
    assert stored.worker_id.endswith("@%s:%s" % (socket.gethostname(), worker.pid))


def test_jobs_are_split_evenly_into_messages(broker):
    """Ten jobs at most four a message: three messages, of 4, 3 and 3 jobs."""
    jobs = [claim_as("test-relay", schedule("tests.record", {"n": n})) for n in range(10)]
    app = make_app(broker.url)

    published = publish_jobs(
        app, [("default", job) for job in jobs], lease_seconds=2.0, jobs_per_message=4
    )

    assert published == 10
    assert messages_waiting(app, broker) == 3


def test_one_job_a_message_goes_out_as_the_task_every_release_runs(broker):
    """At the default of one job a message the relay publishes run_job(job id, token), the
    task Celery workers of earlier releases know, so relays and Celery workers may be
    upgraded in any order; run_jobs is for messages of several jobs."""
    job = claim_as("test-relay", schedule("tests.record", {}))
    app = make_app(broker.url)

    assert publish_jobs(app, [("default", job)], lease_seconds=2.0) == 1

    with app.connection_for_write() as conn:
        channel = conn.default_channel
        message = channel.basic_get(broker.queue(), no_ack=True)
        if not hasattr(message, "decode"):  # py-amqp's own message: kombu's from it
            message = channel.message_to_python(message)
        args, kwargs, _embed = message.decode()
    assert (message.headers["task"], args) == (RUN_JOB, [job.id, job.lease_token])
    assert kwargs == {"lease_seconds": 2.0}


def messages_waiting(app, broker) -> int:
    """Return how many messages wait in ``broker``'s default queue."""
    if broker.name == "redis":
        return redis.Redis.from_url(broker.url).llen(broker.queue())
    with app.connection_for_write() as conn:
        return conn.default_channel.queue_declare(broker.queue(), passive=True).message_count


@pytest.mark.parametrize("broker", ["rabbitmq"], indirect=True)
def test_a_celery_worker_killed_mid_message_leaves_its_unstarted_jobs_to_run_once(
    broker, celery_worker, tmp_path
):
    """A Celery worker SIGKILLed while the first job of a three-job message runs: RabbitMQ
    delivers the message again, the first job's delivery is refused (it started), and the
    two it never started run once each, without using an attempt."""
    flag = tmp_path / "release"
    blocker = claim_as("test-relay", schedule("tests.block_until_flag", {"flag": str(flag)}))
    rest = [claim_as("test-relay", schedule("tests.record", {"n": n})) for n in range(2)]
    app = make_app(broker.url)
    assert (
        publish_jobs(
            app,
            [("default", job) for job in [blocker, *rest]],
            lease_seconds=30.0,
            jobs_per_message=3,
        )
        == 3
    )
    doomed = celery_worker()
    wait_until(lambda: Run.objects.filter(job_id=blocker.id).exists(), message="the first job")

    doomed.kill()
    assert not Run.objects.filter(job_id__in=[job.id for job in rest]).exists()
    flag.touch()
    rescuer = celery_worker()
    for job in rest:
        wait_for_status(Job.objects.get(pk=job.id), Status.SUCCEEDED)
    rescuer.wait_for_output("delivery refused, its lease token is spent")

    assert list(Run.objects.filter(job_id__in=[job.id for job in rest]).values_list("pid")) == [
        (rescuer.pid,),
        (rescuer.pid,),
    ]
    assert set(Job.objects.filter(pk__in=[job.id for job in rest]).values_list("attempts")) == {
        (1,)
    }
    assert Run.objects.filter(job_id=blocker.id).count() == 1


@pytest.mark.postgres_only
def test_an_outcome_is_recorded_after_the_database_dropped_the_connection(
    broker, relay, celery_worker
):
    """The handler succeeded, then the connection went: the Celery task writes the outcome
    on a new connection, as runworker does, instead of leaving the job to its lease's
    expiry (which charges the attempt: with one attempt, the job fails)."""
    job = schedule("tests.loses_its_connection", {})
    relay()
    celery_worker()

    stored = wait_for_status(job, Status.SUCCEEDED, Status.FAILED, timeout=30)

    assert (stored.status, stored.result) == (Status.SUCCEEDED, "done"), stored.last_error
    assert Run.objects.filter(job_id=job.pk).count() == 1


def test_sigkill_of_the_celery_worker_mid_job_runs_it_again_after_its_lease(
    broker, relay, celery_worker, tmp_path
):
    """A Celery worker SIGKILLed mid-job loses nothing: after its lease the job runs again."""
    flag = tmp_path / "release"
    job = schedule("tests.block_until_flag", {"flag": str(flag)})
    relay()
    doomed = celery_worker()
    wait_until(lambda: Run.objects.filter(job_id=job.pk).exists(), message="the job to start")

    doomed.kill()
    assert doomed.proc.returncode == -signal.SIGKILL
    flag.touch()
    rescuer = celery_worker()
    wait_for_status(job, Status.SUCCEEDED, timeout=30)

    assert list(Run.objects.filter(job_id=job.pk).values_list("attempt", "pid")) == [
        (1, doomed.pid),
        (2, rescuer.pid),
    ]
    outcomes = JobAttempt.objects.filter(job_id=job.pk).order_by("attempt")
    assert list(outcomes.values_list("attempt", "outcome")) == [
        (1, Outcome.LEASE_EXPIRED),
        (2, Outcome.SUCCEEDED),
    ]


def test_a_duplicate_delivery_runs_the_handler_once(broker, celery_worker):
    """The same message delivered twice: the first delivery runs it, the second is refused."""
    job = schedule("tests.record", {})
    claimed = claim_as("test-relay", job)
    app = make_app(broker.url)
    assert publish_jobs(app, [("default", claimed)] * 2, lease_seconds=float(LEASE)) == 2

    worker = celery_worker()
    wait_for_status(job, Status.SUCCEEDED)
    worker.wait_for_output("delivery refused, its lease token is spent")

    assert Run.objects.filter(job_id=job.pk).count() == 1
    history = Job.objects.get(pk=job.pk).attempt_history()
    assert [(a.attempt, a.outcome) for a in history] == [(1, Outcome.SUCCEEDED)]


def test_a_job_cancelled_before_publishing_never_runs(broker, relay, celery_worker):
    """A cancelled job is never published; a job scheduled after it runs."""
    cancelled = schedule("tests.record", {})
    assert cancel(cancelled.pk) == CancelOutcome.CANCELLED
    later = schedule("tests.record", {})
    relay()
    celery_worker()
    wait_for_status(later, Status.SUCCEEDED)

    assert not Run.objects.filter(job_id=cancelled.pk).exists()
    assert Job.objects.get(pk=cancelled.pk).status == Status.CANCELLED


def test_a_kill_switch_flipped_after_publishing_hands_the_job_back(broker, celery_worker):
    """A job published before its queue was paused is handed back unrun, its attempt refunded."""
    job = schedule("tests.record", {})
    claimed = claim_as("test-relay", job)
    assert publish_jobs(make_app(broker.url), [("default", claimed)], lease_seconds=2.0) == 1
    controls.pause("queue", "default", reason="Stop the default queue.")

    celery_worker()
    wait_until(
        lambda: JobAttempt.objects.filter(job_id=job.pk, outcome=Outcome.INTERRUPTED).exists(),
        message="the hand-back",
    )
    job.refresh_from_db()
    assert (job.status, job.attempts, job.worker_id) == (Status.PENDING, 0, "")
    assert "kill switch" in job.last_error
    assert not Run.objects.filter(job_id=job.pk).exists()


def test_a_lost_message_is_published_again(broker, relay, celery_worker):
    """A message lost in the broker: the relay hands the job back after CELERY_MAX_BROKER_WAIT
    and publishes it again; the job runs once."""
    job = schedule("tests.record", {})
    relay_process = relay(env={"SCHEDULER_CELERY_MAX_BROKER_WAIT": "1"})
    wait_until(
        lambda: Job.objects.filter(pk=job.pk, status=Status.RUNNING).exists(),
        message="the job to be published",
    )
    with make_app(broker.url).connection_for_write() as conn:

        def lose_the_message() -> int:
            channel = conn.channel()
            try:
                return channel.queue_purge(broker.queue()) or 0
            except conn.channel_errors:
                return 0  # RabbitMQ: the relay has not declared the queue yet
            finally:
                conn.maybe_close_channel(channel)

        wait_until(lose_the_message, message="the message to be lost")
    relay_process.wait_for_output("published job not started within CELERY_MAX_BROKER_WAIT")
    celery_worker()
    wait_for_status(job, Status.SUCCEEDED)

    assert Run.objects.filter(job_id=job.pk).count() == 1


def test_a_send_batch_completes_through_celery(broker, relay, celery_worker):
    """A bulk send's lanes run as Celery jobs: every recipient is sent exactly once."""
    recipients = 300
    batch = make_batch(recipients)
    relay()
    celery_worker()
    wait_until(
        lambda: batch_status(batch) == SendBatch.Status.COMPLETED,
        timeout=60,
        interval=0.1,
        message="the batch to complete",
    )
    assert_completed_once(batch, recipients)


@pytest.mark.parametrize("broker", ["redis"], indirect=True)
def test_a_publish_the_broker_refuses_hands_the_job_back(broker, relay):
    """With no broker to publish to, the relay hands each claimed job back: never lost."""
    job = schedule("tests.record", {})
    unreachable = relay(env={"SCHEDULER_TEST_BROKER": "redis://127.0.0.1:1/0"})
    unreachable.wait_for_output("publish failed, handing back the rest of the batch")
    wait_until(
        lambda: JobAttempt.objects.filter(job_id=job.pk, outcome=Outcome.INTERRUPTED).exists(),
        message="the hand-back",
    )
    unreachable.kill()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.worker_id) == (Status.PENDING, 0, "")
    assert job.last_error.endswith("could not publish it to Celery.")


@pytest.mark.parametrize("broker", ["rabbitmq"], indirect=True)
def test_a_batch_counts_only_what_rabbitmq_confirmed(broker):
    """RabbitMQ confirms a batch once it is published; a message it refuses (nack: a full
    queue that rejects publishes) and the rest of the batch count as unpublished, so the
    relay hands them back."""
    jobs = [claim_as("test-relay", schedule("tests.record", {"n": n})) for n in range(3)]
    app = make_app(broker.url)
    assert publish_jobs(app, [("default", job) for job in jobs], lease_seconds=2.0) == 3

    full = broker.queue("emails")
    limited = make_app(broker.url)  # its queues are read on first publish: set them before
    limited.conf.task_queues = [
        Queue(
            full,
            routing_key=full,
            queue_arguments={"x-max-length": 1, "x-overflow": "reject-publish"},
        )
    ]
    assert publish_jobs(limited, [("emails", job) for job in jobs], lease_seconds=2.0) == 1
    with app.connection_for_write() as conn:
        assert conn.default_channel.queue_declare(broker.queue(), passive=True).message_count == 3
        assert conn.default_channel.queue_declare(full, passive=True).message_count == 1


@pytest.mark.parametrize("broker", ["redis"], indirect=True)
def test_a_relay_killed_with_a_backlog_in_the_broker_costs_its_jobs_no_attempt(broker, relay):
    """A relay SIGKILLed while the job it published waits in the broker: once its lease has
    lapsed, the rescue tells it (never started by a Celery worker) from a started job and
    hands it back without using an attempt, so a max_attempts=1 job still runs."""
    job = schedule("tests.record", {}, max_attempts=1)
    doomed = relay("--worker-id", "relay-doomed")
    backlog = redis.Redis.from_url(broker.url)
    wait_until(lambda: backlog.llen(broker.queue()), message="the job's message in the broker")
    doomed.kill()
    Job.objects.filter(pk=job.pk).update(lease_expires_at=clock.now() - dt.timedelta(seconds=1))

    assert leases.rescue_expired("test") == 1
    job.refresh_from_db()
    reason = "%s claimed it and no worker started it; handed back without using an attempt."
    assert (job.status, job.attempts, job.last_error.endswith(reason % "relay-doomed")) == (
        Status.PENDING,
        0,
        True,
    )
    assert list(job.recorded_attempts.values_list("attempt", "outcome", "worker_id")) == [
        (1, Outcome.INTERRUPTED, "relay-doomed")
    ]
    with running_worker():
        ran = wait_for_status(job, Status.SUCCEEDED, Status.FAILED)
    assert (ran.status, ran.attempts) == (Status.SUCCEEDED, 1)
