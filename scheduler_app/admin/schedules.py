"""Recurring schedules: enable/disable, validated editing, next-run preview, last runs."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from scheduler_app import clock, database
from scheduler_app.admin.base import SchedulerModelAdmin, form_checked
from scheduler_app.admin.display import report_counts, seconds
from scheduler_app.admin.pagination import BoundedPaginator
from scheduler_app.alerts.rules import expected_cadence
from scheduler_app.exceptions import ValidationError
from scheduler_app.models import Schedule, ScheduleOccurrence
from scheduler_app.schedules.declared import prune_declared_schedules
from scheduler_app.schedules.recurrence import next_run_times
from scheduler_app.scheduling import check_payload
from scheduler_app.targets import TARGET_FIELDS

PREVIEW_COUNT = 10
#: The occurrences a schedule's page lists (all of them: ScheduleOccurrenceAdmin).
LAST_RUNS = 20


class ScheduleForm(forms.ModelForm):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Django's split date/time widget puts plain "Date:" and "Time:" text before its two
        # boxes, not labels: name each box for screen readers.
        start_at = self.fields.get("start_at")
        if start_at is not None and isinstance(start_at.widget, forms.MultiWidget):
            date, time = start_at.widget.widgets
            date.attrs["aria-label"] = "Start at: date"
            time.attrs["aria-label"] = "Start at: time"

    def clean_payload(self) -> Any:
        value = self.cleaned_data["payload"]
        # Blank means "no payload"; the column is NOT NULL.
        return form_checked(check_payload, {} if value is None else value)


@admin.display(description="job status")
def job_status(occurrence: ScheduleOccurrence) -> str:
    """Return the status of the job ``occurrence`` enqueued, or "-"."""
    return occurrence.job.get_status_display() if occurrence.job else "-"


@admin.display(description="lateness")
def lateness(occurrence: ScheduleOccurrence) -> str:
    """Return how late the job ``occurrence`` enqueued started, or "-"."""
    return seconds(occurrence.job.lateness) if occurrence.job else "-"


class LatestOccurrencesFormSet(BaseInlineFormSet):
    """Only a schedule's LAST_RUNS latest occurrences, whatever its history."""

    def get_queryset(self) -> QuerySet:
        # Sliced once ordered: the formset orders its queryset first (Django 6 adds the
        # primary key to an ordering it cannot prove total), and a slice cannot be reordered.
        queryset = super().get_queryset()
        if not queryset.query.is_sliced:
            queryset = self._queryset = queryset[:LAST_RUNS]
        return queryset


class OccurrenceInline(admin.TabularInline):
    model = ScheduleOccurrence
    formset = LatestOccurrencesFormSet
    extra = 0
    max_num = 0
    can_delete = False
    fields = ["occurrence_at", "outcome", "job", job_status, lateness, "detail"]
    readonly_fields = fields
    ordering = ["-occurrence_at"]
    verbose_name_plural = "last %s runs" % LAST_RUNS

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("job")


@admin.register(ScheduleOccurrence)
class ScheduleOccurrenceAdmin(SchedulerModelAdmin):
    """Every run of every schedule, newest first: read-only (the schedule page lists the last
    ones and links here, filtered to the schedule)."""

    empty_text = (
        "No schedule runs yet: each occurrence of a recurring schedule is recorded here when "
        "it comes due."
    )
    list_display = ["occurrence_at", "schedule", "outcome", "job", job_status, lateness]
    list_filter = ["outcome"]
    list_select_related = ["schedule", "job"]
    # Total (schedule, occurrence_at is unique), so that the unique index serves a
    # schedule's list in its order.
    ordering = ["-occurrence_at", "schedule"]
    paginator = BoundedPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The runs are part of their schedule: whoever may see schedules may see them
        # (the schedule page links here).
        return super().has_view_permission(request, obj) or self.admin_site.get_model_admin(
            Schedule
        ).has_view_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Schedule)
class ScheduleAdmin(SchedulerModelAdmin):
    empty_text = "No schedules yet: declare them in SCHEDULER_APP['SCHEDULES'] or add one here."
    form = ScheduleForm
    list_display = [
        "name",
        "task_name",
        "kind",
        "rule",
        "timezone",
        "enabled",
        "next_run_at",
        "overlap_policy",
        "misfire_policy",
    ]
    # Whether a schedule is declared in code is a filter, not a column: the list fits
    # 1280 px.
    list_filter = ["enabled", "kind", "declared_in_code"]
    search_fields = ["name", "task_name"]
    actions = ["enable", "disable", "prune"]
    readonly_fields = [
        "all_runs",
        "next_runs",
        "next_run_at",
        "declared_in_code",
        "declared_version",
        "absence_window",
    ]
    inlines = [OccurrenceInline]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "name",
                    "task_name",
                    "payload",
                    "queue",
                    "enabled",
                    "declared_in_code",
                    "declared_version",
                    "all_runs",
                ]
            },
        ),
        (
            "When",
            {
                "fields": [
                    "kind",
                    "cron",
                    "timezone",
                    "interval",
                    "start_at",
                    "jitter",
                    "next_run_at",
                    "next_runs",
                ]
            },
        ),
        ("Policies", {"fields": ["overlap_policy", "misfire_policy", "misfire_grace"]}),
        (
            "Targets (alerts)",
            {
                "description": "Empty: the task's target. A schedule declared in code takes "
                "its targets from code at every sync.",
                "fields": [*TARGET_FIELDS, "absence_window"],
            },
        ),
    ]

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and obj.declared_in_code:
            fields += TARGET_FIELDS  # code owns them: a sync would overwrite an edit
        return fields

    @admin.display(description="absent after")
    def absence_window(self, schedule: Schedule) -> str:
        if not schedule.pk:
            return "-"
        window = expected_cadence(schedule, clock.now())
        return "%s without a success" % seconds(window) if window else "-"

    @admin.display(description="runs")
    def all_runs(self, schedule: Schedule) -> str:
        if not schedule.pk:
            return "-"
        # The link alone, no text around it: a link inside text must look like one
        # without its colour (axe's link-in-text-block).
        return format_html(
            '<a href="{}?schedule__id__exact={}">All runs of this schedule, newest first</a>',
            reverse("%s:scheduler_app_scheduleoccurrence_changelist" % self.admin_site.name),
            schedule.pk,
        )

    @admin.display(description="rule")
    def rule(self, schedule: Schedule) -> str:
        if schedule.kind == Schedule.Kind.CRON:
            return schedule.cron
        return "every %s" % seconds(schedule.interval)

    @admin.display(description="next %s runs" % PREVIEW_COUNT)
    def next_runs(self, schedule: Schedule) -> str:
        if not schedule.pk:
            return "Save to see the next runs."
        try:
            runs = next_run_times(schedule, PREVIEW_COUNT, after=clock.now())
        except Exception as exc:  # an invalid stored rule must not break the page
            return "Cannot compute the next runs: %s" % exc
        if not runs:
            return "Known once the current run ends (fixed delay)."
        return format_html(
            "<ol class='next-runs'>{}</ol>",
            format_html_join(
                "",
                "<li>{} ({}) = {} UTC</li>",
                (
                    (
                        r.local.strftime("%Y-%m-%d %H:%M:%S %Z"),
                        schedule.timezone,
                        r.utc.strftime("%Y-%m-%d %H:%M:%S"),
                    )
                    for r in runs
                ),
            ),
        )

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        timing = {"kind", "cron", "timezone", "interval", "start_at"}
        if change and timing & set(form.changed_data):
            obj.next_run_at = None  # follow the new rule from now on
        if change and "enabled" in form.changed_data and obj.enabled:
            obj.next_run_at = None  # from now on: what it missed while disabled is not replayed
        obj.updated_at = clock.now()
        super().save_model(request, obj, form, change)

    @admin.action(description="Enable selected schedules", permissions=["change"])
    def enable(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_enabled(request, queryset, True)

    @admin.action(description="Disable selected schedules", permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_enabled(request, queryset, False)

    @admin.action(
        description="Prune selected schedules that code no longer declares",
        permissions=["change"],
    )
    def prune(self, request: HttpRequest, queryset: QuerySet) -> None:
        names = list(queryset.values_list("name", flat=True))
        try:
            pruned = prune_declared_schedules(names)
        except ValidationError as exc:
            self.message_user(request, exc.message, level=messages.ERROR)
            return
        report_counts(
            request,
            self,
            {"pruned": len(pruned), "kept": len(names) - len(pruned)},
            {
                "pruned": (
                    "%(count)d schedule pruned: disabled, no longer owned by code.",
                    "%(count)d schedules pruned: disabled, no longer owned by code.",
                    messages.SUCCESS,
                ),
                "kept": (
                    "%(count)d schedule kept: still declared, not from code, or written by "
                    "a newer SCHEDULES_VERSION.",
                    "%(count)d schedules kept: still declared, not from code, or written by "
                    "a newer SCHEDULES_VERSION.",
                    messages.INFO,
                ),
            },
        )

    def _set_enabled(self, request: HttpRequest, queryset: QuerySet, enabled: bool) -> None:
        word = "enabled" if enabled else "disabled"
        with database.atomic():
            switched = Schedule.objects.filter(
                pk__in=queryset.filter(enabled=not enabled).values("pk")
            )
            pks = list(switched.select_for_update().values_list("pk", flat=True))
            changed = Schedule.objects.filter(pk__in=pks).update(
                enabled=enabled,
                updated_at=clock.now(),
                # Enabled again: from now on, not replaying what it missed while disabled.
                **({"next_run_at": None} if enabled else {}),
            )
        self.log_changes(request, pks, "%s." % word.capitalize())
        report_counts(
            request,
            self,
            {"changed": changed, "same": queryset.count() - changed},
            {
                "changed": (
                    "%(count)d schedule " + word + ".",
                    "%(count)d schedules " + word + ".",
                    messages.SUCCESS,
                ),
                "same": (
                    "%(count)d schedule was already " + word + ".",
                    "%(count)d schedules were already " + word + ".",
                    messages.INFO,
                ),
            },
        )
