"""Retention: only terminal rows older than the cutoff go, in batches, behind a breaker, audited."""

from __future__ import annotations

import datetime as dt
import logging
import threading

import pytest
from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from scheduler_app import attempt_partitions, clock, occurrence_partitions, partitions, schedule
from scheduler_app.alerts import evaluate
from scheduler_app.clock import frozen_clock
from scheduler_app.models import (
    Alert,
    ControlEvent,
    FeedbackEvent,
    Job,
    JobAttempt,
    LaneProgress,
    PruneRun,
    Recipient,
    Schedule,
    ScheduleOccurrence,
    SendBatch,
    Suppression,
    WorkerHeartbeat,
)
from scheduler_app.retention import (
    MOVED_JOBS,
    PARTITIONED_ATTEMPTS,
    PARTITIONED_JOBS,
    PARTITIONED_OCCURRENCES,
    PRUNE_SCHEDULE_NAME,
    PRUNE_TASK,
    prune,
)
from scheduler_app.schedules.declared import declared_schedules
from scheduler_app.sends.batches import BatchStateError, seed_send
from tests.helpers import reads_of, running_worker, wait_for_status, wait_until

T0 = dt.datetime(2026, 3, 2, 3, 30, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
Status = Job.Status
BatchStatus = SendBatch.Status


def job(status, *, finished_ago=None, at=T0, attempts=0):
    """A job in ``status`` that finished ``finished_ago`` before T0 (with ``attempts`` rows)."""
    finished = T0 - finished_ago if finished_ago is not None else None
    row = Job.objects.create(
        task_name="tests.record",
        scheduled_for=finished or at,
        run_at=finished or at,
        status=status,
        finished_at=finished,
    )
    for number in range(1, attempts + 1):
        JobAttempt.objects.create(
            job=row,
            attempt=number,
            task_name=row.task_name,
            due_at=finished,
            started_at=finished,
            finished_at=finished,
            outcome=JobAttempt.Outcome.SUCCEEDED,
        )
    return row


def batch(status, *, changed_ago, recipients=2, **fields):
    changed = T0 - changed_ago
    row = SendBatch.objects.create(
        name="news",
        subject_template="s",
        text_template="t",
        audience="tests.customers",
        expected_max_audience=100,
        status=status,
        status_changed_at=changed,
        finished_at=changed if status == BatchStatus.COMPLETED else None,
        **fields,
    )
    for n in range(recipients):
        Recipient.objects.create(
            batch=row, recipient_key=str(n), address="r%s@example.com" % n, context={"name": "Ada"}
        )
    return row


def contexts(batch_row):
    return sorted(str(r) for r in batch_row.recipients.values_list("context", flat=True))


def exists(row) -> bool:
    return type(row).objects.filter(pk=row.pk).exists()


@pytest.mark.django_db
def test_only_terminal_rows_older_than_the_cutoff_go():
    old, recent = 31 * DAY, 29 * DAY
    gone = [
        job(Status.SUCCEEDED, finished_ago=old, attempts=2),
        job(Status.FAILED, finished_ago=old),
        job(Status.CANCELLED, finished_ago=old),
    ]
    kept = [
        job(Status.SUCCEEDED, finished_ago=recent),
        # Positive conditions: whatever their age, unfinished jobs are never selected.
        job(Status.PENDING, at=T0 - 400 * DAY),
        job(Status.RUNNING, at=T0 - 400 * DAY),
    ]
    finished_batch = batch(BatchStatus.COMPLETED, changed_ago=old)
    live = [
        batch(status, changed_ago=400 * DAY)
        for status in (BatchStatus.SCHEDULED, BatchStatus.SENDING, BatchStatus.PAUSED)
    ]
    schedule_row = Schedule.objects.create(
        name="nightly", task_name="tests.record", cron="0 3 * * *"
    )
    occurrence_of_running = ScheduleOccurrence.objects.create(
        schedule=schedule_row, occurrence_at=T0 - 400 * DAY, outcome="enqueued", job=kept[2]
    )
    occurrence_of_finished = ScheduleOccurrence.objects.create(
        schedule=schedule_row, occurrence_at=T0 - 100 * DAY, outcome="enqueued", job=gone[0]
    )
    resolved = Alert.objects.create(
        kind="late",
        subject="task:a",
        summary="s",
        opened_at=T0 - 100 * DAY,
        resolved_at=T0 - 91 * DAY,
    )
    still_open = Alert.objects.create(
        kind="late", subject="task:b", summary="s", opened_at=T0 - 400 * DAY
    )
    heartbeat = {"host": "h", "pid": 1, "concurrency": 1, "started_at": T0 - 400 * DAY}
    lost = WorkerHeartbeat.objects.create(
        worker_id="lost", status="lost", last_seen_at=T0 - 8 * DAY, **heartbeat
    )
    alive = WorkerHeartbeat.objects.create(
        worker_id="alive", status="alive", last_seen_at=T0 - 400 * DAY, **heartbeat
    )
    old_event = ControlEvent.objects.create(
        scope="queue", target="q", action="pause", at=T0 - 366 * DAY
    )
    new_event = ControlEvent.objects.create(
        scope="queue", target="q", action="pause", at=T0 - 364 * DAY
    )

    run = prune(T0)

    assert not any(exists(row) for row in gone)
    assert not JobAttempt.objects.filter(job_id=gone[0].pk).exists()
    assert all(exists(row) for row in kept)
    assert contexts(finished_batch) == ["{}", "{}"]  # blanked; the sent markers stay
    assert finished_batch.recipients.count() == 2
    for row in live:
        assert contexts(row) == ["{'name': 'Ada'}"] * 2
    assert exists(occurrence_of_running)
    assert not exists(occurrence_of_finished)
    assert not exists(resolved) and exists(still_open)
    assert not exists(lost) and exists(alive)
    assert not exists(old_event) and exists(new_event)
    assert run.outcome == PruneRun.Outcome.PRUNED
    # Their attempts went row by row, or with their range of jobs' partition if it was
    # full (tests/db/test_attempt_partitions.py): which depends on the job ids.
    run.counts.pop(PARTITIONED_ATTEMPTS, None)
    assert run.counts == {
        "jobs": 3,
        "occurrences": 1,
        "control_events": 1,
        "recipient_contexts": 2,
        "workers": 1,
        "alerts": 1,
        "dry_run_reports": 0,
    } | in_partitions(0)


def in_partitions(jobs: int, moved: int = 0) -> dict[str, int]:
    """Return the counts a run on a partitioned job table adds (none on one table): the
    jobs that went with whole partitions, and those moved into history; and, on a
    partitioned occurrence table, no occurrence that went with a whole partition."""
    counts = {PARTITIONED_JOBS: jobs, MOVED_JOBS: moved} if partitions.is_partitioned() else {}
    if occurrence_partitions.is_partitioned():
        counts[PARTITIONED_OCCURRENCES] = 0
    return counts


def test_the_postgresql_prune_statement_handles_every_relation_to_the_job_table():
    """PRUNE_JOBS deletes attempts, unlinks occurrences and cursors; a new relation fails here."""
    relations = {
        (field.related_model.__name__, field.on_delete.__name__)
        for field in Job._meta.get_fields(include_hidden=True)
        if field.one_to_many and field.auto_created
    }
    assert relations == {
        ("JobAttempt", "CASCADE"),
        ("ScheduleOccurrence", "SET_NULL"),
        ("SyncCursor", "SET_NULL"),
    }


@pytest.mark.django_db
@override_settings(SCHEDULER_APP={"RETENTION_BATCHES_DAYS": 60, "PRUNE_BATCH_SIZE": 2})
def test_finished_batches_go_with_their_recipients_and_lanes_and_feedback_stays_unlinked():
    old, recent = 61 * DAY, 59 * DAY
    gone = [
        batch(BatchStatus.COMPLETED, changed_ago=old, recipients=5),
        batch(BatchStatus.CANCELLED, changed_ago=old),
        batch(BatchStatus.FAILED, changed_ago=old, recipients=0),
    ]
    LaneProgress.objects.create(batch=gone[0], claim="lane:1", sent=5)
    marker = gone[0].recipients.first()
    event = FeedbackEvent.objects.create(
        event_id="e1",
        kind=FeedbackEvent.Kind.COMPLAINT,
        source="webhook",
        address=marker.address,
        batch=gone[0],
        recipient=marker,
    )
    suppression = Suppression.objects.create(
        address=marker.address, reason="complaint", source="webhook", batch=gone[0]
    )
    kept = [
        batch(BatchStatus.COMPLETED, changed_ago=recent),
        # Positive conditions: whatever their age, unfinished batches are never selected.
        *(
            batch(status, changed_ago=400 * DAY)
            for status in (
                BatchStatus.DRAFT,
                BatchStatus.SCHEDULED,
                BatchStatus.SENDING,
                BatchStatus.PAUSED,
            )
        ),
    ]

    run = prune(T0)

    assert not any(exists(row) for row in gone)
    assert not Recipient.objects.filter(batch_id__in=[row.pk for row in gone]).exists()
    assert not LaneProgress.objects.exists()
    assert all(exists(row) and row.recipients.count() == 2 for row in kept)
    event.refresh_from_db()
    suppression.refresh_from_db()
    # The record of the complaint, and the suppression it made, outlive the send.
    assert (event.address, event.batch_id, event.recipient_id) == (marker.address, None, None)
    assert (suppression.address, suppression.batch_id) == (marker.address, None)
    assert (run.counts["recipients"], run.counts["batches"]) == (7, 3)


@pytest.mark.django_db
@override_settings(SCHEDULER_APP={"RETENTION_BATCHES_DAYS": 60, "PRUNE_MAX_ROWS": 4})
def test_the_breaker_counts_a_batch_and_its_recipients():
    finished = batch(BatchStatus.COMPLETED, changed_ago=61 * DAY, recipients=4)
    run = prune(T0)
    assert run.outcome == PruneRun.Outcome.REFUSED
    assert (run.counts["recipients"], run.counts["batches"]) == (4, 1)
    assert exists(finished) and finished.recipients.count() == 4


@pytest.mark.django_db
def test_a_seed_send_to_a_batch_retention_deleted_sends_nothing():
    finished = finished_with_a_seed_list()
    with override_settings(SCHEDULER_APP={"RETENTION_BATCHES_DAYS": 60}):
        prune(T0)
    with pytest.raises(BatchStateError, match="This batch was deleted"):
        seed_send(finished)  # an admin page opened before the prune
    assert not Recipient.objects.exists()


def test_the_postgresql_recipient_statements_handle_every_relation_to_the_recipient_table():
    """PRUNE_RECIPIENTS and a dropped partition unlink feedback events; a new relation
    fails here."""
    relations = {
        (field.related_model.__name__, field.on_delete.__name__)
        for field in Recipient._meta.get_fields(include_hidden=True)
        if field.one_to_many and field.auto_created
    }
    assert relations == {("FeedbackEvent", "SET_NULL")}


@pytest.mark.django_db
def test_a_kind_whose_retention_is_none_is_kept():
    finished = job(Status.SUCCEEDED, finished_ago=1000 * DAY)
    with override_settings(SCHEDULER_APP={"RETENTION_JOBS_DAYS": None}):
        run = prune(T0)
    assert exists(finished)
    assert "jobs" not in run.counts


@pytest.mark.django_db
@override_settings(SCHEDULER_APP={"PRUNE_BATCH_SIZE": 2})
def test_rows_go_in_batches_of_prune_batch_size(caplog):
    for _ in range(5):
        job(Status.SUCCEEDED, finished_ago=40 * DAY)
    with caplog.at_level(logging.DEBUG, logger="scheduler_app.retention"):
        run = prune(T0)
    batches = [r.getMessage() for r in caplog.records if "pruned a batch" in r.getMessage()]
    assert batches == ["pruned a batch kind=jobs rows=%s" % n for n in (2, 2, 1)]
    assert run.counts["jobs"] == 5
    assert not Job.objects.exists()


@pytest.mark.django_db
@override_settings(SCHEDULER_APP={"PRUNE_MAX_ROWS": 3})
def test_the_breaker_refuses_deletes_nothing_and_alerts_until_a_prune_succeeds(caplog):
    rows = [job(Status.SUCCEEDED, finished_ago=40 * DAY) for _ in range(4)]
    refused = pytest.raises(CommandError, match=r"Refused: more than PRUNE_MAX_ROWS \(3\) rows")
    with caplog.at_level(logging.ERROR, logger="scheduler_app.retention"), refused:
        call_command("scheduler_prune")
    assert all(exists(row) for row in rows)
    run = PruneRun.objects.get()
    assert run.outcome == PruneRun.Outcome.REFUSED
    assert run.counts["jobs"] == 4  # counted up to one past the breaker
    assert "prune refused run=%s" % run.pk in caplog.text
    alert = Alert.objects.open().get(kind=Alert.Kind.PRUNE_REFUSED)
    assert alert.numbers == {"counts": run.counts, "max_rows": 3}
    assert alert.admin_url == "/admin/scheduler_app/prunerun/%s/change/" % run.pk
    assert "scheduler_prune --max-rows N" in alert.summary

    evaluate()  # the rule keeps it open while the latest real run is a refusal
    assert Alert.objects.open().filter(kind=Alert.Kind.PRUNE_REFUSED).exists()

    call_command("scheduler_prune", "--dry-run")  # a dry-run changes nothing
    evaluate()
    assert Alert.objects.open().filter(kind=Alert.Kind.PRUNE_REFUSED).exists()

    call_command("scheduler_prune", "--max-rows", "10")
    assert not Job.objects.exists()
    evaluate()
    assert not Alert.objects.open().filter(kind=Alert.Kind.PRUNE_REFUSED).exists()


@pytest.mark.django_db
def test_dry_run_prints_what_would_go_and_deletes_nothing(capsys):
    old = job(Status.FAILED, finished_ago=31 * DAY)
    call_command("scheduler_prune", "--dry-run")
    out = capsys.readouterr().out
    assert "jobs                 would remove 1 (older than" in out
    assert "30 days)" in out
    assert exists(old)
    run = PruneRun.objects.get()
    assert run.outcome == PruneRun.Outcome.DRY_RUN
    assert run.counts["jobs"] == 1
    assert "prune run %s: dry_run, 1 rows" % run.pk in out


@pytest.mark.django_db
def test_every_run_leaves_an_audit_row_and_a_log_line(caplog):
    job(Status.SUCCEEDED, finished_ago=32 * DAY)
    with caplog.at_level(logging.INFO, logger="scheduler_app.retention"), frozen_clock(T0):
        run = prune(T0 - DAY, source="job:7")
    run.refresh_from_db()
    assert (run.source, run.reference_time, run.outcome) == ("job:7", T0 - DAY, "pruned")
    assert run.started_at == run.finished_at == T0
    assert run.max_rows == 1_000_000
    counts = {
        "alerts": 0,
        "control_events": 0,
        "dry_run_reports": 0,
        "jobs": 1,
        "occurrences": 0,
        "recipient_contexts": 0,
        "workers": 0,
    } | in_partitions(0)
    if attempt_partitions.is_partitioned():  # none: the job has no attempt row
        counts[PARTITIONED_ATTEMPTS] = 0
    assert (
        "prune run=%s outcome=pruned source=job:7 reference=%s total=1 counts=%s"
        % (run.pk, (T0 - DAY).isoformat(), ",".join("%s:%s" % i for i in sorted(counts.items())))
    ) in caplog.text


@pytest.mark.django_db
def test_old_dry_run_reports_go_except_the_latest_of_a_batch_that_has_not_finished(
    tmp_path, settings
):
    settings.MEDIA_ROOT = str(tmp_path)  # pytest-django's fixture: restored afterwards

    def report(batch_id, written):
        name = "scheduler_app/dry-runs/batch-%s-%s.txt" % (
            batch_id,
            written.strftime("%Y%m%dT%H%M%SZ"),
        )
        return default_storage.save(name, ContentFile(b"report"))

    draft = batch(BatchStatus.DRAFT, changed_ago=DAY)
    done = batch(BatchStatus.COMPLETED, changed_ago=40 * DAY)
    superseded = report(draft.pk, T0 - 50 * DAY)
    latest_of_draft = report(draft.pk, T0 - 45 * DAY)
    of_done = report(done.pk, T0 - 45 * DAY)
    recent = report(done.pk, T0 - DAY)
    SendBatch.objects.filter(pk=draft.pk).update(dry_run_report=latest_of_draft)
    SendBatch.objects.filter(pk=done.pk).update(dry_run_report=of_done)

    run = prune(T0)

    assert run.counts["dry_run_reports"] == 2
    assert not default_storage.exists(superseded) and not default_storage.exists(of_done)
    assert default_storage.exists(latest_of_draft) and default_storage.exists(recent)
    assert SendBatch.objects.get(pk=done.pk).dry_run_report == ""
    assert SendBatch.objects.get(pk=draft.pk).dry_run_report == latest_of_draft


def test_the_built_in_schedule_is_on_by_default_and_a_setting_switches_it_off():
    with override_settings(SCHEDULER_APP={}):
        declared = declared_schedules()[PRUNE_SCHEDULE_NAME]
        assert (declared.task_name, declared.cron, declared.timezone) == (
            PRUNE_TASK,
            "30 3 * * *",
            "UTC",
        )
    with override_settings(SCHEDULER_APP={"PRUNE_SCHEDULE": None}):
        assert PRUNE_SCHEDULE_NAME not in declared_schedules()


@pytest.mark.django_db(transaction=True)
def test_the_prune_job_cuts_off_from_its_scheduled_time_not_from_now():
    """A run that starts 10 days late deletes what its occurrence meant to, not 10 days more."""
    scheduled_for = clock.now() - 10 * DAY
    cutoff = scheduled_for - 30 * DAY
    before = Job.objects.create(
        task_name="tests.record",
        scheduled_for=cutoff,
        run_at=cutoff,
        status=Status.SUCCEEDED,
        finished_at=cutoff - dt.timedelta(hours=1),
    )
    after = Job.objects.create(
        task_name="tests.record",
        scheduled_for=cutoff,
        run_at=cutoff,
        status=Status.SUCCEEDED,
        finished_at=cutoff + dt.timedelta(hours=1),  # older than now - 30 days: still kept
    )
    prune_job = schedule(PRUNE_TASK, {}, at=scheduled_for)
    on = override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, "PRUNE_SCHEDULE": "0 3 * * *"})
    with on, running_worker():
        finished = wait_for_status(prune_job, Status.SUCCEEDED, Status.FAILED)
    assert finished.status == Status.SUCCEEDED, finished.last_error
    assert not exists(before) and exists(after)
    run = PruneRun.objects.get()
    assert run.reference_time == scheduled_for
    assert run.source == "job:%s" % prune_job.pk
    assert finished.result == {"run": run.pk, "counts": run.counts}


@pytest.mark.django_db
@pytest.mark.postgres_only
def test_contexts_blanked_once_are_not_read_again():
    """Recipients are kept (their sent markers), so old batches' recipients pile up; a
    run must not read those whose contexts an earlier run blanked."""
    blanked = batch(BatchStatus.COMPLETED, changed_ago=100 * DAY, recipients=2000)
    prune(T0)
    assert contexts(blanked) == ["{}"] * 2000
    newly_old = batch(BatchStatus.COMPLETED, changed_ago=100 * DAY, recipients=3)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE %s" % Recipient._meta.db_table)

    with CaptureQueriesContext(connection) as queries:
        run = prune(T0 + DAY)

    assert run.counts["recipient_contexts"] == 3
    assert contexts(newly_old) == ["{}"] * 3
    reads = reads_of(queries, Recipient._meta.db_table)
    assert reads and reads[0][0] < 100, reads
    blanked.refresh_from_db()
    assert blanked.contexts_blanked_at is not None


def finished_with_a_seed_list():
    """A batch finished long before T0, whose seed list has one address."""
    return batch(
        BatchStatus.COMPLETED,
        changed_ago=100 * DAY,
        provider="fake",
        seed_list=["seed@example.com"],
        seed_context={"name": "Secret"},
    )


@pytest.mark.django_db
def test_a_seed_sent_after_the_contexts_were_blanked_is_blanked_too():
    finished = finished_with_a_seed_list()
    prune(T0)
    finished.refresh_from_db()
    assert finished.contexts_blanked_at is not None

    (seed,) = seed_send(finished)
    prune(T0 + DAY)

    seed.refresh_from_db()
    assert seed.context == {}


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_seed_committed_while_a_prune_runs_is_blanked_later():
    """A seed send in a transaction (the admin's action under ATOMIC_REQUESTS) adds its
    recipient while a prune marks the batch's contexts blanked: the mark must not hide
    the seed's context from every later prune."""
    finished = finished_with_a_seed_list()
    added, commit, markers, pids = threading.Event(), threading.Event(), [], {}

    def seed_in_a_request():
        try:
            with transaction.atomic():
                markers.extend(seed_send(SendBatch.objects.get(pk=finished.pk)))
                added.set()
                assert commit.wait(20), "the test never let the seed commit"
        finally:
            connection.close()

    def prune_run():
        try:
            pids["prune"] = connection.cursor().connection.info.backend_pid
            prune(T0)
        finally:
            connection.close()

    seeder = threading.Thread(target=seed_in_a_request)
    seeder.start()
    assert added.wait(20)
    pruner = threading.Thread(target=prune_run)
    pruner.start()

    def prune_done_or_waiting_for_the_seed():
        if not pruner.is_alive():
            return True
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                [pids.get("prune")],
            )
            row = cursor.fetchone()
        return bool(row and row[0])

    wait_until(prune_done_or_waiting_for_the_seed, message="the prune to end or wait")
    commit.set()
    seeder.join(20)
    pruner.join(20)
    prune(T0 + DAY)

    (seed,) = markers
    seed.refresh_from_db()
    assert seed.context == {}
