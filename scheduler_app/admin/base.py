"""The base of the app's ModelAdmins, and what their forms share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
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
    """A ModelAdmin whose lists refuse a query string holding a NUL character.

    No stored text can hold one (PostgreSQL refuses it while the page renders, a 500),
    so such a filter is dropped: the list is shown without filters, with a message.
    """

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if any("\x00" in key or "\x00" in "".join(values) for key, values in request.GET.lists()):
            self.message_user(
                request,
                _(
                    "A filter in the address held a NUL character, which no stored text can "
                    "hold: the list is shown without filters."
                ),
                messages.ERROR,
            )
            return HttpResponseRedirect(request.path)
        return super().changelist_view(request, extra_context)
