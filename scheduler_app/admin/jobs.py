"""Jobs: read-only rows with cancel, run-now and retry actions."""

from __future__ import annotations

import collections
import datetime as dt
import threading
from typing import Any

from django.contrib import admin, messages
from django.db import IntegrityError, OperationalError
from django.db.models import F, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from scheduler_app import clock, database, partitions
from scheduler_app.admin.base import SchedulerModelAdmin
from scheduler_app.admin.display import paused_banner, report_counts, seconds
from scheduler_app.admin.filters import QueueFilter, TaskNameFilter
from scheduler_app.admin.pagination import BoundedPaginator
from scheduler_app.cancellation import CancelOutcome, cancel
from scheduler_app.conf import app_settings
from scheduler_app.controls import paused_scopes
from scheduler_app.exceptions import SendLaneNotCancellable
from scheduler_app.models import Job, SendBatch
from scheduler_app.sends.task_names import SEND_BATCH_TASK

#: The columns of a job's attempt history on its admin page.
ATTEMPT_COLUMNS = (
    "attempt",
    "outcome",
    "worker",
    "due",
    "started",
    "finished",
    "lateness",
    "error",
)

#: The job page's buttons, by page action.
PAGE_BUTTON_LABELS = {
    "cancel": "Cancel this job",
    "run_now": "Run now",
    "retry": "Retry (one more attempt)",
}

CANCEL_LABELS = {
    CancelOutcome.CANCELLED: (
        "%(count)d job cancelled.",
        "%(count)d jobs cancelled.",
        messages.SUCCESS,
    ),
    CancelOutcome.ALREADY_CANCELLED: (
        "%(count)d job was already cancelled.",
        "%(count)d jobs were already cancelled.",
        messages.INFO,
    ),
    CancelOutcome.TOO_LATE: (
        "%(count)d job not cancelled: too late, it is already running.",
        "%(count)d jobs not cancelled: too late, they are already running.",
        messages.WARNING,
    ),
    CancelOutcome.ALREADY_FINISHED: (
        "%(count)d job not cancelled: it already finished.",
        "%(count)d jobs not cancelled: they already finished.",
        messages.WARNING,
    ),
    CancelOutcome.NOT_FOUND: (
        "%(count)d job no longer exists.",
        "%(count)d jobs no longer exist.",
        messages.WARNING,
    ),
}


def run_pending_now(pending: QuerySet, *, now: dt.datetime) -> tuple[list[int], list[int]]:
    """Move ``pending`` jobs to ``now``, but never into an undo window; return the ids
    (moved, held).

    A job inside its undo window (plus UNDO_SAFETY_MARGIN) is held to the
    window's end; a send lane keeps its batch's window. The caller locks the
    rows (and ``pending`` filters on ``status = pending``), so what is listed
    is what is updated.
    """
    margin = dt.timedelta(seconds=app_settings.UNDO_SAFETY_MARGIN)
    in_window = Q(undo_deadline__gt=now - margin)
    jobs = pending.exclude(task_name=SEND_BATCH_TASK)
    held = list(jobs.filter(in_window).values_list("pk", flat=True))
    moved = list(jobs.exclude(in_window).values_list("pk", flat=True))
    pending.filter(pk__in=held).update(run_at=F("undo_deadline") + margin)
    lanes = pending.filter(task_name=SEND_BATCH_TASK)
    batches = {payload["batch"] for payload in lanes.values_list("payload", flat=True)}
    windows = SendBatch.objects.filter(pk__in=batches).filter(in_window)
    for batch_id, deadline in windows.values_list("pk", "undo_deadline"):
        batch_lanes = lanes.filter(payload__batch=batch_id)
        held += batch_lanes.values_list("pk", flat=True)
        batch_lanes.update(run_at=deadline + margin)
        batches.discard(batch_id)
    moved += lanes.filter(payload__batch__in=batches).values_list("pk", flat=True)
    pending.filter(pk__in=moved).update(run_at=now)
    return moved, held


# The kill-switch state read once per changelist request (admin objects are shared).
_request_state = threading.local()


class LateFilter(admin.SimpleListFilter):
    title = "lateness"
    parameter_name = "late"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("overdue", "Due and not started"), ("late_start", "Started over 60 s late")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "overdue":
            return queryset.filter(status=Job.Status.PENDING, run_at__lt=clock.now())
        if self.value() == "late_start":
            return queryset.filter(started_at__gt=F("run_at") + dt.timedelta(seconds=60))
        return queryset


@admin.register(Job)
class JobAdmin(SchedulerModelAdmin):
    empty_text = (
        "No jobs yet: code schedules them (schedule(), a task's enqueue) and recurring "
        "schedules add theirs when they come due."
    )
    list_display = [
        "id",
        "task_name",
        "status_display",
        "scheduled_for",
        "started_at",
        "lateness_display",
        "attempts",
        "owner",
    ]
    # The queue is a filter, not a column: the list fits 1280 px (#38).
    # Each page load stays a few reads however long the history (#14): filters offer
    # what the code knows, the count stops at BoundedPaginator.limit, no facet counts
    # and no date hierarchy (both read the whole table).
    list_filter = ["status", LateFilter, QueueFilter, TaskNameFilter]
    search_fields = ["=id", "task_name", "unique_key"]
    list_select_related = ["owner"]
    paginator = BoundedPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions = ["cancel_jobs", "run_now", "retry_failed"]
    page_actions = {"cancel": "cancel_jobs", "run_now": "run_now", "retry": "retry_failed"}
    change_form_template = "admin/scheduler_app/job_change_form.html"
    fieldsets = [
        (None, {"fields": ["task_name", "status", "queue", "priority", "owner", "undo_display"]}),
        (
            "Timing",
            {
                "fields": [
                    "scheduled_for",
                    "run_at",
                    "started_at",
                    "finished_at",
                    "lateness_display",
                ]
            },
        ),
        (
            "Attempts",
            {"fields": ["attempts", "max_attempts", "worker_id", "lease_expires_at", "last_error"]},
        ),
        ("Attempt history", {"fields": ["attempt_history_display"]}),
        ("Data", {"fields": ["payload", "payload_version", "unique_key", "result"]}),
        ("Cancellation", {"fields": ["cancelled_at", "cancelled_by"]}),
    ]

    # Status, attempts and leases change only through the worker and the actions.
    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f for fieldset in self.fieldsets for f in fieldset[1]["fields"]]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A job's page is a view page (nothing on it can be saved); "change" is what its
        # buttons and the list actions need.
        return obj is None and super().has_change_permission(request)

    def page_action_applies(self, name: str, obj: Any) -> bool:
        if name == "retry":
            return obj.status == Job.Status.FAILED
        # A send lane is cancelled with its batch, not on its own.
        lane = name == "cancel" and obj.task_name == SEND_BATCH_TASK
        return obj.status == Job.Status.PENDING and not lane

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        job = self.get_object(request, object_id)
        if job is not None:
            extra_context = {
                **(extra_context or {}),
                "page_buttons": [
                    (name, PAGE_BUTTON_LABELS[name])
                    for name in self.offered_page_actions(request, job)
                ],
            }
        return super().change_view(request, object_id, form_url, extra_context)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Deleting would get round cancel's rules (a running job, a send lane) and records;
        # retention removes finished jobs.
        return False

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        _request_state.paused = paused_scopes()
        if request.method == "GET":
            paused_banner(request, _request_state.paused)
        return super().changelist_view(request, extra_context)

    @admin.display(description="status", ordering="status")
    def status_display(self, job: Job) -> str:
        paused = getattr(_request_state, "paused", None)
        if (
            job.status == Job.Status.PENDING
            and paused
            and paused.covers(queue=job.queue, task_name=job.task_name)
        ):
            return format_html("{} <strong>(paused)</strong>", job.get_status_display())
        return job.get_status_display()

    @admin.display(description="lateness")
    def lateness_display(self, job: Job) -> str:
        return seconds(job.lateness)

    @admin.display(description="attempts")
    def attempt_history_display(self, job: Job) -> str:
        history = job.attempt_history()
        if not history:
            return "-"
        header = format_html_join("", "<th>{}</th>", ((h,) for h in ATTEMPT_COLUMNS))
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td>{}</td><td><pre>{}</pre></td></tr>",
            (
                (
                    a.attempt,
                    a.get_outcome_display(),
                    a.worker_id or "-",
                    a.due_at,
                    a.started_at,
                    a.finished_at,
                    seconds(a.lateness),
                    a.error,
                )
                for a in history
            ),
        )
        return format_html(
            "<table><thead><tr>{}</tr></thead><tbody>{}</tbody></table>", header, rows
        )

    @admin.display(description="undo")
    def undo_display(self, job: Job) -> str:
        if job.undo_deadline is None:
            return "-"
        return format_html(
            '<span class="scheduler-countdown" data-deadline="{}">until {}</span>',
            job.undo_deadline.isoformat(),
            timezone.localtime(job.undo_deadline).strftime("%H:%M:%S"),
        )

    @admin.action(description="Cancel selected jobs", permissions=["change"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet) -> None:
        counts: collections.Counter[CancelOutcome] = collections.Counter()
        lanes, cancelled = [], []
        for pk in queryset.values_list("pk", flat=True):
            try:
                outcome = cancel(pk, by=request.user)
            except SendLaneNotCancellable as exc:
                lanes.append(exc.params)
                continue
            counts[outcome] += 1
            if outcome.changed:
                cancelled.append(pk)
        self.log_changes(request, cancelled, "Cancelled.")
        report_counts(request, self, counts, CANCEL_LABELS)
        for lane in lanes:
            self.message_user(
                request,
                format_html(
                    "Job {} not cancelled: it is a lane of send batch {}, which cannot be "
                    'cancelled on its own. Cancel the batch instead (the "Cancel" action on '
                    '<a href="{}">send batch {}</a>).',
                    lane["job"],
                    lane["batch"],
                    reverse(
                        "%s:scheduler_app_sendbatch_change" % self.admin_site.name,
                        args=[lane["batch"]],
                    ),
                    lane["batch"],
                ),
                messages.ERROR,
            )

    @admin.action(description="Run selected pending jobs now", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet) -> None:
        selected = list(queryset.filter(status=Job.Status.PENDING).values_list("pk", flat=True))
        with database.atomic():
            # Locked first (the list takes the locks): a worker cannot claim a job between
            # run_pending_now's lists and its updates, so the history names what moved.
            pending = Job.objects.filter(pk__in=selected, status=Job.Status.PENDING)
            list(pending.select_for_update().values_list("pk", flat=True))
            moved_pks, held_pks = run_pending_now(pending, now=clock.now())
        self.log_changes(request, moved_pks, "Run now.")
        self.log_changes(request, held_pks, "Run at the end of its undo window.")
        moved, held = len(moved_pks), len(held_pks)
        counts = {"moved": moved, "held": held, "skipped": queryset.count() - moved - held}
        report_counts(
            request,
            self,
            counts,
            {
                "moved": (
                    "%(count)d job will run now.",
                    "%(count)d jobs will run now.",
                    messages.SUCCESS,
                ),
                "held": (
                    "%(count)d job is inside its undo window: it will run once the window "
                    "and its safety margin have passed, not before.",
                    "%(count)d jobs are inside their undo window: they will run once the "
                    "window and its safety margin have passed, not before.",
                    messages.WARNING,
                ),
                "skipped": (
                    "%(count)d job skipped: only pending jobs can run now.",
                    "%(count)d jobs skipped: only pending jobs can run now.",
                    messages.WARNING,
                ),
            },
        )

    @admin.action(
        description="Retry selected failed jobs (one more attempt)", permissions=["change"]
    )
    def retry_failed(self, request: HttpRequest, queryset: QuerySet) -> None:
        counts: collections.Counter[str] = collections.Counter()
        retried_pks = []
        for pk in queryset.values_list("pk", flat=True):
            outcome = _retry(pk)
            counts[outcome] += 1
            if outcome == "retried":
                retried_pks.append(pk)
        self.log_changes(request, retried_pks, "Retried: one more attempt.")
        report_counts(
            request,
            self,
            counts,
            {
                "retried": (
                    "%(count)d failed job will be retried.",
                    "%(count)d failed jobs will be retried.",
                    messages.SUCCESS,
                ),
                "skipped": (
                    "%(count)d job skipped: only failed jobs can be retried.",
                    "%(count)d jobs skipped: only failed jobs can be retried.",
                    messages.WARNING,
                ),
                "key_taken": (
                    "%(count)d job not retried: another job with its unique key is "
                    "pending or running.",
                    "%(count)d jobs not retried: another job with their unique key is "
                    "pending or running.",
                    messages.ERROR,
                ),
            },
        )


def _retry(pk: int) -> str:
    """Give failed job ``pk`` one more attempt now; return "retried", "skipped" (it had not
    failed) or "key_taken" (another unfinished job holds its unique key)."""
    tries = 1
    while True:
        try:
            with database.atomic():
                retried = Job.objects.filter(pk=pk, status=Job.Status.FAILED).update(
                    status=Job.Status.PENDING,
                    run_at=clock.now(),
                    finished_at=None,
                    max_attempts=F("attempts") + 1,
                )
        except IntegrityError:
            return "key_taken"
        except OperationalError as exc:
            if not partitions.moved_meanwhile(exc) or tries == 3:
                raise
            tries += 1  # a prune moved it into history while the UPDATE waited: again
            continue
        return "retried" if retried else "skipped"
