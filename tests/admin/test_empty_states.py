"""An empty scheduler list says in one line what fills it (#38); a filtered one does not."""

from __future__ import annotations

import pytest
from django.contrib import admin as django_admin

from scheduler_app.admin.base import SchedulerModelAdmin
from tests.admin.conftest import changelist

pytestmark = pytest.mark.django_db


#: The pages that are not lists: the two overviews and the switchboard.
DASHBOARDS = {"operationsoverview", "latenessoverview", "control"}


def scheduler_lists() -> list[str]:
    return sorted(
        model._meta.model_name
        for model, model_admin in django_admin.site._registry.items()
        if model._meta.app_label == "scheduler_app"
        and isinstance(model_admin, SchedulerModelAdmin)
        and model._meta.model_name not in DASHBOARDS
    )


def test_every_empty_scheduler_list_says_what_fills_it(admin):
    assert "suppression" in scheduler_lists()  # a list with a template of its own
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


def test_the_app_index_groups_its_pages(admin):
    from scheduler_app.templatetags.scheduler_admin import ADMIN_GROUPS

    response = admin.get("/admin/scheduler_app/")
    html = response.content.decode()
    captions = [part.split("</a>", 1)[0].rsplit(">", 1)[1] for part in html.split("<caption>")[1:]]
    assert captions == ["Operations", "Sends", "Schedules", "Settings"]
    registered = {
        model._meta.model_name
        for model in django_admin.site._registry
        if model._meta.app_label == "scheduler_app"
    }
    grouped = [name for names in ADMIN_GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(registered)


def test_the_empty_tables_of_the_lateness_overview_and_the_switchboard_say_what_fills_them(
    admin,
):
    lateness = admin.get(changelist("latenessoverview")).content.decode()
    assert (
        '<td colspan="5">No runs in this window: each job a worker starts adds its lateness '
        "here.</td>"
    ) in lateness
    switchboard = admin.get(changelist("control")).content.decode()
    assert (
        '<td colspan="5">Nothing yet: every pause and resume is recorded here, with who and '
        "why.</td>"
    ) in switchboard


def test_the_main_index_groups_the_scheduler_pages_as_the_app_index_does(admin):
    from scheduler_app.templatetags.scheduler_admin import ADMIN_GROUPS

    html = admin.get("/admin/").content.decode()
    captions = [part.split("</a>", 1)[0].rsplit(">", 1)[1] for part in html.split("<caption>")[1:]]
    scheduler = [caption for caption in captions if caption.startswith("Scheduler")]
    assert scheduler == [
        "Scheduler: Operations",
        "Scheduler: Sends",
        "Scheduler: Schedules",
        "Scheduler: Settings",
    ]
    assert "Authentication and Authorization" in captions  # other apps as Django shows them
    for names in ADMIN_GROUPS.values():
        for name in names:
            assert html.count('<tr class="model-%s">' % name) == 1, name
