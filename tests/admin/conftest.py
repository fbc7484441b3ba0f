"""Fixtures for the admin tests: users with exact permissions, jobs and batches in given states.

Every admin request goes through Django's test client; messages are read back
from the messages framework as (level tag, text) pairs so tests assert both.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.forms import MultiWidget
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduler_app import clock, schedule
from scheduler_app.db import backend
from scheduler_app.models import Job, SendBatch
from tests.testapp.models import Customer

ACTION_CHECKBOX = "_selected_action"


def perm(codename: str) -> Permission:
    """Return the scheduler_app permission ``codename`` (e.g. "view_job")."""
    return Permission.objects.get(content_type__app_label="scheduler_app", codename=codename)


@pytest.fixture
def staff(db) -> Callable[..., Any]:
    """Return a function that creates a staff user holding exactly the given scheduler_app perms."""

    def create(username: str, *codenames: str) -> Any:
        user = get_user_model().objects.create_user(username, is_staff=True)  # force_login
        user.user_permissions.add(*(perm(c) for c in codenames))
        return user

    return create


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def superuser(db) -> Any:
    return get_user_model().objects.create_superuser("root", "root@example.com", None)


@pytest.fixture
def admin(superuser) -> Client:
    """A test client logged in as a superuser."""
    return client_for(superuser)


def messages_of(response: Any) -> list[tuple[str, str]]:
    """Return the (level tag, text) of every message waiting after ``response``.

    Then drop them from the client, as a browser showing them would, so the
    next request's messages are its own.
    """
    found = [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]
    response.client.cookies.pop("messages", None)
    return found


def get(client: Client, url: str, data: Any = None) -> Any:
    """GET ``url`` with no messages left over from earlier requests."""
    client.cookies.pop("messages", None)
    return client.get(url, data)


def changelist(model: str) -> str:
    return reverse("admin:scheduler_app_%s_changelist" % model)


def change(model: str, pk: int) -> str:
    return reverse("admin:scheduler_app_%s_change" % model, args=[pk])


def delete(model: str, pk: int) -> str:
    return reverse("admin:scheduler_app_%s_delete" % model, args=[pk])


def post_action(client: Client, model: str, action: str, objs: Iterable[Any], **extra: Any) -> Any:
    """POST a changelist action for ``objs`` as the admin's action form does."""
    data = {"action": action, ACTION_CHECKBOX: [o.pk for o in objs], **extra}
    client.cookies.pop("messages", None)  # only this request's messages count
    return client.post(changelist(model), data)


def form_data(page: Any) -> dict[str, Any]:
    """Return a change page's form as a browser would submit it unchanged (inlines included)."""
    form = page.context["adminform"].form
    data: dict[str, Any] = {}
    for name, field in form.fields.items():
        value = form[name].value()  # already prepared: JSON text, duration string, ...
        if isinstance(field.widget, MultiWidget):  # the admin's split date and time
            if value:
                value = timezone.localtime(value)
                data[name + "_0"] = value.strftime("%Y-%m-%d")
                data[name + "_1"] = value.strftime("%H:%M:%S")
        elif isinstance(value, bool):
            if value:
                data[name] = "on"
        elif value is not None:
            data[name] = value
    for inline in page.context["inline_admin_formsets"]:
        management = inline.formset.management_form
        for name in management.fields:
            data[management.add_prefix(name)] = management[name].value()
        for inline_form in inline.formset.forms:
            for field in inline_form:
                if field.is_hidden and field.value() is not None:  # the row's id, its parent
                    data[field.html_name] = field.value()
    return data


def offered_actions(client: Client, model: str) -> set[str]:
    """Return the action names the changelist offers to the client's user."""
    response = client.get(changelist(model))
    assert response.status_code == 200
    form = response.context["action_form"]
    if form is None:  # no action at all for this user
        return set()
    return {name for name, _ in form.fields["action"].choices if name}


# -- jobs ------------------------------------------------------------------------


@pytest.fixture
def make_job(db) -> Callable[..., Job]:
    """Return a function that schedules a tests.record job, then stages it in ``status``.

    pending: as scheduled (due an hour from now unless ``at``/``delay`` is given);
    running: claimed by the real claim query; succeeded/failed/cancelled: the
    finished row a worker or cancel() would have left.
    """

    def make(status: str = Job.Status.PENDING, **options: Any) -> Job:
        if status == Job.Status.RUNNING:
            options.setdefault("at", clock.now() - dt.timedelta(seconds=1))
        if not {"at", "delay", "undo_window"} & options.keys():
            options["delay"] = 3600
        job = schedule("tests.record", options.pop("payload", {}), **options)
        if status == Job.Status.RUNNING:
            now = clock.now()
            rows = backend().claim_jobs(
                worker="test-worker",
                queues=[job.queue],
                limit=1,
                lease=dt.timedelta(seconds=60),
            )
            assert [row[0] for row in rows] == [job.pk]
        elif status != Job.Status.PENDING:
            now = clock.now()
            Job.objects.filter(pk=job.pk).update(
                status=status,
                attempts=1 if status != Job.Status.CANCELLED else 0,
                max_attempts=1,
                started_at=now if status != Job.Status.CANCELLED else None,
                finished_at=now,
                last_error="boom" if status == Job.Status.FAILED else "",
            )
        job.refresh_from_db()
        return job

    return make


def snapshot(obj: Any, *fields: str) -> dict[str, Any]:
    """Return the stored values of ``fields`` of ``obj`` (to prove nothing changed)."""
    return type(obj).objects.filter(pk=obj.pk).values(*fields).get()


JOB_FIELDS = (
    "status",
    "run_at",
    "attempts",
    "max_attempts",
    "finished_at",
    "cancelled_at",
    "cancelled_by",
    "worker_id",
    "last_error",
)


# -- send batches -------------------------------------------------------------------

#: Checklist items a test batch fails before its dry-run and seed send.
UNPREPARED = ("audience_within_limit", "dry_run_clean", "seed_sent")


@pytest.fixture
def customers(db) -> list[Customer]:
    """Three customers of the "tests.customers" audience (addresses without digits)."""
    return [
        Customer.objects.create(email=email, first_name=name, plan="pro")
        for email, name in [
            ("ada@example.com", "Ada"),
            ("grace@example.com", "Grace"),
            ("linus@example.org", "Linus"),
        ]
    ]


@pytest.fixture
def make_batch(db) -> Callable[..., SendBatch]:
    """Return a function that creates a draft batch to the "tests.customers" audience."""

    def create(**fields: Any) -> SendBatch:
        values: dict[str, Any] = {
            "name": "Spring news",
            "subject_template": "News for {{ first_name|default:'you' }}",
            "text_template": "Hi {{ first_name|default:'there' }}, here is the spring news.",
            "audience": "tests.customers",
            "expected_max_audience": 100,
            "provider": "fake",
            "rate_limit_key": "fake",
            "scheduled_at": clock.now() + dt.timedelta(hours=1),
            "timezone": "Europe/Paris",
            **fields,
        }
        return SendBatch.objects.create(**values)

    return create


BATCH_FIELDS = (
    "status",
    "status_reason",
    "status_changed_at",
    "undo_deadline",
    "counted_sent",
    "total",
    "frozen_at",
)


@pytest.fixture(autouse=True)
def _media_in_tmp(settings, tmp_path):
    """Dry-run reports go through default_storage: keep them out of the repository."""
    settings.MEDIA_ROOT = str(tmp_path / "media")
