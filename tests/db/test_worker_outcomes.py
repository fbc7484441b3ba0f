"""What a real in-process Worker records for each way an attempt can end.

Each test runs ``Worker.run()`` in a thread against the test database and
waits for the rows it expects. Time-based behaviour (backoff, retry later,
budgets) uses the real clock: the tests read the resulting rows (run_at
relative to the attempt's finished_at) instead of waiting, and move a row's
run_at into the past to make its retry due now.
"""

from __future__ import annotations

import collections
import datetime as dt
import email.utils
import itertools
import time

import pytest

from scheduler_app import RetryLater, RetryPolicy, clock, schedule, task
from scheduler_app.models import Job, JobAttempt
from scheduler_app.signals import job_failed
from tests.helpers import running_worker, wait_for_status, wait_until

SECOND = dt.timedelta(seconds=1)
MS = dt.timedelta(milliseconds=1)
Status = Job.Status
Outcome = JobAttempt.Outcome

# Backoff so long that a retry never becomes due by itself during a test.
SLOW_RETRY = RetryPolicy(base=dt.timedelta(minutes=30), cap=dt.timedelta(hours=2))
# Backoff so short that retries run straight away.
FAST_RETRY = RetryPolicy(base=10 * MS, cap=SECOND)

# Handler calls per job id; handlers use it to behave differently on a rerun.
CALLS: collections.Counter[int] = collections.Counter()
CONTEXTS: dict[int, list] = collections.defaultdict(list)


class Transient(ConnectionError):
    pass


@task(name="tests.outcomes.echo")
def echo(ctx):
    return {"echo": ctx.payload, "attempt": ctx.attempt}


@task(name="tests.outcomes.flaky_slow", max_attempts=3, retry=SLOW_RETRY)
def flaky_slow(ctx):
    raise Transient("provider flaked on attempt %s" % ctx.attempt)


@task(name="tests.outcomes.always_down", max_attempts=3, retry=FAST_RETRY)
def always_down(ctx):
    raise Transient("provider down")


@task(
    name="tests.outcomes.not_retryable",
    max_attempts=5,
    retry=RetryPolicy(base=10 * MS, retry_on=(ConnectionError,)),
)
def not_retryable(ctx):
    raise ValueError("bad address %r" % ctx.payload["to"])


@task(name="tests.outcomes.retry_later", max_attempts=3, retry=SLOW_RETRY)
def retry_later(ctx):
    CALLS[ctx.job_id] += 1
    if CALLS[ctx.job_id] > 1 and ctx.payload.get("then_succeed"):
        return "sent"
    if "retry_after" in ctx.payload:
        raise RetryLater(retry_after=ctx.payload["retry_after"])
    raise RetryLater(delay=ctx.payload["delay"])


@task(
    name="tests.outcomes.retry_later_budget",
    max_attempts=3,
    retry=RetryPolicy(
        base=dt.timedelta(minutes=30),
        cap=dt.timedelta(hours=2),
        retry_later_budget=dt.timedelta(seconds=60),
    ),
)
def retry_later_budget(ctx):
    raise RetryLater(delay=ctx.payload["delay"])


@task(name="tests.outcomes.too_slow", max_attempts=2, timeout=0.2, retry=FAST_RETRY)
def too_slow(ctx):
    time.sleep(0.6)
    return "finished late"


@task(name="tests.outcomes.context", max_attempts=3, retry=FAST_RETRY, payload_versions=(1, 2))
def record_context(ctx):
    CONTEXTS[ctx.job_id].append(ctx)
    if ctx.payload.get("fail_first") and ctx.attempt == 1:
        raise Transient("first attempt fails")
    return "ok"


@task(name="tests.outcomes.flaky", max_attempts=2, retry=FAST_RETRY)
def flaky(ctx):
    CALLS[ctx.job_id] += 1
    if ctx.payload.get("defer_first") and CALLS[ctx.job_id] == 1:
        raise RetryLater(delay=0)
    if ctx.attempt <= ctx.payload.get("fail_times", 0):
        raise Transient("attempt %s fails" % ctx.attempt)
    return "ok"


# --- helpers --------------------------------------------------------------------------------


@pytest.fixture
def worker(transactional_db):
    with running_worker() as running:
        yield running


@pytest.fixture
def failures():
    """Collect what a real job_failed receiver gets."""
    received: list[dict] = []

    def receiver(sender, **kwargs):
        received.append(
            {
                "sender": sender,
                "job_id": kwargs["job_id"],
                "task_name": kwargs["task_name"],
                "error": kwargs["error"],
            }
        )

    job_failed.connect(receiver, weak=False, dispatch_uid="tests.outcomes.failures")
    yield received
    job_failed.disconnect(dispatch_uid="tests.outcomes.failures")


def attempts_of(job):
    return Job.objects.get(pk=job.pk).attempt_history()


def wait_for_attempts(job, count, *, timeout=20.0):
    """Wait until ``job`` has ``count`` recorded attempts; return the job as stored."""
    wait_until(
        lambda: JobAttempt.objects.filter(job_id=job.pk).count() >= count,
        timeout=timeout,
        message="%s attempt(s) of job %s" % (count, job.pk),
    )
    return Job.objects.get(pk=job.pk)


def make_due(job):
    """Move a pending job's next attempt into the past so the worker claims it now."""
    updated = Job.objects.filter(pk=job.pk, status=Status.PENDING).update(
        run_at=clock.now() - SECOND
    )
    assert updated == 1


# --- success ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_success_records_status_result_and_one_attempt(worker):
    job = schedule("tests.outcomes.echo", {"n": 7})

    stored = wait_for_status(job, Status.SUCCEEDED)

    assert stored.result == {"echo": {"n": 7}, "attempt": 1}
    assert stored.attempts == 1
    assert stored.last_error == ""
    # The job row alone tells a first attempt that succeeded: no history row.
    assert stored.worker_id == worker.id and stored.lease_expires_at is None
    assert not JobAttempt.objects.filter(job_id=job.pk).exists()
    assert stored.started_at is not None
    assert stored.started_at <= stored.finished_at
    [attempt] = attempts_of(stored)
    assert attempt.outcome == Outcome.SUCCEEDED
    assert attempt.attempt == 1
    assert attempt.task_name == "tests.outcomes.echo"
    assert attempt.worker_id == worker.id
    assert attempt.due_at == stored.scheduled_for == job.scheduled_for
    assert attempt.started_at == stored.started_at
    assert attempt.finished_at == stored.finished_at
    assert attempt.error == ""


# --- retries ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_retryable_error_reschedules_within_backoff_and_counts_the_attempt(worker):
    job = schedule("tests.outcomes.flaky_slow")

    for number in (1, 2):
        stored = wait_for_attempts(job, number)
        attempt = attempts_of(job)[-1]

        assert stored.status == Status.PENDING
        assert stored.attempts == number
        assert stored.finished_at is None
        assert attempt.attempt == number
        assert attempt.outcome == Outcome.RETRIED
        wait = stored.run_at - attempt.finished_at
        assert dt.timedelta(0) <= wait <= SLOW_RETRY.max_backoff(number)
        assert stored.last_error.startswith(
            "Transient: provider flaked on attempt %s\n\nTraceback (most recent call last):\n"
            % number
        )
        assert 'raise Transient("provider flaked on attempt %s" % ctx.attempt)' in stored.last_error
        assert attempt.error == stored.last_error
        make_due(job)


@pytest.mark.django_db(transaction=True)
def test_last_retryable_failure_fails_the_job_and_sends_job_failed_once(failures):
    job = schedule("tests.outcomes.always_down")

    with running_worker():
        wait_for_status(job, Status.FAILED)
    # The worker has stopped: every outcome it had is recorded, every signal sent.
    stored = Job.objects.get(pk=job.pk)

    assert stored.attempts == 3
    assert stored.finished_at is not None
    assert stored.last_error.startswith("Transient: provider down\n\nTraceback")
    history = attempts_of(job)
    assert [(a.attempt, a.outcome) for a in history] == [
        (1, Outcome.RETRIED),
        (2, Outcome.RETRIED),
        (3, Outcome.FAILED),
    ]
    # Each retry became due within the backoff bound after the failed attempt.
    for failed, next_attempt in itertools.pairwise(history):
        assert dt.timedelta(0) <= next_attempt.due_at - failed.finished_at
        assert next_attempt.due_at - failed.finished_at <= FAST_RETRY.max_backoff(failed.attempt)
    assert failures == [
        {
            "sender": Job,
            "job_id": job.pk,
            "task_name": "tests.outcomes.always_down",
            "error": stored.last_error,
        },
    ]


@pytest.mark.django_db(transaction=True)
def test_non_retryable_error_fails_at_once(failures):
    job = schedule("tests.outcomes.not_retryable", {"to": "nobody@"})

    with running_worker():
        wait_for_status(job, Status.FAILED)
    stored = Job.objects.get(pk=job.pk)

    assert stored.attempts == 1
    assert stored.max_attempts == 5
    assert stored.last_error.startswith("ValueError: bad address 'nobody@'\n\nTraceback")
    assert [(a.attempt, a.outcome) for a in attempts_of(job)] == [(1, Outcome.FAILED)]
    assert [(f["job_id"], f["task_name"]) for f in failures] == [
        (job.pk, "tests.outcomes.not_retryable")
    ]


# --- retry later ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_retry_later_defers_without_using_an_attempt(worker):
    job = schedule("tests.outcomes.retry_later", {"delay": 30, "then_succeed": True})

    stored = wait_for_attempts(job, 1)
    [attempt] = attempts_of(job)

    assert stored.status == Status.PENDING
    assert stored.attempts == 0
    assert attempt.attempt == 1
    assert attempt.outcome == Outcome.DEFERRED
    assert attempt.error == stored.last_error == "retry later in 30.0s"
    assert stored.run_at - attempt.finished_at == 30 * SECOND
    # The budget runs from the first deferral (default budget: one hour).
    assert stored.retry_later_deadline == attempt.finished_at + dt.timedelta(hours=1)

    make_due(job)
    stored = wait_for_status(job, Status.SUCCEEDED)

    assert stored.attempts == 1
    assert stored.result == "sent"
    assert [(a.attempt, a.outcome) for a in attempts_of(job)] == [
        (1, Outcome.DEFERRED),
        (1, Outcome.SUCCEEDED),
    ]


@pytest.mark.django_db(transaction=True)
def test_retry_later_with_retry_after_seconds(worker):
    job = schedule("tests.outcomes.retry_later", {"retry_after": "120"})

    stored = wait_for_attempts(job, 1)
    [attempt] = attempts_of(job)

    assert stored.status == Status.PENDING
    assert stored.attempts == 0
    assert attempt.outcome == Outcome.DEFERRED
    assert stored.run_at - attempt.finished_at == 120 * SECOND


@pytest.mark.django_db(transaction=True)
def test_retry_later_with_retry_after_http_date(worker):
    # HTTP dates have whole seconds: round up so the date is at least 60s ahead.
    when = (clock.now() + 61 * SECOND).replace(microsecond=0)
    job = schedule(
        "tests.outcomes.retry_later",
        {"retry_after": email.utils.format_datetime(when, usegmt=True)},
    )

    stored = wait_for_attempts(job, 1)
    [attempt] = attempts_of(job)

    assert stored.status == Status.PENDING
    assert stored.attempts == 0
    assert attempt.outcome == Outcome.DEFERRED
    # run_at is the date itself, give or take the handler's own runtime and the claim's
    # round trip (the worker measures from the database's clock as its claim read it).
    assert when - SECOND / 10 <= stored.run_at <= when + SECOND
    assert stored.run_at - attempt.finished_at > 55 * SECOND


@pytest.mark.django_db(transaction=True)
def test_retry_later_beyond_its_budget_counts_as_a_failure(worker):
    job = schedule("tests.outcomes.retry_later_budget", {"delay": 3600})

    stored = wait_for_attempts(job, 1)
    [attempt] = attempts_of(job)

    assert stored.status == Status.PENDING
    assert stored.attempts == 1
    assert attempt.outcome == Outcome.RETRIED
    assert stored.last_error.startswith(
        "SchedulerError: Retry-later budget exhausted: asked to retry at "
    )
    assert stored.last_error.endswith("(retry later in 3600.0s).")
    assert attempt.error == stored.last_error
    # It is retried with the task's backoff, not after the hour it asked for.
    assert stored.run_at - attempt.finished_at <= SLOW_RETRY.max_backoff(1)


@pytest.mark.django_db(transaction=True)
def test_retry_later_budget_runs_from_the_first_deferral(worker):
    job = schedule("tests.outcomes.retry_later_budget", {"delay": 30})

    stored = wait_for_attempts(job, 1)
    first = attempts_of(job)[0]
    assert first.outcome == Outcome.DEFERRED
    assert stored.retry_later_deadline == first.finished_at + 60 * SECOND

    # Stage most of the budget as spent: 10s left, and the handler asks for 30s again.
    Job.objects.filter(pk=job.pk).update(
        retry_later_deadline=clock.now() + 10 * SECOND, run_at=clock.now() - SECOND
    )
    stored = wait_for_attempts(job, 2)
    second = attempts_of(job)[1]

    assert second.outcome == Outcome.RETRIED
    assert stored.attempts == 1
    assert stored.last_error.startswith("SchedulerError: Retry-later budget exhausted")


# --- timeout ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_timeout_fails_the_attempt_and_retries_then_fails(failures):
    job = schedule("tests.outcomes.too_slow")

    with running_worker() as worker:
        wait_for_status(job, Status.FAILED, timeout=10)
    stored = Job.objects.get(pk=job.pk)
    history = attempts_of(job)

    message = "JobTimeout: Job ran longer than its 0.2s timeout."
    assert [(a.attempt, a.outcome, a.error) for a in history] == [
        (1, Outcome.RETRIED, message),
        (2, Outcome.FAILED, message),
    ]
    # The thread cannot be interrupted, so each attempt keeps the job (and its
    # lease) until the 0.6 s handler returns: the retry never overlaps it.
    for attempt in history:
        assert attempt.finished_at - attempt.started_at >= 0.6 * SECOND
    assert history[1].started_at >= history[0].finished_at
    assert stored.attempts == 2
    assert stored.last_error == message
    assert stored.result is None
    assert [f["job_id"] for f in failures] == [job.pk]
    assert all(a.worker_id == worker.id for a in history)


# --- what the handler sees --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_handler_context_is_stable_across_retries(worker):
    scheduled_for = (clock.now() - dt.timedelta(minutes=5)).replace(microsecond=123456)
    keyed = schedule(
        "tests.outcomes.context",
        {"fail_first": True},
        at=scheduled_for,
        unique_key="order-42",
        payload_version=1,
    )
    plain = schedule("tests.outcomes.context", {"n": 1})

    wait_for_status(keyed, Status.SUCCEEDED)
    wait_for_status(plain, Status.SUCCEEDED)

    first, second = CONTEXTS.pop(keyed.pk)
    for number, ctx in enumerate((first, second), start=1):
        assert ctx.job_id == keyed.pk
        assert ctx.task_name == "tests.outcomes.context"
        assert ctx.payload == {"fail_first": True}
        assert ctx.payload_version == 1
        assert ctx.attempt == number
        assert ctx.scheduled_for == scheduled_for
        assert ctx.idempotency_key == "order-42"
    # The retry was due later than the occurrence; the handler still saw the occurrence.
    assert attempts_of(keyed)[1].due_at > scheduled_for

    [ctx] = CONTEXTS.pop(plain.pk)
    assert ctx.payload == {"n": 1}
    assert ctx.payload_version == 2  # the task's current version
    assert ctx.attempt == 1
    assert ctx.scheduled_for == plain.scheduled_for
    assert ctx.idempotency_key == str(plain.pk)


# --- metrics from the history -----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_first_attempt_success_rate_is_a_query_over_job_rows(worker):
    payloads = [{}, {}, {}, {"fail_times": 1}, {"fail_times": 5}, {"defer_first": True}]
    jobs = [schedule("tests.outcomes.flaky", payload) for payload in payloads]
    for job in jobs:
        wait_for_status(job, Status.SUCCEEDED, Status.FAILED)

    # Deferrals and hand-backs are not attempts: a deferred job that then succeeds
    # succeeded on its first attempt.
    mine = Job.objects.filter(task_name="tests.outcomes.flaky")
    stats = {
        "jobs": mine.finished().count(),
        "succeeded": mine.first_attempt_successes().count(),
    }

    assert stats == {"jobs": 6, "succeeded": 4}
    assert stats["succeeded"] / stats["jobs"] == pytest.approx(2 / 3)
    statuses = dict(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("pk", "status"))
    expected = [Status.SUCCEEDED] * 4 + [Status.FAILED, Status.SUCCEEDED]
    assert [statuses[j.pk] for j in jobs] == expected
