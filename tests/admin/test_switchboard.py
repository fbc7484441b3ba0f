"""The switchboard: pause and resume everything, a queue, a task or a batch, audited.

A pause needs a reason; pausing everything needs its own permission; every
refusal says why and changes nothing; the paused state shows on the jobs list.
"""

from __future__ import annotations

import pytest

from scheduler_app import controls
from scheduler_app.exceptions import ValidationError
from scheduler_app.models import Control, ControlEvent, Job, SendBatch
from tests.admin.conftest import changelist, client_for, get, messages_of

pytestmark = pytest.mark.django_db

#: What pausing with a reason like the stale-send guard's is refused with.
STALE_REASON_REFUSED = (
    'A pause reason cannot start with "stale:": that marks the stale-send guard\'s own pauses.'
)

SWITCHBOARD = "/admin/scheduler_app/control/"


def switch(client, scope, target="", action="pause", reason="Bad template"):
    """Click a switch as the switchboard's form does."""
    client.cookies.pop("messages", None)  # only this request's messages count
    return client.post(
        SWITCHBOARD, {"scope": scope, "target": target, "action": action, "reason": reason}
    )


def paused_rows():
    return list(Control.objects.filter(paused=True).values_list("scope", "target"))


def events():
    return list(
        ControlEvent.objects.order_by("id").values_list(
            "scope", "target", "action", "reason", "by__username"
        )
    )


def test_switchboard_lists_everything_each_queue_and_each_task(admin):
    assert changelist("control") == SWITCHBOARD
    response = admin.get(SWITCHBOARD)
    assert response.status_code == 200
    rows = [(scope, target) for scope, target, _label, _control in response.context["rows"]]
    assert rows[:4] == [
        ("global", ""),
        ("queue", "default"),
        ("queue", "emails"),
        ("queue", "slow"),
    ]
    assert ("task", "tests.record") in rows
    assert response.context["can_change"] is True


@pytest.mark.parametrize("reason", ["", "   "])
@pytest.mark.parametrize(
    ("scope", "target"), [("global", ""), ("queue", "emails"), ("task", "tests.record")]
)
def test_pause_without_a_reason_is_refused_and_changes_nothing(admin, scope, target, reason):
    response = switch(admin, scope, target, reason=reason)
    assert response.status_code == 302
    assert messages_of(response) == [("error", "A reason is required to pause.")]
    assert paused_rows() == []
    assert events() == []


def test_pausing_a_batch_with_the_stale_send_guards_reason_is_refused(admin, make_batch):
    batch = make_batch(status=SendBatch.Status.SENDING)
    response = switch(admin, "batch", str(batch.pk), reason="stale: hold on")
    assert messages_of(response) == [("error", STALE_REASON_REFUSED)]
    assert SendBatch.objects.get(pk=batch.pk).status == SendBatch.Status.SENDING


@pytest.mark.parametrize(
    ("scope", "target", "what"),
    [
        ("global", "", "Everything"),
        ("queue", "emails", "Queue emails"),
        ("task", "tests.record", "Task tests.record"),
    ],
)
def test_pause_then_resume_records_who_why_and_when_and_audits_both(
    admin, superuser, scope, target, what
):
    response = switch(admin, scope, target, reason="Provider outage")
    assert messages_of(response) == [("success", "%s: paused." % what)]
    control = Control.objects.get(scope=scope, target=target)
    assert (control.paused, control.reason, control.changed_by) == (
        True,
        "Provider outage",
        superuser,
    )
    page = admin.get(SWITCHBOARD).content.decode()
    assert "PAUSED" in page and "Provider outage" in page

    response = switch(admin, scope, target, action="resume", reason="")
    assert messages_of(response) == [("success", "%s: resumed." % what)]
    assert paused_rows() == []
    assert events() == [
        (scope, target, "pause", "Provider outage", "root"),
        (scope, target, "resume", "", "root"),
    ]


def test_pausing_what_is_already_paused_says_so_and_adds_no_audit_row(admin):
    switch(admin, "queue", "emails", reason="first")
    response = switch(admin, "queue", "emails", reason="second")
    assert messages_of(response) == [
        ("warning", "Queue emails was already paused; nothing changed.")
    ]
    assert Control.objects.get(scope="queue", target="emails").reason == "first"
    assert [e[3] for e in events()] == ["first"]


def test_resuming_what_is_not_paused_says_so(admin):
    response = switch(admin, "task", "tests.record", action="resume", reason="")
    assert messages_of(response) == [
        ("warning", "Task tests.record was already resumed; nothing changed.")
    ]
    assert events() == []


def test_pausing_a_queue_without_its_name_is_refused(admin):
    response = switch(admin, "queue", "", reason="why not")
    assert messages_of(response) == [("error", "Pausing a queue needs its name.")]
    assert paused_rows() == []


def test_an_unknown_scope_is_refused_with_the_field_error(admin):
    response = switch(admin, "planet", "mars")
    assert messages_of(response) == [
        ("error", "scope: Select a valid choice. planet is not one of the available choices.")
    ]
    assert paused_rows() == []


def test_pausing_everything_needs_the_pause_everything_permission(staff):
    operator = staff("operator", "view_control", "change_control")
    client = client_for(operator)
    response = switch(client, "global", "", reason="Incident 12")
    assert messages_of(response) == [("error", "You do not have permission to pause this.")]
    assert paused_rows() == []
    assert events() == []
    # The same operator may pause a queue.
    response = switch(client, "queue", "emails", reason="Incident 12")
    assert messages_of(response) == [("success", "Queue emails: paused.")]


def test_resuming_everything_needs_the_pause_everything_permission(admin, staff):
    switch(admin, "global", "", reason="Incident 12")
    client = client_for(staff("operator", "view_control", "change_control"))
    response = switch(client, "global", "", action="resume", reason="")
    assert messages_of(response) == [("error", "You do not have permission to resume this.")]
    assert paused_rows() == [("global", "")]


def test_pause_everything_permission_lets_a_staff_user_pause_everything(staff):
    client = client_for(staff("lead", "view_control", "change_control", "pause_everything"))
    response = switch(client, "global", "", reason="Incident 12")
    assert messages_of(response) == [("success", "Everything: paused.")]
    assert paused_rows() == [("global", "")]


def test_a_view_only_user_sees_the_switchboard_without_switches_and_cannot_post(staff):
    client = client_for(staff("viewer", "view_control"))
    page = client.get(SWITCHBOARD)
    assert page.status_code == 200
    assert page.context["can_change"] is False
    assert "switch-form" not in page.content.decode()
    response = switch(client, "queue", "emails", reason="sneaky")
    assert messages_of(response) == [("error", "You do not have permission to pause this.")]
    assert paused_rows() == []


def test_paused_queue_shows_as_a_warning_and_on_each_pending_job_it_covers(admin, make_job):
    covered = make_job()  # queue "default"
    other = make_job(queue="emails")
    running = make_job(Job.Status.RUNNING)
    switch(admin, "queue", "default", reason="Deploy")
    response = get(admin, changelist("job"))
    assert messages_of(response) == [("warning", "Paused by kill switch: queues: default.")]
    html = response.content.decode()
    rows = {job.pk: row for job, row in _rows(response)}
    assert "(paused)" in rows[covered.pk]
    assert "(paused)" not in rows[other.pk]
    assert "(paused)" not in rows[running.pk]
    assert html.count("(paused)") == 1


def test_paused_everything_and_a_task_are_both_named_in_the_warning(admin, make_job):
    job = make_job(queue="emails")
    switch(admin, "global", "", reason="Incident")
    switch(admin, "task", "tests.record", reason="Bug")
    response = get(admin, changelist("job"))
    assert messages_of(response) == [
        ("warning", "Paused by kill switch: EVERYTHING; tasks: tests.record.")
    ]
    assert "(paused)" in dict(_rows(response))[job]


def test_job_list_has_no_pause_warning_when_nothing_is_paused(admin, make_job):
    make_job()
    response = get(admin, changelist("job"))
    assert messages_of(response) == []
    assert "(paused)" not in response.content.decode()


def test_switchboard_pauses_and_resumes_a_batch_with_the_audit_trail(admin, make_batch, staff):
    batch = make_batch(status=SendBatch.Status.SENDING)
    response = switch(admin, "batch", str(batch.pk), reason="Wrong link")
    assert messages_of(response) == [("success", "Batch %s: paused." % batch.pk)]
    batch.refresh_from_db()
    assert (batch.status, batch.status_reason) == (SendBatch.Status.PAUSED, "Wrong link")

    # Resuming a batch needs resume_sendbatch even with change_control.
    client = client_for(staff("operator", "view_control", "change_control"))
    response = switch(client, "batch", str(batch.pk), action="resume", reason="")
    assert messages_of(response) == [("error", "You do not have permission to resume this.")]
    assert SendBatch.objects.get(pk=batch.pk).status == SendBatch.Status.PAUSED

    response = switch(admin, "batch", str(batch.pk), action="resume", reason="")
    assert messages_of(response) == [("success", "Batch %s: resumed." % batch.pk)]
    assert SendBatch.objects.get(pk=batch.pk).status == SendBatch.Status.SCHEDULED
    assert [e[:3] for e in events()] == [
        ("batch", str(batch.pk), "pause"),
        ("batch", str(batch.pk), "resume"),
    ]


def test_switchboard_resume_of_a_completed_batch_gives_the_state_error(admin, make_batch):
    batch = make_batch(status=SendBatch.Status.COMPLETED)
    response = switch(admin, "batch", str(batch.pk), action="resume", reason="")
    assert messages_of(response) == [
        ("error", "Only a paused batch can be resumed; this batch is completed.")
    ]
    assert SendBatch.objects.get(pk=batch.pk).status == SendBatch.Status.COMPLETED


def _rows(response):
    """Yield (job, rendered status cell) for the jobs changelist."""
    cl = response.context["cl"]
    html = response.content.decode()
    for job in cl.result_list:
        start = html.index('value="%s"' % job.pk)
        end = html.find("</tr>", start)
        yield job, html[start:end]


def test_switchboard_pause_of_a_completed_batch_says_why_it_was_not_paused(admin, make_batch):
    batch = make_batch(status=SendBatch.Status.COMPLETED)
    response = switch(admin, "batch", str(batch.pk), reason="Too late?")
    assert messages_of(response) == [
        ("error", "Send batch %s was not paused: it is completed." % batch.pk)
    ]
    assert SendBatch.objects.get(pk=batch.pk).status == SendBatch.Status.COMPLETED


@pytest.mark.parametrize(
    ("target", "action", "message"),
    [
        ("abc", "pause", "Send batch 'abc' does not exist."),
        ("999999", "resume", "Send batch '999999' does not exist."),
        ("999999", "pause", "Send batch '999999' does not exist."),
    ],
)
def test_switchboard_names_a_missing_batch_clearly(admin, target, action, message):
    response = switch(admin, "batch", target, action=action, reason="x")
    assert messages_of(response) == [("error", message)]
    assert events() == []


def test_switch_messages_keep_the_case_of_the_name(admin, settings):
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "QUEUES": ["default", "Bulk-EU"]}
    response = switch(admin, "queue", "Bulk-EU", reason="x")
    assert messages_of(response) == [("success", "Queue Bulk-EU: paused.")]


@pytest.mark.parametrize(
    ("scope", "target", "message"),
    [
        (
            "queue",
            "nope",
            "Unknown queue 'nope'; SCHEDULER_APP['QUEUES'] lists: default, emails, slow.",
        ),
        ("task", "tests.nope", "No task is registered as 'tests.nope'."),
    ],
)
def test_pausing_a_queue_or_task_that_does_not_exist_is_refused(admin, scope, target, message):
    """A crafted POST (or a typo in code) must not report a pause that covers nothing."""
    response = switch(admin, scope, target, reason="Outage")
    assert messages_of(response) == [("error", message)]
    assert paused_rows() == []
    assert events() == []
    with pytest.raises(ValidationError, match="nope"):
        controls.pause(scope, target, reason="Outage")
    assert Control.objects.count() == 0


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_a_name_longer_than_a_switch_can_store_is_a_form_error(admin, action):
    response = switch(admin, "task", "t" * 201, action=action, reason="x")
    assert messages_of(response) == [
        ("error", "target: Ensure this value has at most 200 characters (it has 201).")
    ]
    assert Control.objects.count() == 0


def test_a_pause_of_a_queue_removed_from_the_settings_can_still_be_resumed(admin, settings):
    Control.objects.create(scope="queue", target="retired", paused=True, reason="old")
    response = switch(admin, "queue", "retired", action="resume", reason="")
    assert messages_of(response) == [("success", "Queue retired: resumed.")]
    assert paused_rows() == []


def test_resuming_a_name_never_paused_stores_no_switch(admin):
    response = switch(admin, "queue", "anything", action="resume", reason="")
    assert messages_of(response) == [
        ("warning", "Queue anything was already resumed; nothing changed.")
    ]
    assert Control.objects.count() == 0
