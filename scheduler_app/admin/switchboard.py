"""The switchboard: every kill switch on one page, with who, why and when."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse

from scheduler_app import controls
from scheduler_app.admin.base import SchedulerModelAdmin, form_checked
from scheduler_app.conf import app_settings
from scheduler_app.exceptions import SchedulerError
from scheduler_app.models import Control, ControlEvent, SendBatch
from scheduler_app.registry import all_tasks
from scheduler_app.sends import batches


class SwitchForm(forms.Form):
    """One click on the switchboard."""

    scope = forms.ChoiceField(choices=[*Control.Scope.choices, ("batch", "a send batch")])
    target = forms.CharField(
        required=False, max_length=Control._meta.get_field("target").max_length
    )
    action = forms.ChoiceField(choices=[("pause", "pause"), ("resume", "resume")])
    reason = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 1}))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("action") != "pause":
            return data
        reason = data.get("reason") or ""
        if data.get("scope") == "batch":
            form_checked(batches.check_pause_reason, reason)
        elif not reason.strip():
            raise forms.ValidationError("A reason is required to pause.")
        return data


@admin.register(Control)
class SwitchboardAdmin(SchedulerModelAdmin):
    """Shown as "Switchboard": the changelist is the switchboard page."""

    change_list_template = "admin/scheduler_app/switchboard.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return self._switch(request)
        state = {(c.scope, c.target): c for c in Control.objects.select_related("changed_by")}
        rows = [("global", "", "Everything", state.get(("global", "")))]
        rows += [("queue", q, "Queue %s" % q, state.get(("queue", q))) for q in app_settings.QUEUES]
        rows += [("task", t, "Task %s" % t, state.get(("task", t))) for t in sorted(all_tasks())]
        live = SendBatch.objects.filter(
            status__in=[
                SendBatch.Status.SCHEDULED,
                SendBatch.Status.SENDING,
                SendBatch.Status.PAUSED,
            ]
        ).select_related("status_changed_by")
        context = {
            **self.admin_site.each_context(request),
            "title": "Switchboard",
            "opts": self.model._meta,
            "rows": rows,
            "batches": live,
            "events": ControlEvent.objects.select_related("by")[:50],
            "can_change": self.has_change_permission(request),
            **(extra_context or {}),
        }
        return TemplateResponse(request, self.change_list_template, context)

    def _switch(self, request: HttpRequest) -> HttpResponse:
        form = SwitchForm(request.POST)
        if not form.is_valid():
            for error in form.errors.get("__all__", []) + [
                "%s: %s" % (field, " ".join(errs))
                for field, errs in form.errors.items()
                if field != "__all__"
            ]:
                messages.error(request, error)
            return HttpResponseRedirect(request.path)
        scope, target = form.cleaned_data["scope"], form.cleaned_data["target"]
        action, reason = form.cleaned_data["action"], form.cleaned_data["reason"].strip()
        if (
            not self.has_change_permission(request)
            or (scope == "global" and not request.user.has_perm("scheduler_app.pause_everything"))
            or (scope == "batch" and not request.user.has_perm("scheduler_app.change_sendbatch"))
            or (
                scope == "batch"
                and action == "resume"
                and not request.user.has_perm("scheduler_app.resume_sendbatch")
            )
        ):
            messages.error(request, "You do not have permission to %s this." % action)
            return HttpResponseRedirect(request.path)
        try:
            if scope == "batch":
                changed = self._switch_batch(request, target, action, reason)
            elif action == "pause":
                changed = controls.pause(scope, target, by=request.user, reason=reason)
            else:
                changed = controls.resume(scope, target, by=request.user)
        except (SchedulerError, SendBatch.DoesNotExist, ValueError) as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(request.path)
        what = "everything" if scope == "global" else "%s %s" % (scope, target)
        if changed:
            messages.success(request, "%s: %sd." % (what[:1].upper() + what[1:], action))
        else:
            messages.warning(
                request,
                "%s was already %sd; nothing changed." % (what[:1].upper() + what[1:], action),
            )
        return HttpResponseRedirect(request.path)

    def _switch_batch(self, request: HttpRequest, target: str, action: str, reason: str) -> bool:
        batch = SendBatch.objects.filter(pk=int(target)).first() if target.isdigit() else None
        if batch is None:
            raise SchedulerError("Send batch %r does not exist." % target)
        if action == "resume":
            return batches.resume_batch(batch.pk, by=request.user)
        if batches.pause_batch(batch.pk, by=request.user, reason=reason):
            return True
        batch.refresh_from_db(fields=["status"])
        if batch.status == SendBatch.Status.PAUSED:
            return False  # reported as "was already paused"
        raise SchedulerError("Send batch %s was not paused: it is %s." % (batch.pk, batch.status))
