"""A real in-process Worker under faults: outcomes the database cannot store,
re-claims of its own running job, pauses, unknown tasks and hung handlers.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time

import pytest
from django.db import connection as db_connection
from django.db import transaction
from django.db.backends.signals import connection_created

from scheduler_app import RetryPolicy, clock, controls, schedule, task
from scheduler_app.db import backend
from scheduler_app.models import Job, JobAttempt, Schedule
from scheduler_app.signals import attempt_finished, job_failed
from scheduler_app.worker import leases
from scheduler_app.worker.execution import ClaimedJob, Finish
from scheduler_app.worker.loop import WorkerFatal
from tests.helpers import make_worker, running_worker, wait_for_status, wait_until

SECOND = dt.timedelta(seconds=1)
Status = Job.Status
Outcome = JobAttempt.Outcome


@task(name="tests.faults.returns")
def returns(ctx):
    if ctx.payload.get("kind") == "nul":
        return {"text": "a\x00b"}
    if ctx.payload.get("kind") == "surrogate":
        return ["\ud800"]
    if ctx.payload.get("kind") == "object":
        return {"when": dt.date(2030, 1, 2)}
    return {"ok": ctx.payload}


#: Exception messages the database cannot store (a payload cannot carry them).
MESSAGES = {"nul": "bad\x00byte", "surrogate": "bad \udc80 text"}


@task(name="tests.faults.raises", max_attempts=1)
def raises(ctx):
    raise ValueError(MESSAGES[ctx.payload["kind"]])


class UnprintableBase(BaseException):
    """A BaseException whose message cannot be read: str() raises."""

    def __str__(self):
        raise RuntimeError("str broke")


class UnprintableError(Exception):
    def __str__(self):
        raise RuntimeError("str broke")


@task(name="tests.faults.unprintable", max_attempts=2)
def unprintable(ctx):
    raise {"base": UnprintableBase, "error": UnprintableError}[ctx.payload["kind"]]()


# --- 1. outcomes the database cannot store ----------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_unstorable_results_and_errors_do_not_poison_the_batch(caplog):
    """NUL bytes and lone surrogates in results or errors are recorded, cleaned; so is the rest."""
    caplog.set_level(logging.WARNING, logger="scheduler_app")
    jobs = {
        "nul": schedule("tests.faults.returns", {"kind": "nul"}),
        "surrogate": schedule("tests.faults.returns", {"kind": "surrogate"}),
        "object": schedule("tests.faults.returns", {"kind": "object"}),
        "plain": schedule("tests.faults.returns", {"kind": "plain"}),
        "nul_error": schedule("tests.faults.raises", {"kind": "nul"}),
        "surrogate_error": schedule("tests.faults.raises", {"kind": "surrogate"}),
    }

    with running_worker(concurrency=6) as worker:
        for job in jobs.values():
            wait_for_status(job, Status.SUCCEEDED, Status.FAILED, timeout=10)
        # The worker records later outcomes as before.
        after = wait_for_status(schedule("tests.faults.returns", {"n": 1}), Status.SUCCEEDED)
        assert not worker.stopping

    stored = {name: Job.objects.get(pk=job.pk) for name, job in jobs.items()}
    assert {name: (j.status, j.attempts) for name, j in stored.items()} == {
        "nul": ("succeeded", 1),
        "surrogate": ("succeeded", 1),
        "object": ("succeeded", 1),
        "plain": ("succeeded", 1),
        "nul_error": ("failed", 1),
        "surrogate_error": ("failed", 1),
    }
    assert stored["nul"].result == {
        "unstorable_result": "The result contains a NUL character (\\u0000), "
        "which PostgreSQL cannot store."
    }
    assert stored["surrogate"].result == {
        "unstorable_result": "The result contains text that is not valid Unicode "
        "(a surrogate code point)."
    }
    assert stored["object"].result == {
        "unstorable_result": "The result is not JSON-serialisable: "
        "Object of type date is not JSON serializable."
    }
    assert stored["plain"].result == {"ok": {"kind": "plain"}}
    assert stored["nul_error"].last_error.startswith("ValueError: bad\\x00byte\n\nTraceback")
    assert stored["surrogate_error"].last_error.startswith(
        "ValueError: bad \\udc80 text\n\nTraceback"
    )
    assert Job.objects.get(pk=after.pk).result == {"ok": {"n": 1}}
    assert sorted(
        (a.job_id, a.outcome)
        for job in Job.objects.filter(pk__in=[j.pk for j in jobs.values()])
        for a in job.attempt_history()
    ) == sorted(
        (job.pk, Outcome.FAILED if name.endswith("error") else Outcome.SUCCEEDED)
        for name, job in jobs.items()
    )
    assert "database error" not in caplog.text
    warnings = [r.getMessage() for r in caplog.records if "result not stored" in r.getMessage()]
    assert sorted(warnings) == sorted(
        "job result not stored job=%s task=tests.faults.returns reason=%s"
        % (jobs[name].pk, stored[name].result["unstorable_result"])
        for name in ("nul", "surrogate", "object")
    )


@pytest.mark.django_db(transaction=True)
def test_an_exception_whose_message_cannot_be_read_fails_its_job_not_the_worker():
    """str() of the exception raises: the worker used to die formatting it (a BaseException)
    or record the formatting error instead of a retry (an Exception)."""
    base = schedule("tests.faults.unprintable", {"kind": "base"})
    error = schedule("tests.faults.unprintable", {"kind": "error"})

    with running_worker(concurrency=2) as worker:
        wait_for_status(base, Status.FAILED, timeout=10)
        retried = wait_until(
            lambda: (
                Job.objects.filter(pk=error.pk, attempts=1).exclude(status=Status.RUNNING).first()
            ),
            timeout=10,
            message="the unprintable Exception's first attempt to end",
        )
        after = wait_for_status(schedule("tests.faults.returns", {"n": 2}), Status.SUCCEEDED)
        assert not worker.stopping

    base = Job.objects.get(pk=base.pk)
    assert base.attempts == 1
    assert base.last_error.startswith("UnprintableBase: <the message could not be read:")
    assert "Traceback" in base.last_error
    # An Exception is retried by the task's policy, described by its own type.
    assert (retried.status, retried.attempts) == (Status.PENDING, 1)
    assert retried.last_error.startswith("UnprintableError: <the message could not be read:")
    assert Job.objects.get(pk=after.pk).result == {"ok": {"n": 2}}


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_refused_outcome_costs_only_itself(caplog):
    """If the batched FINISH is refused, outcomes are recorded one by one, the bad one cut down."""
    good, bad = schedule("tests.faults.returns"), schedule("tests.faults.returns")
    worker = make_worker()
    now = clock.now()
    rows = backend().claim_jobs(
        worker=worker.id, queues=["default"], limit=2, lease=worker.options.lease
    )
    claimed = {row[0]: ClaimedJob.from_row(row) for row in rows}
    # Built by hand: execute() would never let a NUL through.
    worker._unflushed = [
        Finish(job=claimed[good.pk], status="succeeded", outcome="succeeded", finished_at=now),
        Finish(
            job=claimed[bad.pk], status="failed", outcome="failed", finished_at=now, error="a\x00b"
        ),
    ]

    worker._flush()

    assert worker._unflushed == []
    assert Job.objects.get(pk=good.pk).status == Status.SUCCEEDED
    stored = Job.objects.get(pk=bad.pk)
    assert stored.status == Status.FAILED
    assert stored.last_error == (
        "a\\x00b\n\n(The outcome could not be stored as it was: DataError: "
        "unsupported Unicode escape sequence)"
    )
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        "batched finish refused, recording outcomes one by one worker=%s outcomes=2" % worker.id,
        "outcome refused by the database, recording it without its result and error text "
        "job=%s task=tests.faults.returns error=DataError: unsupported Unicode escape "
        "sequence" % bad.pk,
    ]


@pytest.mark.django_db(transaction=True)
def test_a_stale_failure_flushed_with_the_current_success_is_not_reported():
    """The stale attempt's outcome and its successor's, of the same job, in one flush: only
    the outcome the lease token accepted is counted and signalled, so no job_failed goes out
    for a job that succeeded."""
    job = schedule("tests.faults.returns")
    worker = make_worker()

    def claim_one() -> ClaimedJob:
        [row] = backend().claim_jobs(
            worker=worker.id, queues=["default"], limit=1, lease=worker.options.lease
        )
        return ClaimedJob.from_row(row)

    stale = claim_one()
    Job.objects.filter(pk=job.pk).update(lease_expires_at=clock.now() - SECOND)
    assert leases.rescue_expired("tests.rescuer") == 1
    current = claim_one()
    now = clock.now()
    # Kept together, as after a flush that met a lost connection.
    worker._unflushed = [
        Finish(job=stale, status="failed", outcome="failed", finished_at=now, error="stale"),
        Finish(job=current, status="succeeded", outcome="succeeded", finished_at=now),
    ]
    finished, failed = [], []

    def on_finished(sender, **kwargs):
        finished.append((kwargs["attempt"], kwargs["outcome"]))

    def on_failed(sender, **kwargs):
        failed.append(kwargs["job_id"])

    attempt_finished.connect(on_finished)
    job_failed.connect(on_failed)
    try:
        worker._flush()
    finally:
        attempt_finished.disconnect(on_finished)
        job_failed.disconnect(on_failed)

    assert Job.objects.get(pk=job.pk).status == Status.SUCCEEDED
    assert (finished, failed) == ([(2, "succeeded")], [])
    assert worker._counts["failed"] == 0


# --- 2. a worker re-claims its own running job ------------------------------------------------

BLOCKING = {"release": threading.Event(), "lock": threading.Lock(), "now": 0, "most": 0, "runs": 0}


@task(name="tests.faults.blocking")
def blocking(ctx):
    """Count runs and how many run at once; wait until the test releases them."""
    with BLOCKING["lock"]:
        BLOCKING["runs"] += 1
        BLOCKING["now"] += 1
        BLOCKING["most"] = max(BLOCKING["most"], BLOCKING["now"])
    try:
        assert BLOCKING["release"].wait(20), "the test never released the handler"
    finally:
        with BLOCKING["lock"]:
            BLOCKING["now"] -= 1
    return "attempt %s" % ctx.attempt


@pytest.fixture
def blocking_handler():
    BLOCKING.update(now=0, most=0, runs=0)
    BLOCKING["release"].clear()
    yield BLOCKING
    BLOCKING["release"].set()


@pytest.mark.django_db(transaction=True)
def test_reclaiming_its_own_running_job_waits_for_the_stale_attempt(blocking_handler, caplog):
    """After a lost lease and a rescue, a re-claim never runs beside the stale attempt."""
    caplog.set_level(logging.INFO, logger="scheduler_app")
    job = schedule("tests.faults.blocking")
    with running_worker(lease_seconds=60) as worker:
        wait_until(lambda: blocking_handler["runs"] == 1, message="the first attempt to start")
        # An outage longer than the lease: the lease expired and another worker rescued the job.
        Job.objects.filter(pk=job.pk).update(lease_expires_at=clock.now() - SECOND)
        assert leases.rescue_expired("tests.rescuer") == 1
        wait_until(
            lambda: Job.objects.filter(pk=job.pk, status=Status.RUNNING, attempts=2).exists(),
            message="the worker to claim the job again",
        )
        assert blocking_handler["runs"] == 1
        blocking_handler["release"].set()
        stored = wait_for_status(job, Status.SUCCEEDED)
        assert not worker.stopping

    assert (blocking_handler["runs"], blocking_handler["most"]) == (2, 1)
    assert (stored.attempts, stored.result) == (2, "attempt 2")
    assert list(
        JobAttempt.objects.filter(job_id=job.pk).order_by("id").values_list("attempt", "outcome")
    ) == [(1, Outcome.LEASE_EXPIRED), (2, Outcome.SUCCEEDED)]
    messages = [r.getMessage() for r in caplog.records]
    assert (
        "job claimed again while an earlier attempt still runs here, it starts when that "
        "attempt ends job=%s task=tests.faults.blocking attempt=2 earlier_attempt=1" % job.pk
    ) in messages
    assert (
        "stale completion discarded job=%s task=tests.faults.blocking attempt=1: lease lost, "
        "the job was rescued or claimed again" % job.pk
    ) in messages


# --- 3. an idle worker does not spin while things are paused ----------------------------------


@pytest.fixture
def worker_queries():
    """Count the statements the in-process worker's own connection runs."""
    counted: list[str] = []

    def count(execute, sql, params, many, context):
        counted.append(sql)
        return execute(sql, params, many, context)

    def install(sender, connection, **kwargs):
        if threading.current_thread().name == "test-worker" and count not in (
            connection.execute_wrappers
        ):
            connection.execute_wrappers.append(count)

    connection_created.connect(install, dispatch_uid="tests.faults.worker_queries")
    yield counted
    connection_created.disconnect(dispatch_uid="tests.faults.worker_queries")


@pytest.mark.parametrize(
    ("scope", "target", "per_interval"),
    [("global", "", 2), ("queue", "default", 2), ("task", "tests.faults.returns", 3)],
    ids=["everything", "queue", "task"],
)
@pytest.mark.django_db(transaction=True)
def test_idle_worker_does_not_spin_while_due_jobs_are_paused(
    worker_queries, scope, target, per_interval
):
    """With its due jobs behind a kill switch, a worker makes a few queries per poll interval.

    Two per interval when nothing can be claimed; with only a task paused, the
    claim, the next-due look-up and the switches' refresh.
    """
    controls.pause(scope, target, reason="test")
    jobs = [schedule("tests.faults.returns") for _ in range(3)]
    poll_interval, window = 0.1, 1.0

    with running_worker(poll_interval=poll_interval):
        wait_until(lambda: worker_queries, message="the worker's first queries")
        before = len(worker_queries)
        time.sleep(window)  # measuring a rate over a window, not waiting for an event
        made = len(worker_queries) - before

    assert made <= per_interval * window / poll_interval, worker_queries[before:][:10]
    assert Job.objects.filter(pk__in=[j.pk for j in jobs], status=Status.PENDING).count() == 3


# --- 6(a). a task this worker does not know ---------------------------------------------------

GRACE = dt.timedelta(seconds=3600)


def unknown_job(scheduled_for: dt.datetime) -> Job:
    """Create a due job of a task no worker of this test suite knows (a newer deploy's)."""
    return Job.objects.create(
        task_name="tests.faults.from_a_newer_deploy",
        scheduled_for=scheduled_for,
        run_at=scheduled_for,
    )


@pytest.mark.django_db(transaction=True)
def test_unknown_task_is_handed_back_until_its_grace_has_passed(caplog):
    """A job of an unknown task goes back for a worker that knows it; it fails only after grace."""
    caplog.set_level(logging.INFO, logger="scheduler_app")
    now = clock.now()
    fresh = unknown_job(now)
    nearly = unknown_job(now - GRACE + 5 * SECOND)
    old = unknown_job(now - GRACE - SECOND)

    with running_worker():
        stored = {
            job.pk: wait_until(
                lambda job=job: (
                    Job.objects.filter(pk=job.pk, recorded_attempts__isnull=False)
                    .exclude(status=Status.RUNNING)
                    .first()
                ),
                message="job %s to be handed back or failed" % job.pk,
            )
            for job in (fresh, nearly, old)
        }

    handed_back = "UnknownTask: No task is registered as 'tests.faults.from_a_newer_deploy'."
    for job in (fresh, nearly):
        row = stored[job.pk]
        [attempt] = JobAttempt.objects.filter(job_id=job.pk)
        assert (row.status, row.attempts, row.scheduled_for) == (
            Status.PENDING,
            0,
            job.scheduled_for,
        )
        assert (attempt.attempt, attempt.outcome) == (1, Outcome.DEFERRED)
        assert (
            row.last_error
            == attempt.error
            == (
                "%s Handed back for a worker that knows it; it fails if none has run it by %s "
                "(UNKNOWN_TASK_GRACE after its scheduled time)."
                % (handed_back, (job.scheduled_for + GRACE).isoformat())
            )
        )
    # Looked at again shortly, but never after the grace ends.
    fresh_row = stored[fresh.pk]
    assert fresh_row.run_at - fresh_row.recorded_attempts.get().finished_at == 10 * SECOND
    assert stored[nearly.pk].run_at == nearly.scheduled_for + GRACE

    old_row = stored[old.pk]
    assert (old_row.status, old_row.attempts) == (Status.FAILED, 1)
    assert old_row.last_error == (
        "UnknownTask: No task is registered as 'tests.faults.from_a_newer_deploy', and no "
        "worker that knows it ran the job within UNKNOWN_TASK_GRACE (3600s) of its scheduled "
        "time %s." % old.scheduled_for.isoformat()
    )
    assert list(JobAttempt.objects.filter(job_id=old.pk).values_list("outcome", flat=True)) == [
        Outcome.FAILED
    ]
    assert (
        "job handed back, unknown task job=%s task=tests.faults.from_a_newer_deploy "
        "retry_at=%s grace_ends=%s"
        % (fresh.pk, fresh_row.run_at.isoformat(), (fresh.scheduled_for + GRACE).isoformat())
    ) in [r.getMessage() for r in caplog.records]


# --- side duties: a slow scheduler tick cannot cost a running job its lease -------------------


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_slow_scheduler_tick_does_not_delay_lease_renewal(blocking_handler):
    """While the scheduler tick waits on a row lock for twice the lease, leases stay renewed."""
    lease = 1.5
    # Due shortly after the job starts, once the test holds its row lock.
    Schedule.objects.create(
        name="faults-slow-tick",
        task_name="tests.faults.returns",
        cron="* * * * *",
        next_run_at=clock.now() + 2 * SECOND,
    )
    job = schedule("tests.faults.blocking")
    locked, unlock = threading.Event(), threading.Event()

    def hold_the_schedule_row():
        try:
            with transaction.atomic():
                list(Schedule.objects.select_for_update().filter(name="faults-slow-tick"))
                locked.set()
                unlock.wait(20)
        finally:
            db_connection.close()

    holder = threading.Thread(target=hold_the_schedule_row)
    with running_worker(lease_seconds=lease, scheduler_interval=0.05) as worker:
        wait_until(lambda: blocking_handler["runs"] == 1, message="the job to start")
        holder.start()
        try:
            assert locked.wait(10)
            wait_until(tick_is_waiting_on_a_lock, message="the scheduler tick to block")
            stalled_until = time.monotonic() + 2 * lease
            while time.monotonic() < stalled_until:
                row = Job.objects.get(pk=job.pk)
                assert row.status == Status.RUNNING and row.lease_expires_at > clock.now(), (
                    "lease expired at %s during the stalled tick" % row.lease_expires_at
                )
                time.sleep(0.05)  # sampling the lease, not waiting for an event
        finally:
            unlock.set()
            holder.join(10)
        blocking_handler["release"].set()
        stored = wait_for_status(job, Status.SUCCEEDED)
        assert not worker.stopping

    assert stored.attempts == 1
    assert [a.outcome for a in stored.attempt_history()] == [Outcome.SUCCEEDED]


def tick_is_waiting_on_a_lock() -> bool:
    with db_connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return cursor.fetchone()[0] > 0


# --- 8. a handler that never returns ----------------------------------------------------------

FAST = RetryPolicy(base=dt.timedelta(milliseconds=10), cap=dt.timedelta(milliseconds=20))


@task(name="tests.faults.hangs", timeout=0.1, max_attempts=2, retry=FAST)
def hangs(ctx):
    return blocking(ctx)


@task(name="tests.faults.hangs_once", timeout=0.1, max_attempts=1)
def hangs_once(ctx):
    return blocking(ctx)


ABANDONED = (
    "JobTimeout: Job ran longer than its 0.1s timeout and did not return within a further "
    "0.2s; its thread was abandoned."
)


@pytest.mark.django_db(transaction=True)
def test_hung_handler_is_abandoned_and_its_retry_waits_for_the_thread(blocking_handler, caplog):
    """After timeout plus grace the attempt is recorded; the retry waits until the thread ends."""
    caplog.set_level(logging.INFO, logger="scheduler_app")
    lease = 1.0
    job = schedule("tests.faults.hangs")
    with running_worker(lease_seconds=lease, timeout_grace=0.2) as worker:
        wait_until(
            lambda: JobAttempt.objects.filter(job_id=job.pk).exists(),
            message="the hung attempt to be recorded",
        )
        # The thread still runs: however long it takes, the retry does not start.
        held_until = time.monotonic() + 2 * lease
        while time.monotonic() < held_until:
            row = Job.objects.get(pk=job.pk)
            assert (row.status, row.attempts) == (Status.PENDING, 1)
            assert row.run_at > clock.now(), "the hold lapsed at %s" % row.run_at
            time.sleep(0.05)  # sampling the row, not waiting for an event
        assert blocking_handler["runs"] == 1
        blocking_handler["release"].set()
        stored = wait_for_status(job, Status.SUCCEEDED)
        assert not worker.stopping

    assert (blocking_handler["runs"], blocking_handler["most"]) == (2, 1)
    assert (stored.attempts, stored.result) == (2, "attempt 2")
    assert list(
        JobAttempt.objects.filter(job_id=job.pk).order_by("id").values_list("outcome", "error")
    ) == [(Outcome.RETRIED, ABANDONED), (Outcome.SUCCEEDED, "")]
    messages = [r.getMessage() for r in caplog.records]
    assert (
        "job abandoned, its handler did not return within its timeout plus grace; the thread "
        "runs on and the job is held until it ends job=%s task=tests.faults.hangs attempt=1 "
        "timeout=0.1s grace=0.2s abandoned_threads=1" % job.pk
    ) in messages
    assert (
        "abandoned handler returned, its outcome is discarded job=%s task=tests.faults.hangs "
        "attempt=1" % job.pk
    ) in messages


@pytest.mark.django_db(transaction=True)
def test_more_abandoned_threads_than_concurrency_stop_the_worker(blocking_handler, caplog):
    """Past CONCURRENCY abandoned threads the worker stops with WorkerFatal (runworker exits 1)."""
    jobs = [schedule("tests.faults.hangs_once") for _ in range(2)]

    with (
        pytest.raises(WorkerFatal) as raised,
        running_worker(concurrency=1, timeout_grace=0.2) as worker,
    ):
        wait_until(lambda: worker.stopping, message="the worker to give up")

    assert str(raised.value) == (
        "2 handler threads did not return after their timeout (more than the concurrency, 1); "
        "restart the worker."
    )
    assert [Job.objects.get(pk=j.pk).status for j in jobs] == [Status.FAILED, Status.FAILED]
    assert {Job.objects.get(pk=j.pk).last_error for j in jobs} == {ABANDONED}
    assert blocking_handler["runs"] == 2
