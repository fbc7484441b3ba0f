"""Jobs and their attempt history."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import connections, models
from django.db.models import Q
from django.db.models.expressions import RawSQL
from django.utils.translation import gettext_lazy as _

from scheduler_app import clock
from scheduler_app.database_clock import DatabaseNow

#: How the unique key of a job a schedule enqueued begins (schedules.enqueuer.occurrence_key).
OCCURRENCE_KEY_PREFIX = "schedule:"
#: The partition key of partitioned job history (scheduler_app.partitions): 'infinity' for
#: every job that has not ended through the worker's finish (which sets in_history), its
#: finish time for one that has. The claim and the batched finish (migration 0032) repeat it.
HISTORY_KEY = (
    "(CASE WHEN in_history AND status IN ('succeeded', 'failed', 'cancelled')"
    " THEN COALESCE(finished_at, created_at) ELSE 'infinity'::timestamptz END)"
)
#: True of every pending and running job: the rows of the hot partition.
IN_HOT_PARTITION = "%s >= 'infinity'::timestamptz" % HISTORY_KEY


class JobQuerySet(models.QuerySet["Job"]):
    def pending(self) -> JobQuerySet:
        """Return jobs waiting to run (due or not)."""
        return self.filter(status=Job.Status.PENDING)

    def due(self, now: dt.datetime | None = None) -> JobQuerySet:
        """Return pending jobs whose run_at has come."""
        return self.pending().filter(run_at__lte=now or clock.now())

    def by_due_time(
        self, queues: list[str], paused_tasks: set[str] | frozenset[str] = frozenset()
    ) -> JobQuerySet:
        """Return pending jobs of ``queues`` no worker holds, except ``paused_tasks``',
        earliest run_at first.

        The index scheduler_job_next_due serves it: an idle worker reads the first
        row, never sorts every pending one.
        """
        return (
            self.pending()
            .hot()
            .filter(queue__in=queues, lease_expires_at__isnull=True)
            .exclude(task_name__in=paused_tasks)
            .order_by("run_at")
        )

    def running(self) -> JobQuerySet:
        """Return jobs claimed by a worker."""
        return self.filter(status=Job.Status.RUNNING).hot()

    def hot(self) -> JobQuerySet:
        """Return these jobs, on PostgreSQL with a condition every pending and running job
        meets, IN_HOT_PARTITION: on a partitioned job table (scheduler_app.partitions) it
        names the partition key, and the planner reads only the hot partition instead of
        every history partition's indexes. For queries of the job table alone (the
        condition names its columns unqualified)."""
        if connections[self.db].vendor != "postgresql":
            return self
        return self.filter(RawSQL(IN_HOT_PARTITION, (), output_field=models.BooleanField()))

    def expired_leases(self, now: dt.datetime | None = None) -> JobQuerySet:
        """Return running jobs whose lease expired by the database's clock (or ``now``)."""
        return self.running().filter(lease_expires_at__lt=now or DatabaseNow())

    def unfinished(self) -> JobQuerySet:
        """Return jobs that are pending or running."""
        return self.filter(status__in=Job.UNFINISHED)

    def finished(self) -> JobQuerySet:
        """Return jobs that ran to an end: succeeded or failed (not cancelled)."""
        return self.filter(status__in=[Job.Status.SUCCEEDED, Job.Status.FAILED])

    def first_attempt_successes(self) -> JobQuerySet:
        """Return jobs that succeeded on their first attempt (the first-attempt success rate
        is ``first_attempt_successes().count() / finished().count()``)."""
        return self.filter(status=Job.Status.SUCCEEDED, attempts=1)

    def told_by_row(self, since: dt.datetime, until: dt.datetime) -> JobQuerySet:
        """Return the first-attempt successes that started in ``[since, until)`` and that
        only their job row tells (no JobAttempt row: see Job.attempt_history())."""
        return (
            self.first_attempt_successes()
            .filter(
                started_at__gte=since,
                started_at__lt=until,
                finished_at__gte=since,  # implied; lets the finished-jobs index serve the range
            )
            .exclude(
                # Jobs finished before upgrading have their success as a row too: count it once.
                models.Exists(
                    JobAttempt.objects.filter(
                        job=models.OuterRef("pk"), outcome=JobAttempt.Outcome.SUCCEEDED
                    )
                )
            )
        )


class Job(models.Model):
    """One run of a task: scheduled, claimed by at most one worker at a time, finished."""

    class Status(models.TextChoices):
        PENDING = "pending", _("pending")
        RUNNING = "running", _("running")
        SUCCEEDED = "succeeded", _("succeeded")
        FAILED = "failed", _("failed")
        CANCELLED = "cancelled", _("cancelled")

    UNFINISHED = (Status.PENDING, Status.RUNNING)
    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    task_name = models.CharField(max_length=200)
    queue = models.CharField(max_length=100, default="default")
    priority = models.SmallIntegerField(default=0, help_text=_("Lower runs first."))
    payload = models.JSONField(default=dict, blank=True)
    payload_version = models.PositiveSmallIntegerField(default=1)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)

    # scheduled_for never changes; run_at is when the next attempt may start.
    scheduled_for = models.DateTimeField()
    run_at = models.DateTimeField()
    undo_deadline = models.DateTimeField(
        null=True, blank=True, help_text=_("Cancelling before this time is an undo.")
    )

    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=3)
    retry_later_deadline = models.DateTimeField(null=True, blank=True)

    worker_id = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Fencing token: bumped on every claim; a completion must present the current one.
    lease_token = models.BigIntegerField(default=0)

    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    result = models.JSONField(null=True, blank=True)

    # NULL, not "", for "no key": the partial unique constraint ignores NULLs.
    unique_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    # The foreign keys' indexes are the partial ones in Meta.indexes: most jobs have
    # no owner and were never cancelled by a user, and every index on this table is
    # written on each claim and finish.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="scheduler_jobs",
        db_index=False,
    )
    cancelled_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    created_at = models.DateTimeField(default=clock.now)
    #: With partitioned history (PostgreSQL: migration 0033 on a new install, or
    #: scheduler_partition): set by the worker's finish when the job ends (and by a
    #: prune run or scheduler_partition --move-history for a job that ended otherwise or
    #: before the conversion); the row then lives in the partition of its
    #: finish time (scheduler_app.partitions), which retention drops whole. False on a
    #: table that is not partitioned.
    in_history = models.BooleanField(default=False, db_default=False, editable=False)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        # POST messages/ sends email to any address: not every user may.
        permissions = [("send_message", "Can send a message through the API")]
        constraints = [
            models.UniqueConstraint(
                fields=["task_name", "unique_key"],
                condition=Q(status__in=["pending", "running"]),
                name="scheduler_job_unique_key_unfinished",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["pending", "running", "succeeded", "failed", "cancelled"]),
                name="scheduler_job_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="scheduler_job_max_attempts_positive"
            ),
        ]
        indexes = [
            # The claim query's ORDER BY, so a claim reads only the rows it
            # takes (the queue is a filter: a worker usually serves several);
            # only pending rows, so millions of finished rows cost nothing.
            models.Index(
                fields=["priority", "run_at", "id"],
                condition=Q(status="pending"),
                name="scheduler_job_claimable",
            ),
            # The idle worker's "when is the next job due" look-up (by_due_time): the
            # earliest run_at without sorting every pending row. Its condition names
            # lease_expires_at, which the claim does not test, so that the planner can
            # never range-scan it for a claim and sort every due job.
            models.Index(
                fields=["run_at"],
                condition=Q(status="pending", lease_expires_at__isnull=True),
                name="scheduler_job_next_due",
            ),
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status="running"),
                name="scheduler_job_leases",
            ),
            # An owner's jobs, newest first (the API's lists); only jobs that have one.
            models.Index(
                fields=["owner", "-id"],
                condition=Q(owner__isnull=False),
                name="scheduler_job_owned",
            ),
            # Deleting a user sets cancelled_by to NULL on the jobs they cancelled.
            models.Index(
                fields=["cancelled_by"],
                condition=Q(cancelled_by__isnull=False),
                name="scheduler_job_cancelled_by",
            ),
            # A schedule's runs that are pending or running (its overlap check, and a
            # fixed-delay schedule's wait for its run to end, every scheduler tick): only
            # jobs a schedule enqueued, whose unique key is their occurrence's, and only
            # while unfinished, so it stays a few entries whatever the history.
            models.Index(
                fields=["id"],
                condition=Q(
                    status__in=["pending", "running"],
                    unique_key__startswith=OCCURRENCE_KEY_PREFIX,
                ),
                name="scheduler_job_runs_unfinished",
            ),
            # The pruner's query: finished jobs oldest first, read straight from the index.
            models.Index(
                fields=["finished_at"],
                condition=Q(status__in=["succeeded", "failed", "cancelled"]),
                name="scheduler_job_prunable",
            ),
            # The alert rules: a task's latest successes (absent, suspicious success) and
            # final outcomes (failing reads scheduler_job_prunable); with the unique key's
            # index, which starts with the task name too, a task's jobs in any status (the
            # API's task filter, api.serializers.JobFilterSerializer). Only finished jobs,
            # so that a claim does not write it.
            models.Index(
                fields=["task_name", "status", "finished_at"],
                condition=Q(status__in=["succeeded", "failed", "cancelled"]),
                name="scheduler_job_task_ends",
            ),
        ]

    def __str__(self) -> str:
        return "%s #%s (%s)" % (self.task_name, self.pk, self.status)

    @property
    def idempotency_key(self) -> str:
        """Return the key handlers use to make reruns safe: unique_key, else the job id."""
        return self.unique_key or str(self.pk)

    @property
    def lateness(self) -> dt.timedelta | None:
        """Return how late the latest attempt started relative to when it was due."""
        return self.started_at - self.run_at if self.started_at else None

    def attempt_history(self) -> list[JobAttempt]:
        """Return every attempt of this job, oldest first.

        Failures, retries, deferrals, rescues and hand-backs are JobAttempt
        rows; a first attempt that succeeded is told by the job row alone (it
        writes no JobAttempt row), so it is added here as an unsaved JobAttempt.
        """
        recorded = list(self.recorded_attempts.order_by("id"))
        if self.status == Job.Status.SUCCEEDED and not any(
            a.outcome == JobAttempt.Outcome.SUCCEEDED for a in recorded
        ):
            recorded.append(JobAttempt.from_job_row(self))
        return recorded


class JobAttempt(models.Model):
    """One attempt of a job: when it was due, when it ran, how it ended."""

    class Outcome(models.TextChoices):
        SUCCEEDED = "succeeded", _("succeeded")
        FAILED = "failed", _("failed")
        RETRIED = "retried", _("failed, will retry")
        DEFERRED = "deferred", _("retry later (no attempt used)")
        LEASE_EXPIRED = "lease_expired", _("lease expired")
        INTERRUPTED = "interrupted", _("handed back at shutdown")

    # No database constraint: a partitioned job table has no unique constraint on id
    # alone (scheduler_app.partitions). Retention deletes a job's attempts with it.
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="recorded_attempts", db_constraint=False
    )
    attempt = models.PositiveIntegerField()
    task_name = models.CharField(max_length=200)
    worker_id = models.CharField(max_length=200, blank=True, default="")
    due_at = models.DateTimeField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["job", "id"]
        indexes = [
            models.Index(fields=["task_name", "started_at"], name="scheduler_attempt_task"),
            # Recent attempts of every task (metrics, lateness charts): a range of this index.
            models.Index(fields=["started_at"], name="scheduler_attempt_started"),
        ]

    def __str__(self) -> str:
        return "%s attempt %s: %s" % (self.job_id, self.attempt, self.outcome)

    @classmethod
    def from_job_row(cls, job: Job) -> JobAttempt:
        """Return (unsaved) the attempt a succeeded job's row describes: its last one."""
        assert job.started_at is not None and job.finished_at is not None
        return cls(
            job=job,
            attempt=job.attempts,
            task_name=job.task_name,
            worker_id=job.worker_id,
            due_at=job.run_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            outcome=cls.Outcome.SUCCEEDED,
        )

    @property
    def lateness(self) -> dt.timedelta:
        """Return started_at - due_at."""
        return self.started_at - self.due_at


class LatenessOverview(Job):
    """A proxy so the lateness page is listed (and permissioned) in the admin index."""

    class Meta:
        proxy = True
        verbose_name = "lateness overview"
        verbose_name_plural = "lateness overview"


class OperationsOverview(Job):
    """A proxy so the operations overview page is listed (and permissioned) in the admin index."""

    class Meta:
        proxy = True
        verbose_name = "operations overview"
        verbose_name_plural = "operations overview"
