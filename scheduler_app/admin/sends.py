"""Send batches: drafts, dry-run, seed send, checklist-guarded scheduling, kill switches."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
)
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from scheduler_app import clock, database
from scheduler_app.admin.base import SchedulerModelAdmin, form_checked
from scheduler_app.admin.display import paused_banner, seconds, utc
from scheduler_app.admin.fields import AddressListField, NamedValuesField
from scheduler_app.admin.pagination import BoundedPaginator
from scheduler_app.conf import app_settings
from scheduler_app.controls import paused_scopes
from scheduler_app.db import database_now
from scheduler_app.exceptions import InvalidSchedule, SchedulerError
from scheduler_app.feedback.suppressions import batch_feedback
from scheduler_app.models import RateLimit, Recipient, SendBatch
from scheduler_app.scheduling import check_payload, check_undo_window
from scheduler_app.sends import batches, content, states
from scheduler_app.sends.audience import registered_audiences
from scheduler_app.sends.checklist import CheckItem, ChecklistFailed, run_checklist
from scheduler_app.sends.dry_run import dry_run, report_storage
from scheduler_app.sends.task_names import SEND_BATCH_TASK

Status = SendBatch.Status
DRAFT_FIELDS = list(content.DRAFT_FIELDS)
#: Shown below the draft fields on an existing batch (read-only).
STATE_FIELDS = [
    "status",
    "status_reason",
    "progress_display",
    "feedback_display",
    "checklist_display",
    "dry_run_display",
]


#: The template fields: stored as typed (no stripping), with LF line endings.
TEMPLATE_FIELDS = ("subject_template", "text_template", "html_template")
#: A draft's steps on its page, in order: page action -> button.
FLOW_BUTTONS = {
    "dry_run": "Dry-run",
    "seed_send": "Seed send",
    "schedule": "Schedule…",
}
#: What each checklist item checks, for people (the item names are for code and settings).
CHECKLIST_LABELS = {
    "audience_within_limit": "Audience counted and within the expected maximum",
    "dry_run_clean": "Clean dry-run of this template and audience",
    "seed_sent": "Seed send of this template and audience",
    "schedule_unambiguous": "Send time and time zone set",
    "no_other_large_batch": "No other large batch close by",
}


def checklist_html(items: list[CheckItem]) -> str:
    """Return the checklist as a list people read: colour, an icon and words for pass/fail."""
    return format_html(
        '<ul class="checklist">{}</ul>',
        format_html_join(
            "",
            '<li class="{}"><span aria-hidden="true">{}</span> <b>{}:</b> {}. {}</li>',
            (
                (
                    "ok" if item.ok else "failing",
                    "✔" if item.ok else "✘",
                    "Passed" if item.ok else "Failing",
                    CHECKLIST_LABELS[item.name],
                    item.detail,
                )
                for item in items
            ),
        ),
    )


class SendBatchForm(forms.ModelForm):
    """Blank JSON fields mean "none" (the columns are NOT NULL); parameters are an object;
    every JSON value is one the database can store. Templates keep their whitespace and
    are stored with LF line endings, whatever the browser sent. The audience is one of the
    registered audiences; the seed list is typed one address a line, the seed context one
    "name = value" a line."""

    audience = forms.ChoiceField(
        choices=lambda: [("", "---------")] + [(n, n) for n in registered_audiences()],
        help_text="A registered audience source.",
    )
    seed_list = AddressListField(
        required=False,
        help_text="Addresses for seed sends, one a line.",
    )
    seed_context = NamedValuesField(
        required=False,
        help_text=(
            "What the seed send's message is rendered with, one “name = value” a line "
            "(first_name = Ada). A value is text; 42, 3.5, true, false, null, "
            '"quoted text", [lists] and {objects} are read as JSON.'
        ),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in TEMPLATE_FIELDS:
            if name in self.fields:
                self.fields[name].strip = False

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        for name in TEMPLATE_FIELDS:
            if isinstance(cleaned.get(name), str):
                cleaned[name] = content.normalise_newlines(cleaned[name])
        return cleaned

    def clean_audience_params(self) -> dict[str, Any]:
        value = self.cleaned_data["audience_params"]
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise forms.ValidationError("Audience parameters must be a JSON object.")
        return form_checked(check_payload, value, name="audience parameter object")

    def clean_seed_list(self) -> list[str]:
        return form_checked(check_payload, self.cleaned_data["seed_list"], name="seed list")

    def clean_seed_context(self) -> dict[str, Any]:
        return form_checked(check_payload, self.cleaned_data["seed_context"], name="seed context")

    def clean_undo_window(self) -> dt.timedelta:
        # schedule()'s rule, which scheduling the batch applies again (planned_start).
        return form_checked(check_undo_window, self.cleaned_data["undo_window"], now=clock.now())


class ReasonForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=True,
        error_messages={"required": "A reason is required to pause."},
    )

    def clean_reason(self) -> str:
        return form_checked(batches.check_pause_reason, self.cleaned_data["reason"])


@admin.register(SendBatch)
class SendBatchAdmin(SchedulerModelAdmin):
    empty_text = (
        "No send batches yet: add one as a draft, then preview, dry-run, seed send and "
        "schedule it from its page."
    )
    form = SendBatchForm
    list_display = ["name", "status", "scheduled_at", "timezone", "progress_bar"]
    list_filter = ["status"]
    search_fields = ["name"]
    actions = [
        "dry_run_action",
        "seed_send_action",
        "schedule_action",
        "pause_action",
        "resume_action",
        "cancel_action",
        "delete_selected",
    ]
    change_form_template = "admin/scheduler_app/sendbatch_change_form.html"
    page_actions = {
        "dry_run": "dry_run_action",
        "seed_send": "seed_send_action",
        "schedule": "schedule_action",
        "pause": "pause_action",
        "resume": "resume_action",
        "cancel": "cancel_action",
    }

    class Media:
        js = ["scheduler_app/admin.js"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [*DRAFT_FIELDS, *self.get_readonly_fields(request, obj)]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return STATE_FIELDS if obj is not None else ["status"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Only drafts can be edited: any other batch's page is a view page (no Save buttons).
        editable = obj is None or obj.status == Status.DRAFT
        return editable and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Only drafts: a batch once scheduled keeps its sent markers (who got what) and the
        # batch its lanes send; cancel stops a send, retention prunes old ones.
        deletable = obj is None or obj.status == Status.DRAFT
        return deletable and super().has_delete_permission(request, obj)

    @admin.action(description="Delete selected %(verbose_name_plural)s", permissions=["delete"])
    def delete_selected(self, request: HttpRequest, queryset: QuerySet) -> Any:
        """Django's delete_selected for draft batches; a selection holding any other batch
        is refused as a whole, naming those."""
        others = [batch for batch in queryset if batch.status != Status.DRAFT]
        if others:
            self.message_user(
                request,
                "Only draft batches can be deleted; nothing was deleted. Not drafts: %s."
                % ", ".join("%s (%s)" % (batch, batch.get_status_display()) for batch in others),
                messages.ERROR,
            )
            return None
        return delete_selected(self, request, queryset)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        # A draft scheduled since the confirmation page was shown is not deleted.
        with database.atomic():
            drafts = queryset.select_for_update().filter(status=Status.DRAFT)
            super().delete_queryset(request, drafts)

    def save_model(self, request: HttpRequest, obj: SendBatch, form: Any, change: bool) -> None:
        if not change:
            obj.owner = request.user
        super().save_model(request, obj, form, change)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        paused = paused_scopes()
        if request.method == "GET" and paused.covers(
            queue=app_settings.SEND_QUEUE, task_name=SEND_BATCH_TASK
        ):
            paused_banner(request, paused)
        return super().changelist_view(request, extra_context)

    # -- display ----------------------------------------------------------------

    @admin.display(description="progress")
    def progress_bar(self, batch: SendBatch) -> str:
        data = batches.batch_progress(batch)
        return format_html(
            '<progress class="scheduler-progress" data-batch="{}" max="100" value="{}" '
            'aria-label="Progress of {}"></progress> '
            '<span class="scheduler-progress-text">{}%</span><br>'
            '<span class="scheduler-progress-counts">{} sent · {} failed · {} skipped · {} left'
            "</span>",
            batch.pk,
            data["percent"],
            batch.name,
            data["percent"],
            data["sent"],
            data["failed"],
            data["skipped"],
            data["remaining"] if data["remaining"] is not None else "-",
        )

    @admin.display(description="progress")
    def progress_display(self, batch: SendBatch) -> str:
        data = batches.batch_progress(batch)
        return format_html(
            '<div class="scheduler-live" data-url="{}" data-status="{}">'
            '<progress class="scheduler-progress" max="100" value="{}" style="width:30em" '
            'aria-label="Send progress"></progress>'
            ' <span class="scheduler-progress-text">{}%</span><br>'
            'sent <b class="p-sent">{}</b> · failed <b class="p-failed">{}</b> · skipped '
            '<b class="p-skipped">{}</b> · remaining <b class="p-remaining">{}</b> · '
            '<b class="p-rate">{}</b>/s</div>',
            reverse("admin:scheduler_app_sendbatch_progress", args=[batch.pk]),
            batch.status,
            data["percent"],
            data["percent"],
            data["sent"],
            data["failed"],
            data["skipped"],
            data["remaining"] if data["remaining"] is not None else "-",
            data["rate"],
        )

    @admin.display(description="feedback")
    def feedback_display(self, batch: SendBatch) -> str:
        counts = batch_feedback(batch.pk)
        return format_html(
            '<a href="{}?batch__id__exact={}">unsubscribes {} · hard bounces {} · soft bounces {} '
            "· complaints {}</a>",
            reverse("admin:scheduler_app_feedbackevent_changelist"),
            batch.pk,
            counts["unsubscribe"],
            counts["hard_bounce"],
            counts["soft_bounce"],
            counts["complaint"],
        )

    @admin.display(description="pre-flight checklist")
    def checklist_display(self, batch: SendBatch) -> str:
        return checklist_html(run_checklist(batch))

    @admin.display(description="dry-run")
    def dry_run_display(self, batch: SendBatch) -> str:
        if not batch.dry_run_at:
            return "No dry-run yet."
        summary = ", ".join(
            "%s %s" % (k.replace("_", " "), v) for k, v in batch.dry_run_summary.items()
        )
        return format_html(
            '{} — {} <a class="dry-run-report" href="{}">Download the report</a>',
            timezone.localtime(batch.dry_run_at).strftime("%Y-%m-%d %H:%M:%S"),
            summary,
            reverse("admin:scheduler_app_sendbatch_report", args=[batch.pk]),
        )

    # -- extra views ---------------------------------------------------------------

    def get_urls(self) -> list:
        view = self.admin_site.admin_view
        return [
            path(
                "<int:pk>/progress/",
                view(self.progress_view),
                name="scheduler_app_sendbatch_progress",
            ),
            path("<int:pk>/report/", view(self.report_view), name="scheduler_app_sendbatch_report"),
            path("<int:pk>/undo/", view(self.undo_view), name="scheduler_app_sendbatch_undo"),
            path(
                "<int:pk>/duplicate/",
                view(self.duplicate_view),
                name="scheduler_app_sendbatch_duplicate",
            ),
            *super().get_urls(),
        ]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        batch = self.get_object(request, unquote(object_id))
        if batch is not None:
            allowed = self.allowed_actions(request, batch)
            extra_context = {
                **(extra_context or {}),
                "batch_actions": allowed,
                "flow": self.flow_steps(request, batch, allowed),
                "can_duplicate": self.has_add_permission(request),
                "preview": batches.preview(
                    batch, request.GET.get("preview"), find=request.GET.get("find", "")
                ),
            }
        return super().change_view(request, object_id, form_url, extra_context)

    def allowed_actions(self, request: HttpRequest, batch: SendBatch) -> list[str]:
        """Return what this user can do to ``batch`` now: undo, pause, resume, cancel."""
        undo = batch.status == Status.SCHEDULED and batch.undo_deadline is not None
        return [
            *(["undo"] if undo and self.has_change_permission(request) else []),
            *self.offered_page_actions(request, batch),
        ]

    def page_action_applies(self, name: str, obj: Any) -> bool:
        # A draft is edited or deleted, not cancelled: its page offers the steps to send it.
        draft = (Status.DRAFT,)
        allowed = {
            "dry_run": draft,
            "seed_send": draft,
            "schedule": draft,
            "pause": states.ACTIVE,
            "resume": (Status.PAUSED,),
            "cancel": tuple(s for s in states.CANCELLABLE if s != Status.DRAFT),
        }
        return obj.status in allowed[name]

    def flow_steps(
        self, request: HttpRequest, batch: SendBatch, allowed: list[str]
    ) -> list[tuple[str, str, str]]:
        """Return the draft's steps this user may take: (page action, button, why not yet)."""
        steps = [(name, label) for name, label in FLOW_BUTTONS.items() if name in allowed]
        blockers = self.flow_blockers(request, batch) if steps else {}
        return [(name, label, blockers[name]) for name, label in steps]

    def flow_blockers(self, request: HttpRequest, batch: SendBatch) -> dict[str, str]:
        """Return why each step of a draft's flow cannot be taken yet ('' when it can):
        a seed send needs a seed list and a clean dry-run, scheduling the whole checklist
        (or the permission to relax items, which the confirmation asks for)."""
        checklist = run_checklist(batch)
        failing = [CHECKLIST_LABELS[item.name] for item in checklist if not item.ok]
        clean = next(item for item in checklist if item.name == "dry_run_clean")
        if not batch.seed_list:
            seed = "Add a seed list first."
        elif not clean.ok:
            seed = "Needs a clean dry-run of this template and audience first."
        else:
            seed = ""
        relax = request.user.has_perm("scheduler_app.relax_checklist")
        schedule = "" if not failing or relax else "Failing: %s." % "; ".join(failing)
        return {"dry_run": "", "seed_send": seed, "schedule": schedule}

    def progress_view(self, request: HttpRequest, pk: int) -> JsonResponse:
        """Return the batch's progress, status, reason and allowed actions, for the live page."""
        batch = get_object_or_404(self.get_queryset(request), pk=pk)
        if not self.has_view_permission(request, batch):
            raise PermissionDenied
        return JsonResponse(
            {
                **batches.batch_progress(batch),
                "status_reason": batch.status_reason,
                "actions": self.allowed_actions(request, batch),
            }
        )

    def report_view(self, request: HttpRequest, pk: int) -> FileResponse:
        batch = get_object_or_404(self.get_queryset(request), pk=pk)
        if not self.has_view_permission(request, batch):
            raise PermissionDenied
        storage = report_storage()
        if not batch.dry_run_report or not storage.exists(batch.dry_run_report):
            raise Http404("This batch has no dry-run report.")
        return FileResponse(
            storage.open(batch.dry_run_report, "rb"),
            as_attachment=True,
            filename="dry-run-batch-%s.txt" % batch.pk,
        )

    def undo_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        batch = get_object_or_404(self.get_queryset(request), pk=pk)
        if not self.has_change_permission(request):
            raise PermissionDenied
        outcome = batches.undo_batch(batch.pk, by=request.user)
        if outcome.cancelled:
            self.log_change(request, batch, "Undone.")
            self.message_user(
                request,
                "Undone: %s will not be sent. To fix it and send it again, use Duplicate as "
                "draft." % batch.name,
                messages.SUCCESS,
            )
        else:
            self.message_user(
                request,
                "Too late, already %s: %s of %s sent. Nothing was changed."
                % (
                    outcome.status,
                    outcome.sent,
                    outcome.total if outcome.total is not None else "?",
                ),
                messages.ERROR,
            )
        return HttpResponseRedirect(reverse("admin:scheduler_app_sendbatch_change", args=[pk]))

    def duplicate_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Copy the batch into a new draft (an undone batch is read-only) and open it."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        batch = get_object_or_404(self.get_queryset(request), pk=pk)
        if not self.has_add_permission(request):
            raise PermissionDenied
        copy = batches.duplicate_batch(batch, by=request.user)
        self.log_addition(request, copy, "Duplicated from send batch %s." % batch.pk)
        self.message_user(
            request,
            "%s is a new draft: edit it, then dry-run it." % copy.name,
            messages.SUCCESS,
        )
        return HttpResponseRedirect(reverse("admin:scheduler_app_sendbatch_change", args=[copy.pk]))

    # -- actions -----------------------------------------------------------------

    @admin.action(description="Dry-run: render every message, send nothing", permissions=["change"])
    def dry_run_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        for batch in queryset:
            try:
                report = dry_run(batch)
            except SchedulerError as exc:
                self.message_user(
                    request, "%s: dry-run failed: %s" % (batch.name, exc), messages.ERROR
                )
                continue
            level = messages.SUCCESS if not report.problems else messages.WARNING
            self.message_user(
                request,
                "%s: dry-run rendered %s of %s recipients, %s problem(s)."
                % (batch.name, report.summary["rendered"], report.summary["rows"], report.problems),
                level,
            )

    @admin.action(description="Seed send: send to the seed list now", permissions=["change"])
    def seed_send_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        for batch in queryset:
            try:
                markers = batches.seed_send(batch, by=request.user)
            except SchedulerError as exc:
                self.message_user(
                    request, "%s: seed send refused: %s" % (batch.name, exc), messages.ERROR
                )
                continue
            sent = sum(m.status == Recipient.Status.SENT for m in markers)
            self.log_change(
                request, batch, "Seed send: %s of %s seed addresses." % (sent, len(markers))
            )
            self.message_user(
                request,
                "%s: seed send went to %s of %s seed addresses." % (batch.name, sent, len(markers)),
                messages.SUCCESS if sent == len(markers) else messages.WARNING,
            )

    @admin.action(description="Schedule (after the pre-flight checklist)", permissions=["change"])
    def schedule_action(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        if "confirm" not in request.POST:
            return self._confirm(request, queryset, "schedule_action", "Schedule", checklist=True)
        relax = tuple(request.POST.getlist("relax"))
        if relax and not request.user.has_perm("scheduler_app.relax_checklist"):
            self.message_user(
                request, "You do not have permission to relax checklist items.", messages.ERROR
            )
            return None
        for batch in queryset:
            try:
                batches.schedule_batch(batch, by=request.user, relax=relax)
            except ChecklistFailed as exc:
                self.message_user(
                    request,
                    "%s was not scheduled. Failing: %s"
                    % (batch.name, "; ".join("%s (%s)" % (i.name, i.detail) for i in exc.failing)),
                    messages.ERROR,
                )
            except SchedulerError as exc:
                self.message_user(
                    request, "%s was not scheduled: %s" % (batch.name, exc), messages.ERROR
                )
            else:
                self.log_change(request, batch, "Scheduled.")
                self.message_user(
                    request,
                    "%s scheduled; sending starts at %s."
                    % (batch.name, utc(batches.earliest_start(batch) or batch.scheduled_at)),
                    messages.SUCCESS,
                )
        return None

    @admin.action(description="Pause (a reason is required)", permissions=["change"])
    def pause_action(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        form = ReasonForm(request.POST if "confirm" in request.POST else None)
        if not form.is_valid():
            if "confirm" in request.POST:
                self.message_user(
                    request, "%s Nothing was paused." % form.errors["reason"][0], messages.ERROR
                )
            return self._confirm(request, queryset, "pause_action", "Pause", form=form)
        for batch in queryset:
            reason = form.cleaned_data["reason"]
            if batches.pause_batch(batch.pk, by=request.user, reason=reason):
                self.log_change(request, batch, "Paused: %s" % reason)
                self.message_user(request, "%s paused." % batch.name, messages.SUCCESS)
            else:
                self.message_user(
                    request,
                    "%s was not paused: it is %s." % (batch.name, batch.get_status_display()),
                    messages.ERROR,
                )
        return None

    @admin.action(description="Resume", permissions=["resume"])
    def resume_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        for batch in queryset:
            try:
                batches.resume_batch(batch.pk, by=request.user)
            except SchedulerError as exc:
                self.message_user(
                    request, "%s was not resumed: %s" % (batch.name, exc), messages.ERROR
                )
            else:
                self.log_change(request, batch, "Resumed.")
                self.message_user(request, "%s resumed." % batch.name, messages.SUCCESS)

    @admin.action(description="Cancel", permissions=["change"])
    def cancel_action(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        if "confirm" not in request.POST:
            return self._confirm(request, queryset, "cancel_action", "Cancel")
        for batch in queryset:
            if batches.cancel_batch(batch.pk, by=request.user, reason="Cancelled in the admin."):
                self.log_change(request, batch, "Cancelled; %s already sent." % batch.sent)
                self.message_user(
                    request,
                    "%s cancelled; %s were already sent." % (batch.name, batch.sent),
                    messages.SUCCESS,
                )
            else:
                self.message_user(
                    request,
                    "%s was not cancelled: it is %s." % (batch.name, batch.get_status_display()),
                    messages.ERROR,
                )
        return None

    def _planned_start(self, request: HttpRequest, batch: SendBatch, now: Any) -> str | None:
        """Say when ``batch`` starts if scheduled ``now``, and why then (None: it cannot)."""
        try:
            start = utc(batches.planned_start(batch, now))
        except InvalidSchedule as exc:
            self.message_user(
                request, "%s cannot be scheduled: %s" % (batch.name, exc), messages.ERROR
            )
            return None
        if not batch.undo_window:
            return start
        return "%s, after the %s undo window and the %s safety margin" % (
            start,
            seconds(batch.undo_window),
            seconds(dt.timedelta(seconds=app_settings.UNDO_SAFETY_MARGIN)),
        )

    def has_resume_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("scheduler_app.resume_sendbatch")

    def _confirm(
        self,
        request: HttpRequest,
        queryset: QuerySet,
        action: str,
        verb: str,
        *,
        checklist: bool = False,
        form: forms.Form | None = None,
    ) -> HttpResponse:
        now = database_now() if checklist else None  # the clock schedule_batch() plans with
        items = [
            (
                b,
                [(item, CHECKLIST_LABELS[item.name]) for item in run_checklist(b)],
                self._planned_start(request, b, now),
            )
            if checklist
            else (b, [], None)
            for b in queryset
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": "%s send batches" % verb,
            "opts": self.model._meta,
            "verb": verb,
            "action": action,
            "queryset": queryset,
            "items": items,
            # "Yes, schedule" only once every failing item is fixed, or ticked to relax.
            "failing": any(not item.ok for _, labelled, _ in items for item, _ in labelled),
            "can_relax": request.user.has_perm("scheduler_app.relax_checklist"),
            "form": form,
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/scheduler_app/batch_confirm.html", context)


@admin.register(Recipient)
class RecipientAdmin(SchedulerModelAdmin):
    """Who got what, when, and why not."""

    empty_text = (
        "No recipients yet: a batch's audience is frozen into recipients when it starts "
        "sending, and seed sends add theirs."
    )
    list_display = [
        "address",
        "recipient_key",
        "batch",
        "status",
        "attempts",
        "sent_at",
        "provider_message_id",
        "last_error",
        "is_seed",
    ]
    list_filter = ["status", "is_seed"]
    search_fields = ["address", "=recipient_key"]
    list_select_related = ["batch"]
    raw_id_fields = ["batch"]
    # A page load reads a bounded number of rows, however many recipients were ever sent.
    paginator = BoundedPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        local, _, domain = term.rpartition("@")
        if local and domain and not any(c.isspace() for c in term):
            # One look-up in the UPPER(address) index; only if it finds nothing, the search
            # of every recipient (part of an address, a key with an @ in it).
            found = queryset.filter(address__iexact=term)
            if found.exists():
                return found, False
        return super().get_search_results(request, queryset, search_term)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Recipient._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(RateLimit)
class RateLimitAdmin(SchedulerModelAdmin):
    """Change a provider account's send rate live; workers follow within a chunk."""

    empty_text = "No rate limits yet: add one to set a provider account's send rate."
    list_display = ["key", "rate", "burst"]
    fields = ["key", "rate", "burst"]
