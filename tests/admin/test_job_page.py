"""The job page (#38): a view page (no Save, a POST refused, no "No fields changed" history)
with the job's own Cancel, Run now and Retry buttons, as the list actions on one job."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

from scheduler_app.models import Job
from tests.admin.conftest import change, client_for, messages_of

pytestmark = pytest.mark.django_db

Status = Job.Status


def action_url(job, name: str) -> str:
    return "/admin/scheduler_app/job/%s/actions/%s/" % (job.pk, name)


def buttons(client, job) -> list[str]:
    """Return the page actions the job's page offers (the form's last path part)."""
    html = client.get(change("job", job.pk)).content.decode()
    prefix = 'action="/admin/scheduler_app/job/%s/actions/' % job.pk
    return [part.split("/", 1)[0] for part in html.split(prefix)[1:]]


def test_the_job_page_has_no_save_and_a_post_to_it_writes_no_history(admin, make_job):
    job = make_job()
    response = admin.get(change("job", job.pk))
    html = response.content.decode()
    assert response.context["title"] == "View job"
    assert 'name="_save"' not in html
    assert 'name="_continue"' not in html
    assert admin.post(change("job", job.pk), {}).status_code == 403
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize(
    "status, offered",
    [
        (Status.PENDING, ["cancel", "run_now"]),
        (Status.RUNNING, []),
        (Status.FAILED, ["retry"]),
        (Status.SUCCEEDED, []),
        (Status.CANCELLED, []),
    ],
)
def test_the_job_page_offers_the_actions_its_status_allows(admin, make_job, status, offered):
    assert buttons(admin, make_job(status)) == offered


def test_run_now_from_the_page_runs_the_list_action_and_returns_to_the_page(admin, make_job):
    job = make_job()
    response = admin.post(action_url(job, "run_now"))
    assert response.status_code == 302
    assert response["Location"] == change("job", job.pk)
    assert messages_of(response) == [("success", "1 job will run now.")]
    assert LogEntry.objects.get().change_message == "Run now."


def test_cancel_and_retry_from_the_page(admin, make_job):
    pending, failed = make_job(), make_job(Status.FAILED)
    assert messages_of(admin.post(action_url(pending, "cancel"))) == [
        ("success", "1 job cancelled.")
    ]
    assert messages_of(admin.post(action_url(failed, "retry"))) == [
        ("success", "1 failed job will be retried.")
    ]
    assert list(Job.objects.order_by("pk").values_list("status", flat=True)) == [
        Status.CANCELLED,
        Status.PENDING,
    ]


def test_page_actions_need_a_post_a_known_name_and_the_change_permission(staff, make_job):
    job = make_job()
    viewer = client_for(staff("viewer", "view_job"))
    assert buttons(viewer, job) == []
    assert viewer.post(action_url(job, "cancel")).status_code == 403
    changer = client_for(staff("changer", "view_job", "change_job"))
    assert changer.get(action_url(job, "cancel")).status_code == 405
    assert changer.post(action_url(job, "delete")).status_code == 404
    assert Job.objects.get(pk=job.pk).status == Status.PENDING
