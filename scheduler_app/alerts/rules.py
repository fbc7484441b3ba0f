"""The alert rules: each returns the Findings that are true now.

A rule reads the database (through indexes; see the 0010b migration) and
returns one Finding per subject that breaches its target. The evaluator
opens an alert for each finding and resolves the open ones no rule found.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
from collections.abc import Callable
from typing import Any

from django.db.models import Count, Min, Q, QuerySet
from django.db.models.functions import Coalesce, Greatest

from scheduler_app.alerts.links import admin_link
from scheduler_app.conf import app_settings
from scheduler_app.feedback.suppressions import rate_breach
from scheduler_app.lateness import lateness_by_task
from scheduler_app.models import (
    Alert,
    AlertMemory,
    FeedbackEvent,
    Job,
    Recipient,
    Schedule,
    ScheduleOccurrence,
    SendBatch,
    WorkerHeartbeat,
)
from scheduler_app.registry import all_tasks
from scheduler_app.retention import refusal_finding
from scheduler_app.schedules.recurrence import occurrences_after
from scheduler_app.sends.stale import (
    STALE_MESSAGES,
    refused_messages,
    stale_messages_summary,
)
from scheduler_app.sends.states import STALE_PREFIX
from scheduler_app.sends.task_names import SEND_MESSAGE_TASK
from scheduler_app.targets import CADENCE_SLACK, NO_TARGETS, Targets

Kind = Alert.Kind
#: The lateness target is compared with the p95 over this window.
LATENESS_WINDOW = dt.timedelta(hours=24)
#: A single message the stale-send guard refused stays an alert this long (or until retried).
#: A batch's complaints and bounces are alerted on while they are this recent.
FEEDBACK_ALERT_WINDOW = dt.timedelta(days=7)
#: Gaps between this many next occurrences give a cron schedule's longest period.
CADENCE_SAMPLE = 30


@dataclasses.dataclass(frozen=True, kw_only=True)
class Finding:
    """A breach found now: what it is about, in words, in numbers, and where to look."""

    kind: str
    subject: str
    summary: str
    numbers: dict[str, Any]
    admin_url: str = ""


def _seconds(delta: dt.timedelta) -> float:
    return round(delta.total_seconds(), 3)


def _jobs_link(**query: str) -> str:
    return admin_link("scheduler_app_job_changelist", query=query)


# -- targets -----------------------------------------------------------------


def expected_cadence(schedule: Schedule, now: dt.datetime) -> dt.timedelta | None:
    """Return how long the schedule may go without a success before it is absent.

    Its own ``expected_every``, else its task's, else 1.1 x its longest gap
    between occurrences (its interval for fixed rate; for fixed delay its interval
    plus how long its latest success ran, since the delay counts from the end of a
    run) plus the misfire grace and jitter. None: it cannot be evaluated.
    """
    declared = schedule.expected_every or _task_target(schedule.task_name).expected_every
    if declared:
        return declared
    if schedule.kind == Schedule.Kind.CRON:
        try:
            times = list(itertools.islice(occurrences_after(schedule, now), CADENCE_SAMPLE + 1))
        except Exception:  # an invalid stored schedule: its own error says so elsewhere
            return None
        if len(times) < 2:
            return None
        period = max(later - earlier for earlier, later in itertools.pairwise(times))
    else:
        period = schedule.interval
    try:
        if schedule.kind == Schedule.Kind.FIXED_DELAY:
            period += _last_took(schedule) or dt.timedelta(0)
        return period * CADENCE_SLACK + schedule.misfire_grace + schedule.jitter
    except OverflowError:  # durations stored unvalidated, beyond LONGEST_DURATION
        return None


def _task_target(task_name: str) -> Targets:
    spec = all_tasks().get(task_name)
    return spec.targets if spec else NO_TARGETS


# -- rules ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Situation:
    """What every rule needs: the database's time, the enabled schedules, the targets."""

    now: dt.datetime
    schedules: list[Schedule]
    targets: dict[str, Targets]


def late(situation: Situation) -> list[Finding]:
    """Tasks whose first attempts' p95 lateness over 24 h exceeds their lateness target."""
    limits = {n: t.lateness_target for n, t in situation.targets.items() if t.lateness_target}
    if not limits:
        return []
    rows = lateness_by_task(
        situation.now - LATENESS_WINDOW,
        situation.now,
        task_names=sorted(limits),
        first_attempts=True,
    )
    return [
        Finding(
            kind=Kind.LATE,
            subject="task:%s" % row.task_name,
            summary="Task %s starts late: p95 lateness %.0fs over 24 h, target %.0fs."
            % (row.task_name, row.p95, limits[row.task_name].total_seconds()),
            numbers={
                "p95_seconds": round(row.p95, 3),
                "target_seconds": _seconds(limits[row.task_name]),
                "first_attempts": row.count,
                "max_seconds": round(row.max, 3),
            },
            admin_url=admin_link("scheduler_app_latenessoverview_changelist"),
        )
        for row in rows
        if row.p95 > limits[row.task_name].total_seconds()
    ]


def overdue(situation: Situation) -> list[Finding]:
    """Tasks with jobs due for longer than OVERDUE_AFTER that have not started."""
    after = dt.timedelta(seconds=app_settings.OVERDUE_AFTER)
    rows = (
        Job.objects.due(situation.now - after)
        .values("task_name")
        .annotate(jobs=Count("id"), oldest=Min("run_at"))
        .order_by("task_name")
    )
    return [
        Finding(
            kind=Kind.OVERDUE,
            subject="task:%s" % row["task_name"],
            summary="%s job(s) of %s are overdue: due since %s and not started."
            % (row["jobs"], row["task_name"], row["oldest"].isoformat()),
            numbers={
                "jobs": row["jobs"],
                "oldest_due": row["oldest"].isoformat(),
                "waiting_seconds": _seconds(situation.now - row["oldest"]),
                "overdue_after_seconds": _seconds(after),
            },
            admin_url=_jobs_link(task_name=row["task_name"], status="pending"),
        )
        for row in rows
    ]


def absent(situation: Situation) -> list[Finding]:
    """Schedules (and tasks declaring ``expected_every``) with no success within the cadence.

    Successes and history retention deleted count too (``AlertMemory``).
    """
    memory = AlertMemory.objects.in_bulk(field_name="subject")
    findings = []
    scheduled_tasks = set()
    for schedule in situation.schedules:
        scheduled_tasks.add(schedule.task_name)
        subject = "schedule:%s" % schedule.name
        remembered = memory.get(subject)
        window = expected_cadence(schedule, situation.now)
        since = situation.now - window if window else None
        if since is None or schedule.created_at > since:
            continue  # younger than its window: it cannot have missed yet
        succeeded = ScheduleOccurrence.objects.filter(
            schedule=schedule,
            occurrence_at__gte=since - window,
            job__status=Job.Status.SUCCEEDED,
            job__finished_at__gte=since,
        ).exists()
        if not succeeded and not _remembered_since(remembered, since):
            ran = Job.objects.filter(schedule_occurrences__schedule=schedule)
            findings.append(_absent(subject, schedule.task_name, window, ran, remembered))
    for task_name, targets in situation.targets.items():
        window = targets.expected_every
        if not window or task_name in scheduled_tasks:
            continue
        since = situation.now - window
        subject = "task:%s" % task_name
        remembered = memory.get(subject)
        finished = Job.objects.filter(task_name=task_name)
        has_history = finished.filter(
            status__in=[Job.Status.SUCCEEDED, Job.Status.FAILED], finished_at__lt=since
        ).exists() or bool(
            remembered and remembered.first_finished_at and remembered.first_finished_at < since
        )
        if (
            has_history
            and not finished.filter(status=Job.Status.SUCCEEDED, finished_at__gte=since).exists()
            and not _remembered_since(remembered, since)
        ):
            findings.append(_absent(subject, task_name, window, finished, remembered))
    return findings


def _last_took(schedule: Schedule) -> dt.timedelta | None:
    """Return how long the schedule's latest success ran (pruned ones included)."""
    if schedule.pk is None:
        return None  # not saved: it has not run
    # Newest occurrence first, through the (schedule, occurrence_at) unique index: a fixed
    # delay's runs do not overlap, so the newest success is also the last to finish.
    latest = (
        ScheduleOccurrence.objects.filter(schedule=schedule, job__status=Job.Status.SUCCEEDED)
        .order_by("-occurrence_at")
        .values_list("job__finished_at", "job__started_at")
        .first()
    )
    if latest is not None and latest[1] is not None:
        return latest[0] - latest[1]
    remembered = AlertMemory.objects.filter(subject="schedule:%s" % schedule.name).first()
    return remembered.last_success_took if remembered else None


def _remembered_since(remembered: AlertMemory | None, since: dt.datetime) -> bool:
    return bool(remembered and remembered.last_success_at and remembered.last_success_at >= since)


def _absent(
    subject: str,
    task_name: str,
    window: dt.timedelta,
    jobs: QuerySet[Job],
    remembered: AlertMemory | None,
) -> Finding:
    """Return the absent finding; its last success is the latest among ``jobs`` (the subject's
    own: a schedule's occurrences, not every job of its task) and the remembered one."""
    found = [
        jobs.filter(status=Job.Status.SUCCEEDED)
        .order_by("-finished_at")
        .values_list("finished_at", flat=True)
        .first(),
        remembered.last_success_at if remembered else None,
    ]
    last = max((at for at in found if at is not None), default=None)
    return Finding(
        kind=Kind.ABSENT,
        subject=subject,
        summary="%s has not succeeded for longer than %s (last success: %s)."
        % (subject, window, last.isoformat() if last else "never"),
        numbers={
            "expected_every_seconds": _seconds(window),
            "last_success": last.isoformat() if last else None,
        },
        admin_url=_jobs_link(task_name=task_name),
    )


def suspicious_success(situation: Situation) -> list[Finding]:
    """Tasks whose last ``zero_runs_alert`` successes (pruned ones included, from
    ``AlertMemory``) all counted 0 items under ``count_key``."""
    findings = []
    for task_name, targets in sorted(situation.targets.items()):
        runs, key = targets.zero_runs_alert, targets.count_key
        if not runs or not key:
            continue
        results = _latest_results(task_name, runs)
        if len(results) == runs and all(_counted_zero(result, key) for result in results):
            findings.append(
                Finding(
                    kind=Kind.SUSPICIOUS_SUCCESS,
                    subject="task:%s" % task_name,
                    summary="The last %s successful runs of %s processed 0 items (%r)."
                    % (runs, task_name, key),
                    numbers={"zero_runs": runs, "count_key": key},
                    admin_url=_jobs_link(task_name=task_name, status="succeeded"),
                )
            )
    return findings


def _latest_results(task_name: str, runs: int) -> list[Any]:
    """Return the results of the task's latest ``runs`` successes, newest first."""
    live = list(
        Job.objects.filter(task_name=task_name, status=Job.Status.SUCCEEDED)
        .order_by("-finished_at")
        .values_list("pk", "result")[:runs]
    )
    results = [result for _, result in live]
    if len(results) < runs:
        kept = {pk for pk, _ in live}
        remembered = AlertMemory.objects.filter(subject="task:%s" % task_name).first()
        for entry in remembered.recent_results if remembered else []:
            if entry["job"] not in kept and len(results) < runs:
                results.append(entry["result"])
    return results


def _counted_zero(result: Any, key: str) -> bool:
    """Return True if ``result`` says it processed 0 items; a result without the key never does."""
    if not isinstance(result, dict) or key not in result:
        return False
    value = result[key]
    return not isinstance(value, bool) and isinstance(value, int | float) and value == 0


def failing(situation: Situation) -> list[Finding]:
    """Tasks whose final failures over FAILING_WINDOW exceed FAILING_RATE of their finished jobs."""
    window = dt.timedelta(seconds=app_settings.FAILING_WINDOW)
    rate = app_settings.FAILING_RATE
    rows = (
        Job.objects.filter(
            status__in=[Job.Status.SUCCEEDED, Job.Status.FAILED],
            finished_at__gte=situation.now - window,
        )
        .values("task_name")
        .annotate(finished=Count("id"), failed=Count("id", filter=Q(status=Job.Status.FAILED)))
        .order_by("task_name")
    )
    return [
        Finding(
            kind=Kind.FAILING,
            subject="task:%s" % row["task_name"],
            summary="%s of %s jobs of %s failed for good in the last %s."
            % (row["failed"], row["finished"], row["task_name"], window),
            numbers={
                "failed": row["failed"],
                "finished": row["finished"],
                "rate": round(row["failed"] / row["finished"], 4),
                "threshold": rate,
                "window_seconds": _seconds(window),
            },
            admin_url=_jobs_link(task_name=row["task_name"], status="failed"),
        )
        for row in rows
        if row["failed"] and row["failed"] / row["finished"] > rate
    ]


def long_running(situation: Situation) -> list[Finding]:
    """Tasks with a run that has been running for longer than their ``max_runtime``."""
    limits = {n: t.max_runtime for n, t in situation.targets.items() if t.max_runtime}
    if not limits:
        return []
    longest: dict[str, tuple[int, dt.timedelta]] = {}
    # No started_at: published to Celery, not started yet (see celery.relay).
    running = Job.objects.running().filter(task_name__in=sorted(limits), started_at__isnull=False)
    for task_name, started_at in running.values_list("task_name", "started_at"):
        runtime = situation.now - started_at
        if runtime > limits[task_name]:
            count, worst = longest.get(task_name, (0, runtime))
            longest[task_name] = (count + 1, max(worst, runtime))
    return [
        Finding(
            kind=Kind.LONG_RUNNING,
            subject="task:%s" % task_name,
            summary="%s run(s) of %s exceed the maximum runtime of %s (longest: %s)."
            % (count, task_name, limits[task_name], worst),
            numbers={
                "runs": count,
                "longest_seconds": _seconds(worst),
                "max_runtime_seconds": _seconds(limits[task_name]),
            },
            admin_url=_jobs_link(task_name=task_name, status="running"),
        )
        for task_name, (count, worst) in sorted(longest.items())
    ]


def stalled_send(situation: Situation) -> list[Finding]:
    """Sending batches that marked nobody for STALLED_SEND_AFTER while recipients were due
    (or were put off by the provider without being tried)."""
    after = dt.timedelta(seconds=app_settings.STALLED_SEND_AFTER)
    cutoff = situation.now - after
    batches = (
        SendBatch.objects.filter(status=SendBatch.Status.SENDING)
        .with_lane_counts()
        .alias(
            last=Coalesce(
                Greatest(
                    Coalesce("progressed_at", "lanes_progressed_at"),
                    Coalesce("lanes_progressed_at", "progressed_at"),
                ),
                "started_at",
            )
        )
        .filter(last__lt=cutoff)
    )
    findings = []
    for batch in batches:
        # Due before the cutoff, or put off untried by a provider's SlowDown (which moves
        # their due time ahead every time: a mail server that cannot be reached, a 429).
        waiting = Recipient.objects.filter(
            Q(next_attempt_at__lte=cutoff) | (Q(attempts=0) & ~Q(last_error="")),
            batch=batch,
            status=Recipient.Status.PENDING,
            is_seed=False,
        )
        if not waiting.exists():
            continue
        last = batch.last_progress() or batch.started_at
        findings.append(
            Finding(
                kind=Kind.STALLED_SEND,
                subject="batch:%s" % batch.pk,
                summary="Send %r (batch %s) has marked no recipient since %s while recipients "
                "are due." % (batch.name, batch.pk, last.isoformat()),
                numbers={
                    "last_progress": last.isoformat(),
                    "sent": batch.sent,
                    "total": batch.total,
                    "stalled_after_seconds": _seconds(after),
                },
                admin_url=admin_link("scheduler_app_sendbatch_change", batch.pk),
            )
        )
    return findings


def no_worker(situation: Situation) -> list[Finding]:
    """Queues with due jobs that no live worker serves."""
    lost_after = dt.timedelta(seconds=app_settings.WORKER_LOST_AFTER)
    served: set[str] = set()
    for queues in WorkerHeartbeat.objects.live(lost_after).values_list("queues", flat=True):
        served.update(queues or [])
    findings = []
    for queue in app_settings.QUEUES:
        if queue in served:
            continue
        oldest = (
            Job.objects.due(situation.now)
            .filter(queue=queue)
            .order_by("run_at")
            .values_list("run_at", flat=True)
            .first()
        )
        if oldest is None:
            continue
        findings.append(
            Finding(
                kind=Kind.NO_WORKER,
                subject="queue:%s" % queue,
                summary="No live worker serves queue %r, which has due jobs (oldest due %s)."
                % (queue, oldest.isoformat()),
                numbers={
                    "oldest_due": oldest.isoformat(),
                    "live_workers": WorkerHeartbeat.objects.live(lost_after).count(),
                    "lost_after_seconds": _seconds(lost_after),
                },
                admin_url=admin_link("scheduler_app_workerheartbeat_changelist"),
            )
        )
    return findings


def stale_send(situation: Situation) -> list[Finding]:
    """Batches the stale-send guard paused (until resumed or cancelled), and the single
    messages it refused in the last STALE_MESSAGE_WINDOW (one alert for all of them, until
    each is retried)."""
    paused = SendBatch.objects.filter(
        status=SendBatch.Status.PAUSED, status_reason__startswith=STALE_PREFIX
    )
    return [
        Finding(
            kind=Kind.STALE_SEND,
            subject="batch:%s" % batch.pk,
            summary="Send %r (batch %s) was not started: %s" % (batch.name, batch.pk, reason),
            numbers={
                "scheduled_at": batch.scheduled_at.isoformat() if batch.scheduled_at else None,
                "stale_send_after_seconds": app_settings.STALE_SEND_AFTER,
            },
            admin_url=admin_link("scheduler_app_sendbatch_change", batch.pk),
        )
        for batch in paused.only("pk", "name", "scheduled_at", "status_reason")
        for reason in [batch.status_reason]
    ] + _stale_messages(situation)


def _stale_messages(situation: Situation) -> list[Finding]:
    refused = refused_messages(SEND_MESSAGE_TASK, situation.now)
    latest = refused.order_by("-finished_at", "-pk").values_list("pk", "last_error").first()
    if latest is None:
        return []
    count = refused.count()
    job_id, error = latest
    return [
        Finding(
            kind=Kind.STALE_SEND,
            subject=STALE_MESSAGES,
            summary=stale_messages_summary(count, job_id, error.removeprefix("StaleSend: ")),
            numbers={
                "messages": count,
                "latest_job": job_id,
                "stale_send_after_seconds": app_settings.STALE_SEND_AFTER,
            },
            admin_url=admin_link("scheduler_app_job_change", job_id),
        )
    ]


def prune_refused(situation: Situation) -> list[Finding]:
    """The latest prune (not a dry-run) refused: its breaker tripped (until a prune succeeds)."""
    finding = refusal_finding()
    return [Finding(**finding)] if finding else []


def send_feedback(situation: Situation) -> list[Finding]:
    """Batches with complaints or hard bounces in the last FEEDBACK_ALERT_WINDOW whose rate
    passed its limit (COMPLAINT_RATE_LIMIT, BOUNCE_RATE_LIMIT)."""
    recent = (
        FeedbackEvent.objects.filter(
            recorded_at__gte=situation.now - FEEDBACK_ALERT_WINDOW,
            kind__in=(FeedbackEvent.Kind.COMPLAINT, FeedbackEvent.Kind.HARD_BOUNCE),
            batch__isnull=False,
        )
        .values_list("batch_id", flat=True)
        .distinct()
    )
    findings = []
    for batch_id, name in SendBatch.objects.filter(pk__in=recent).values_list("pk", "name"):
        breach = rate_breach(batch_id)
        if breach is not None:
            why, numbers = breach
            findings.append(
                Finding(
                    kind=Kind.SEND_FEEDBACK,
                    subject="batch:%s" % batch_id,
                    summary="Send %r (batch %s): %s." % (name, batch_id, why),
                    numbers=numbers,
                    admin_url=admin_link("scheduler_app_sendbatch_change", batch_id),
                )
            )
    return findings


#: Every rule, by the kind of alert it finds.
RULES: dict[str, Callable[[Situation], list[Finding]]] = {
    Kind.LATE: late,
    Kind.OVERDUE: overdue,
    Kind.ABSENT: absent,
    Kind.SUSPICIOUS_SUCCESS: suspicious_success,
    Kind.FAILING: failing,
    Kind.LONG_RUNNING: long_running,
    Kind.STALLED_SEND: stalled_send,
    Kind.NO_WORKER: no_worker,
    Kind.STALE_SEND: stale_send,
    Kind.PRUNE_REFUSED: prune_refused,
    Kind.SEND_FEEDBACK: send_feedback,
}
