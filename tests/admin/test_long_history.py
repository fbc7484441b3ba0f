"""Admin pages read a bounded number of rows however long the history (issue #14), and
still filter, search and list everything an operator asks for.

The job list counts at most BoundedPaginator.limit rows ("1000+ jobs") and offers the
task names and queues the code knows; a whole address finds its recipient through an
index; a schedule's page lists its LAST_RUNS latest runs and links to all of them.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app.admin.pagination import BoundedPaginator
from scheduler_app.admin.schedules import LAST_RUNS
from scheduler_app.models import Job, Recipient, Schedule, ScheduleOccurrence, SendBatch
from tests.admin.conftest import change, changelist, client_for, form_data, get
from tests.helpers import reads_of

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
#: A history longer than BoundedPaginator.limit.
ROWS = 3000
#: The rows and index entries a look-up may visit in one query, at any history size.
HANDFUL = 20


def finished_jobs(count: int, **fields: object) -> list[Job]:
    values = {"task_name": "tests.noop", "status": Job.Status.SUCCEEDED, **fields}
    return Job.objects.bulk_create(
        Job(scheduled_for=T0, run_at=T0, started_at=T0, finished_at=T0, **values)
        for _ in range(count)
    )


def sent_recipients(count: int) -> SendBatch:
    batch = SendBatch.objects.create(
        name="Old news",
        subject_template="News",
        text_template="Hi",
        audience="tests.customers",
        expected_max_audience=count,
        provider="fake",
        rate_limit_key="fake",
        status=SendBatch.Status.COMPLETED,
    )
    Recipient.objects.bulk_create(
        Recipient(
            batch=batch,
            recipient_key=str(n),
            address="customer%s@example.com" % n,
            status=Recipient.Status.SENT,
        )
        for n in range(count)
    )
    return batch


def schedule_with_runs(count: int) -> Schedule:
    schedule = Schedule.objects.create(
        name="minutely", task_name="tests.noop", kind=Schedule.Kind.CRON, cron="* * * * *"
    )
    ScheduleOccurrence.objects.bulk_create(
        ScheduleOccurrence(
            schedule=schedule,
            occurrence_at=T0 + dt.timedelta(minutes=n),
            outcome=ScheduleOccurrence.Outcome.SKIPPED_OVERLAP,
        )
        for n in range(count)
    )
    return schedule


def page_reads(client, url: str, data: dict | None = None) -> list[tuple[int, str]]:
    """GET ``url``; return each SELECT it ran on a scheduler_app table with the rows it
    visits, most first."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    with CaptureQueriesContext(connection) as queries:
        response = get(client, url, data)
    assert response.status_code == 200
    reads = reads_of(queries, "scheduler_app_")
    assert reads
    return reads


# -- cost, on PostgreSQL --------------------------------------------------------------------


@pytest.mark.postgres_only
def test_the_job_list_reads_no_more_rows_than_its_count_limit(admin):
    finished_jobs(ROWS)

    (most, sql), *_ = page_reads(admin, changelist("job"))

    assert most <= BoundedPaginator.limit + 1, sql


@pytest.mark.postgres_only
def test_a_whole_address_search_reads_a_handful_of_recipients(admin):
    sent_recipients(ROWS)

    (most, sql), *_ = page_reads(admin, changelist("recipient"), {"q": "Customer1234@Example.com"})

    assert most <= HANDFUL, sql


@pytest.mark.postgres_only
def test_the_recipient_list_reads_no_more_rows_than_its_count_limit(admin):
    sent_recipients(ROWS)

    (most, sql), *_ = page_reads(admin, changelist("recipient"))

    assert most <= BoundedPaginator.limit + 1, sql


@pytest.mark.postgres_only
def test_a_schedule_page_reads_its_last_runs_only(admin):
    schedule = schedule_with_runs(ROWS)

    (most, sql), *_ = page_reads(admin, change("schedule", schedule.pk))

    assert most <= LAST_RUNS + HANDFUL, sql


# -- what operators see, on both databases --------------------------------------------------


@pytest.fixture
def count_limit(monkeypatch) -> int:
    monkeypatch.setattr(BoundedPaginator, "limit", 3)
    return 3


def test_a_list_longer_than_the_count_limit_says_so_and_pages_up_to_it(admin, count_limit):
    finished_jobs(count_limit + 2)

    response = get(admin, changelist("job"))
    html = response.content.decode()

    assert "3+ jobs" in html
    assert "Select all 3+ jobs" in html  # an action across pages takes every matching job
    assert len(response.context["cl"].result_list) == count_limit + 2  # one page of 100


def test_a_list_within_the_count_limit_shows_its_exact_count(admin, count_limit):
    finished_jobs(count_limit)

    html = get(admin, changelist("job")).content.decode()

    assert "3 jobs" in html and "3+" not in html


def test_the_task_filter_offers_registered_tasks_and_filters(admin):
    finished_jobs(1)
    (record,) = finished_jobs(1, task_name="tests.record")

    response = get(admin, changelist("job"), {"task_name": "tests.record"})

    offered = _choices(response, "task name")
    assert {"tests.noop", "tests.record", "scheduler_app.send_batch"} <= offered
    assert [job.pk for job in response.context["cl"].result_list] == [record.pk]


def test_a_task_no_longer_registered_still_filters_and_is_offered_while_selected(admin):
    (gone,) = finished_jobs(1, task_name="tests.renamed_since")
    finished_jobs(1)

    response = get(admin, changelist("job"), {"task_name": "tests.renamed_since"})

    assert [job.pk for job in response.context["cl"].result_list] == [gone.pk]
    assert "tests.renamed_since" in _choices(response, "task name")
    assert "tests.renamed_since" not in _choices(get(admin, changelist("job")), "task name")


def test_the_queue_filter_offers_the_configured_queues_and_filters(admin, settings):
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "QUEUES": ["default", "emails"]}
    finished_jobs(1)
    (emails,) = finished_jobs(1, queue="emails")
    finished_jobs(1, queue="slow")  # no longer configured

    response = get(admin, changelist("job"), {"queue": "emails"})

    assert _choices(response, "queue") == {"default", "emails"}
    assert [job.pk for job in response.context["cl"].result_list] == [emails.pk]


def test_a_whole_address_finds_its_recipient_in_any_case(admin):
    sent_recipients(3)

    response = get(admin, changelist("recipient"), {"q": " CUSTOMER1@example.COM "})

    assert [r.address for r in response.context["cl"].result_list] == ["customer1@example.com"]


def test_part_of_an_address_still_finds_every_address_containing_it(admin):
    sent_recipients(12)

    response = get(admin, changelist("recipient"), {"q": "r1"})

    assert sorted(r.address for r in response.context["cl"].result_list) == [
        "customer10@example.com",
        "customer11@example.com",
        "customer1@example.com",
    ]


def test_a_schedule_page_lists_its_last_runs_and_links_to_all_of_them(admin):
    schedule = schedule_with_runs(LAST_RUNS + 5)
    other = Schedule.objects.create(name="other", task_name="tests.noop", cron="0 * * * *")
    ScheduleOccurrence.objects.create(
        schedule=other, occurrence_at=T0, outcome=ScheduleOccurrence.Outcome.SKIPPED_OVERLAP
    )

    page = get(admin, change("schedule", schedule.pk))

    (inline,) = page.context["inline_admin_formsets"]
    listed = [form.instance.occurrence_at for form in inline.formset.forms]
    assert listed == [T0 + dt.timedelta(minutes=n) for n in reversed(range(5, LAST_RUNS + 5))]
    html = page.content.decode()
    assert "Last %s runs" % LAST_RUNS in html
    link = "%s?schedule__id__exact=%s" % (changelist("scheduleoccurrence"), schedule.pk)
    assert 'href="%s"' % link in html

    everything = get(admin, link)

    assert len(everything.context["cl"].result_list) == LAST_RUNS + 5
    assert {o.schedule_id for o in everything.context["cl"].result_list} == {schedule.pk}


def _choices(response, title: str) -> set[str]:
    """Return the values the list filter ``title`` offers (besides "All")."""
    (spec,) = [s for s in response.context["cl"].filter_specs if s.title == title]
    return {choice["display"] for choice in spec.choices(response.context["cl"])} - {"All"}


def test_an_address_no_recipient_has_is_searched_as_part_of_addresses(admin):
    sent_recipients(12)

    response = get(admin, changelist("recipient"), {"q": "r1@example.com"})

    assert [r.address for r in response.context["cl"].result_list] == ["customer1@example.com"]


def test_whoever_may_see_schedules_may_follow_the_link_to_all_their_runs(staff):
    schedule = schedule_with_runs(3)
    viewer = client_for(staff("viewer", "view_schedule"))

    page = get(viewer, change("schedule", schedule.pk))
    everything = get(viewer, changelist("scheduleoccurrence"), {"schedule__id__exact": schedule.pk})

    assert page.status_code == everything.status_code == 200
    assert len(everything.context["cl"].result_list) == 3
    assert get(client_for(staff("nobody")), changelist("scheduleoccurrence")).status_code == 403


def test_a_schedule_with_more_runs_than_its_page_lists_is_saved(admin):
    schedule = schedule_with_runs(LAST_RUNS + 5)
    data = form_data(admin.get(change("schedule", schedule.pk)))
    assert "occurrences-0-id" in data  # as a browser sends the listed runs back
    data["payload"] = '{"saved": true}'

    response = admin.post(change("schedule", schedule.pk), data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Schedule.objects.get(pk=schedule.pk).payload == {"saved": True}
