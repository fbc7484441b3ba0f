"""The base of the app's ModelAdmins, and what their forms share."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.translation import gettext as _

from scheduler_app.exceptions import ValidationError

T = TypeVar("T")


def form_checked(check: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Return ``check(*args, **kwargs)``, a scheduler_app ValidationError as a form error."""
    try:
        return check(*args, **kwargs)
    except ValidationError as exc:
        raise forms.ValidationError(exc.message, code=exc.code) from exc


class SchedulerModelAdmin(admin.ModelAdmin):
    """A ModelAdmin whose lists refuse filters that would be a 500: the list is shown
    without filters, with a message.

    A NUL character: no stored text can hold one (PostgreSQL refuses it while the page
    renders). The date drill-down to the last year, month or day of year 9999: Django
    bounds it by the start of the next one, in year 10000.
    """

    #: What an empty list shows: one line saying what fills it.
    empty_text = ""

    #: The buttons of an object's page: a name in the button's URL -> the list action it
    #: runs on that one object (same permission, guards and messages).
    page_actions: dict[str, str] = {}

    def get_urls(self) -> list:
        if not self.page_actions:
            return super().get_urls()
        return [
            path(
                "<path:object_id>/actions/<str:name>/",
                self.admin_site.admin_view(self.page_action_view),
                name="%s_%s_page_action" % (self.opts.app_label, self.opts.model_name),
            ),
            *super().get_urls(),
        ]

    def page_action_applies(self, name: str, obj: Any) -> bool:
        """Return whether the page button ``name`` can do anything to ``obj`` now."""
        return True

    def offered_page_actions(self, request: HttpRequest, obj: Any) -> list[str]:
        """Return the page buttons this user may press on ``obj`` now."""
        permitted = self.get_actions(request)
        return [
            name
            for name, action in self.page_actions.items()
            if action in permitted and self.page_action_applies(name, obj)
        ]

    def page_action_view(self, request: HttpRequest, object_id: str, name: str) -> HttpResponse:
        """Run the list action behind the page button ``name`` on one object, then go back
        to its page (or show the action's own page: a confirmation, a reason form)."""
        if name not in self.page_actions:
            raise Http404("No such action.")
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = get_object_or_404(self.get_queryset(request), pk=object_id)
        action = self.get_actions(request).get(self.page_actions[name])
        if action is None:
            raise PermissionDenied
        # Django 6.1 returns Action objects, earlier versions (func, name, description).
        func = action.func if hasattr(action, "func") else action[0]
        response = func(self, request, self.get_queryset(request).filter(pk=obj.pk))
        return response or HttpResponseRedirect(
            reverse(
                "%s:%s_%s_change"
                % (self.admin_site.name, self.opts.app_label, self.opts.model_name),
                args=[obj.pk],
            )
        )

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if any("\x00" in key or "\x00" in "".join(values) for key, values in request.GET.lists()):
            return self._unfiltered(
                request,
                _(
                    "A filter in the address held a NUL character, which no stored text can "
                    "hold: the list is shown without filters."
                ),
            )
        if self._drills_to_the_end_of_9999(request):
            return self._unfiltered(
                request,
                _(
                    "The date filter picks the end of the year 9999, the last a date can have: "
                    "the list is shown without filters."
                ),
            )
        return super().changelist_view(request, extra_context)

    def log_changes(self, request: HttpRequest, pks: Iterable[Any], message: str) -> None:
        """Write ``message`` into the history of each object of ``pks`` (those an action
        changed), with the user and the time, as Django's change form does for an edit."""
        changed = list(self.model._default_manager.filter(pk__in=list(pks)))
        if changed:
            LogEntry.objects.log_actions(
                user_id=request.user.pk,
                queryset=changed,
                action_flag=CHANGE,
                change_message=message,
            )

    def _unfiltered(self, request: HttpRequest, why: str) -> HttpResponse:
        self.message_user(request, why, messages.ERROR)
        return HttpResponseRedirect(request.path)

    def _drills_to_the_end_of_9999(self, request: HttpRequest) -> bool:
        """Return whether the date drill-down picks 9999, 9999-12 or 9999-12-31."""
        if not self.date_hierarchy:
            return False
        parts = ("year", "month", "day")
        picked = [request.GET.get("%s__%s" % (self.date_hierarchy, part)) for part in parts]
        try:
            year, month, day = (int(value) if value else None for value in picked)
        except ValueError:
            return False  # not a date: Django refuses it itself
        return year == dt.MAXYEAR and (month, day) in ((None, None), (12, None), (12, 31))
