"""An empty scheduler list says in one line what fills it (#38); a filtered one does not."""

from __future__ import annotations

import pytest
from django.contrib import admin as django_admin

from scheduler_app.admin.base import SchedulerModelAdmin
from tests.admin.conftest import changelist

pytestmark = pytest.mark.django_db


def scheduler_lists() -> list[str]:
    return sorted(
        model._meta.model_name
        for model, model_admin in django_admin.site._registry.items()
        if model._meta.app_label == "scheduler_app"
        and isinstance(model_admin, SchedulerModelAdmin)
        and "change_list_template" not in vars(type(model_admin))
    )


def test_every_empty_scheduler_list_says_what_fills_it(admin):
    missing = []
    for model in scheduler_lists():
        html = admin.get(changelist(model)).content.decode()
        if '<p class="scheduler-empty">' not in html:
            missing.append(model)
    assert missing == []


def test_the_job_list_explains_itself_unless_filtered(admin):
    html = admin.get(changelist("job")).content.decode()
    assert (
        '<p class="scheduler-empty">No jobs yet: code schedules them (schedule(), a task\'s '
        "enqueue) and recurring schedules add theirs when they come due.</p>"
    ) in html.replace("&#x27;", "'")
    filtered = admin.get(changelist("job"), {"status__exact": "failed"}).content.decode()
    assert "scheduler-empty" not in filtered
