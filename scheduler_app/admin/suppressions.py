"""The suppression list: search, filter, add, lift with a reason, CSV import and export.

Rows are never edited: an address is suppressed or not. Lifting one asks why and
leaves a SuppressionRemoval row; feedback events are a read-only record.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.validators import validate_email
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from scheduler_app import database
from scheduler_app.admin.base import SchedulerModelAdmin
from scheduler_app.admin.display import report_counts
from scheduler_app.feedback.suppressions import lift, normalise, suppress
from scheduler_app.models import FeedbackEvent, Suppression, SuppressionRemoval

#: Columns of an exported file; an imported file needs ``address`` and may have the others.
CSV_COLUMNS = ["address", "scope", "reason", "source", "created_at", "detail"]
MAX_IMPORT_BYTES = 10 * 1024 * 1024
LIFT_LABELS = {
    "lifted": ("Lifted %(count)d suppression.", "Lifted %(count)d suppressions.", messages.SUCCESS),
    "already": (
        "%(count)d suppression was already lifted.",
        "%(count)d suppressions were already lifted.",
        messages.WARNING,
    ),
}


class SuppressionForm(forms.ModelForm):
    """Add one address by hand."""

    class Meta:
        model = Suppression
        fields = ["address", "scope", "reason", "detail"]

    def clean_address(self) -> str:
        address = normalise(self.cleaned_data["address"])
        validate_email(address)
        return address


class LiftForm(forms.Form):
    why = forms.CharField(
        label="Why may these addresses be mailed again?",
        widget=forms.Textarea(attrs={"rows": 2}),
        strip=True,
    )


class ImportForm(forms.Form):
    file = forms.FileField(
        label="CSV file",
        help_text="A header row with 'address' and optionally 'scope', 'reason', 'detail'. "
        "Reasons: %s (default manual)." % ", ".join(Suppression.Reason.values),
    )


@admin.register(Suppression)
class SuppressionAdmin(SchedulerModelAdmin):
    empty_text = (
        "No suppressed addresses: unsubscribes, hard bounces, complaints and CSV imports add them."
    )
    list_display = ["address", "scope_display", "reason", "source", "batch", "created_at"]
    list_filter = ["reason", "source", "scope"]
    search_fields = ["=address", "address"]
    form = SuppressionForm
    actions = ["lift_action", "export_action"]
    change_list_template = "admin/scheduler_app/suppression_change_list.html"
    date_hierarchy = "created_at"

    @admin.display(description="scope", ordering="scope")
    def scope_display(self, row: Suppression) -> str:
        return row.scope or "all mail"

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, term: str) -> Any:
        return super().get_search_results(request, queryset, normalise(term))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return []
        return ["address", "scope", "reason", "source", "detail", "batch", "created_by"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return ["address", "scope", "reason", "detail"]
        return [*self.get_readonly_fields(request, obj), "created_at"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False if obj is not None else super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # lifting asks why: the "Lift" action

    def has_lift_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("scheduler_app.delete_suppression")

    def save_model(self, request: HttpRequest, obj: Suppression, form: Any, change: bool) -> None:
        _, created = suppress(
            form.cleaned_data["address"],
            reason=form.cleaned_data["reason"],
            source=Suppression.Source.ADMIN,
            scope=form.cleaned_data["scope"],
            by=request.user,
            detail=form.cleaned_data["detail"],
        )
        obj.pk = Suppression.objects.get(address=obj.address, scope=obj.scope).pk
        if not created:
            messages.warning(request, "%s was already suppressed in that scope." % obj.address)

    @admin.action(description="Lift the selected suppressions (asks why)", permissions=["lift"])
    def lift_action(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        form = LiftForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            rows = list(queryset)
            lifted = sum(lift(row, why=form.cleaned_data["why"], by=request.user) for row in rows)
            # A row lifted before this request (a resubmitted form) is not in the queryset.
            selected = set(request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME))
            missing = len(selected - {str(row.pk) for row in rows})
            report_counts(
                request,
                self,
                {"lifted": lifted, "already": len(rows) - lifted + missing},
                LIFT_LABELS,
            )
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Lift suppressions",
            "opts": self.model._meta,
            "queryset": queryset,
            "form": form,
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/scheduler_app/suppression_lift.html", context)

    @admin.action(description="Export the selected suppressions as CSV")
    def export_action(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse:
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="suppressions.csv"'
        writer = csv.writer(response)
        writer.writerow(CSV_COLUMNS)
        for row in queryset.order_by("address", "scope").iterator():
            writer.writerow([_safe_cell(str(getattr(row, column))) for column in CSV_COLUMNS])
        return response

    def get_urls(self) -> list:
        return [
            path(
                "import/",
                self.admin_site.admin_view(self.import_view),
                name="scheduler_app_suppression_import",
            ),
            *super().get_urls(),
        ]

    def import_view(self, request: HttpRequest) -> HttpResponse:
        """Add the addresses of an uploaded CSV file (source "import"); report bad lines."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = ImportForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            added, existing, problems = _import(form.cleaned_data["file"], request.user)
            if problems:
                form.add_error("file", forms.ValidationError(problems[:20]))
            else:
                self.message_user(
                    request,
                    "Imported %s address(es); %s were already suppressed." % (added, existing),
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(reverse("admin:scheduler_app_suppression_changelist"))
        context = {
            **self.admin_site.each_context(request),
            "title": "Import suppressions from CSV",
            "opts": self.model._meta,
            "form": form,
        }
        return TemplateResponse(request, "admin/scheduler_app/suppression_import.html", context)


def _safe_cell(value: str) -> str:
    """Keep a spreadsheet from running a cell as a formula (CSV injection): quote it. A
    cell that starts with the quote is quoted too, so the import can take one off."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r", "'") else value


def _unquoted(value: str | None) -> str:
    """The cell as it was before _safe_cell (so an export can be imported again)."""
    return value[1:] if value and value[0] == "'" else value or ""


def _import(upload: Any, by: Any) -> tuple[int, int, list[str]]:
    """Validate every line first, then add them all; return (added, existing, problems)."""
    if upload.size > MAX_IMPORT_BYTES:
        return 0, 0, ["The file is larger than %s MB." % (MAX_IMPORT_BYTES // 1024 // 1024)]
    try:
        text = upload.read().decode("utf-8-sig")
    except UnicodeDecodeError:
        return 0, 0, ["The file is not UTF-8 text."]
    reader = csv.DictReader(io.StringIO(text))
    try:
        header, records = reader.fieldnames or [], list(reader)
    except csv.Error as exc:  # e.g. a field over the csv module's limit
        return 0, 0, ["Line %s is not valid CSV: %s." % (reader.reader.line_num, exc)]
    if "address" not in header:
        return 0, 0, ["The first line must be a header naming an 'address' column."]
    rows, problems = [], []
    for line, record in enumerate(records, start=2):
        if any("\x00" in value for value in record.values() if isinstance(value, str)):
            problems.append("Line %s: NUL characters are not allowed." % line)
            continue
        address = normalise(_unquoted(record.get("address")))
        reason = (_unquoted(record.get("reason")) or Suppression.Reason.MANUAL).strip()
        scope = _unquoted(record.get("scope")).strip()
        try:
            validate_email(address)
        except forms.ValidationError:
            problems.append("Line %s: %r is not an email address." % (line, address))
            continue
        if reason not in Suppression.Reason.values:
            problems.append("Line %s: unknown reason %r." % (line, reason))
            continue
        if len(scope) > 100:
            problems.append("Line %s: the scope is longer than 100 characters." % line)
            continue
        rows.append((address, scope, reason, _unquoted(record.get("detail")).strip()))
    if problems:
        return 0, 0, problems
    added = 0
    with database.atomic():  # every line or none
        for address, scope, reason, detail in rows:
            _, created = suppress(
                address,
                reason=reason,
                source=Suppression.Source.IMPORT,
                scope=scope,
                by=by,
                detail=detail,
            )
            added += created
    return added, len(rows) - added, []


@admin.register(SuppressionRemoval)
class SuppressionRemovalAdmin(SchedulerModelAdmin):
    """Audit: who lifted which suppression and why (read-only)."""

    empty_text = "No suppressions lifted yet: lifting one on the suppression list records it here."
    list_display = ["address", "scope", "was_reason", "why", "removed_by", "removed_at"]
    search_fields = ["=address"]
    list_filter = ["was_reason"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(FeedbackEvent)
class FeedbackEventAdmin(SuppressionRemovalAdmin):
    """Unsubscribes, bounces and complaints as they arrived (read-only)."""

    empty_text = (
        "No feedback yet: unsubscribes, bounces and complaints (the webhook, the unsubscribe "
        "links) are recorded here."
    )
    list_display = ["kind", "address", "source", "batch", "occurred_at", "recorded_at"]
    list_filter = ["kind", "source"]
    search_fields = ["=address", "=event_id"]
    raw_id_fields = ["batch", "recipient"]
