"""Schedules admin: enable / disable, validated editing, the next 10 runs, last runs."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from scheduler_app.admin.schedules import LAST_RUNS
from scheduler_app.clock import frozen_clock
from scheduler_app.models import Job, Schedule, ScheduleOccurrence
from tests.admin.conftest import change, form_data, messages_of, post_action
from tests.alerts.helpers import COUNTED

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 3, 27, 12, 0, tzinfo=dt.UTC)  # two days before Paris moves to summer time


@pytest.fixture
def make_schedule(db):
    def create(name="morning-report", **fields):
        values = {
            "task_name": "tests.noop",
            "kind": Schedule.Kind.CRON,
            "cron": "30 8 * * *",
            "timezone": "Europe/Paris",
            **fields,
        }
        return Schedule.objects.create(name=name, **values)

    return create


def test_enable_and_disable_report_what_changed(admin, make_schedule):
    on = make_schedule("on")
    off = make_schedule("off", enabled=False)
    response = post_action(admin, "schedule", "disable", [on, off])
    assert messages_of(response) == [
        ("success", "1 schedule disabled."),
        ("info", "1 schedule was already disabled."),
    ]
    assert list(Schedule.objects.values_list("enabled", flat=True)) == [False, False]

    response = post_action(admin, "schedule", "enable", [on, off])
    assert messages_of(response) == [("success", "2 schedules enabled.")]
    assert list(Schedule.objects.values_list("enabled", flat=True)) == [True, True]


def test_change_form_refuses_a_bad_cron_with_a_field_error(admin, make_schedule):
    schedule = make_schedule()
    data = form_data(admin.get(change("schedule", schedule.pk)))
    data["cron"] = "every morning"
    response = admin.post(change("schedule", schedule.pk), data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert errors == {
        "cron": [
            "Invalid cron expression 'every morning': "
            "a cron expression has 5 fields (minute hour day month weekday)."
        ]
    }
    assert Schedule.objects.get(pk=schedule.pk).cron == "30 8 * * *"


def test_change_form_refuses_an_out_of_range_cron_field(admin, make_schedule):
    schedule = make_schedule()
    data = form_data(admin.get(change("schedule", schedule.pk)))
    data["cron"] = "61 8 * * *"
    response = admin.post(change("schedule", schedule.pk), data)
    [error] = response.context["adminform"].form.errors["cron"]
    assert error.startswith("Invalid cron expression '61 8 * * *': ")
    assert Schedule.objects.get(pk=schedule.pk).cron == "30 8 * * *"


def test_change_form_refuses_an_unknown_time_zone_with_a_field_error(admin, make_schedule):
    schedule = make_schedule()
    data = form_data(admin.get(change("schedule", schedule.pk)))
    data["timezone"] = "Europe/Atlantis"
    response = admin.post(change("schedule", schedule.pk), data)
    assert response.context["adminform"].form.errors == {
        "timezone": ["Unknown time zone 'Europe/Atlantis'; use an IANA name such as Europe/London."]
    }
    assert Schedule.objects.get(pk=schedule.pk).timezone == "Europe/Paris"


def test_change_form_refuses_an_unknown_task(admin, make_schedule):
    schedule = make_schedule()
    data = form_data(admin.get(change("schedule", schedule.pk)))
    data["task_name"] = "tests.nope"
    response = admin.post(change("schedule", schedule.pk), data)
    assert list(response.context["adminform"].form.errors) == ["task_name"]
    assert Schedule.objects.get(pk=schedule.pk).task_name == "tests.noop"


@pytest.mark.parametrize("how", ["action", "form"])
def test_enabling_a_schedule_again_does_not_replay_what_it_missed_while_disabled(
    admin, make_schedule, how
):
    """Disabled is an operator's decision: its cursor stayed where it stopped, so enabling
    it a month later caught up (run_once: one run hours late; run_all: every occurrence)."""
    from scheduler_app.schedules.enqueuer import enqueue_due_occurrences

    schedule = make_schedule(
        cron="*/5 * * * *", timezone="UTC", misfire_policy="run_all", overlap_policy="allow"
    )
    Schedule.objects.filter(pk=schedule.pk).update(enabled=False, next_run_at=T0)
    with frozen_clock(T0 + dt.timedelta(days=30, seconds=1)):
        if how == "action":
            post_action(admin, "schedule", "enable", [schedule])
        else:
            data = form_data(admin.get(change("schedule", schedule.pk)))
            data["enabled"] = "on"
            response = admin.post(change("schedule", schedule.pk), data)
            assert response.status_code == 302, response.context["adminform"].form.errors
        assert Schedule.objects.get(pk=schedule.pk).enabled
        enqueue_due_occurrences()
    assert Job.objects.filter(task_name=schedule.task_name).count() == 0
    assert ScheduleOccurrence.objects.filter(schedule=schedule).count() == 0


def test_a_valid_change_to_the_rule_saves_and_restarts_the_cursor(admin, make_schedule):
    schedule = make_schedule(next_run_at=T0)
    data = form_data(admin.get(change("schedule", schedule.pk)))
    data["cron"] = "0 9 * * 1-5"
    response = admin.post(change("schedule", schedule.pk), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    stored = Schedule.objects.get(pk=schedule.pk)
    assert (stored.cron, stored.next_run_at) == ("0 9 * * 1-5", None)


def test_change_page_lists_the_next_10_runs_in_the_zone_and_in_utc(admin, make_schedule):
    schedule = make_schedule()
    with frozen_clock(T0):
        html = admin.get(change("schedule", schedule.pk)).content.decode()
    runs = re.findall(
        r"<li>([^<]*)</li>", html.split("<ol class='next-runs'>")[1].split("</ol>")[0]
    )
    assert runs[:3] == [
        "2026-03-28 08:30:00 CET (Europe/Paris) = 2026-03-28 07:30:00 UTC",
        "2026-03-29 08:30:00 CEST (Europe/Paris) = 2026-03-29 06:30:00 UTC",  # summer time
        "2026-03-30 08:30:00 CEST (Europe/Paris) = 2026-03-30 06:30:00 UTC",
    ]
    assert len(runs) == 10
    assert runs[-1] == "2026-04-06 08:30:00 CEST (Europe/Paris) = 2026-04-06 06:30:00 UTC"


def test_fixed_rate_preview_counts_from_its_start(admin, make_schedule):
    schedule = make_schedule(
        kind=Schedule.Kind.FIXED_RATE,
        cron="",
        timezone="UTC",
        interval=dt.timedelta(minutes=15),
        start_at=T0,
    )
    with frozen_clock(T0 + dt.timedelta(minutes=1)):
        html = admin.get(change("schedule", schedule.pk)).content.decode()
    assert "<li>2026-03-27 12:15:00 UTC (UTC) = 2026-03-27 12:15:00 UTC</li>" in html
    assert "<li>2026-03-27 14:30:00 UTC (UTC) = 2026-03-27 14:30:00 UTC</li>" in html


def test_change_page_shows_last_runs_with_outcome_and_lateness(admin, make_schedule):
    schedule = make_schedule()
    due = T0 - dt.timedelta(hours=1)
    job = Job.objects.create(
        task_name="tests.noop",
        scheduled_for=due,
        run_at=due,
        status=Job.Status.SUCCEEDED,
        started_at=due + dt.timedelta(seconds=75),
        finished_at=due + dt.timedelta(seconds=76),
    )
    ScheduleOccurrence.objects.create(
        schedule=schedule,
        occurrence_at=due,
        outcome=ScheduleOccurrence.Outcome.ENQUEUED,
        job=job,
    )
    ScheduleOccurrence.objects.create(
        schedule=schedule,
        occurrence_at=due - dt.timedelta(days=1),
        outcome=ScheduleOccurrence.Outcome.SKIPPED_OVERLAP,
    )
    response = admin.get(change("schedule", schedule.pk))
    html = response.content.decode()
    assert "last %s runs" % LAST_RUNS in html.lower()
    assert "1 min 15 s" in html  # the enqueued run's lateness
    assert "succeeded" in html
    assert "skipped: previous run still pending or running" in html


def test_schedule_list_shows_the_rule_and_zone(admin, make_schedule):
    make_schedule()
    html = admin.get("/admin/scheduler_app/schedule/").content.decode()
    assert "30 8 * * *" in html and "Europe/Paris" in html


def test_add_form_with_a_blank_payload_saves_an_empty_payload(admin):
    response = admin.post(
        "/admin/scheduler_app/schedule/add/",
        {
            "name": "nightly",
            "task_name": "tests.noop",
            "payload": "",
            "queue": "",
            "enabled": "on",
            "kind": "cron",
            "cron": "0 3 * * *",
            "timezone": "UTC",
            "jitter": "0",
            "overlap_policy": "skip",
            "misfire_policy": "run_once",
            "misfire_grace": "60",
            "occurrences-TOTAL_FORMS": "0",
            "occurrences-INITIAL_FORMS": "0",
            "occurrences-MIN_NUM_FORMS": "0",
            "occurrences-MAX_NUM_FORMS": "0",
        },
    )
    assert response.status_code == 302
    assert Schedule.objects.get(name="nightly").payload == {}


def test_change_form_refuses_targets_that_would_never_or_always_alert(admin, make_schedule):
    """The admin refuses what @task and SCHEDULES refuse: no silent target that cannot work."""
    schedule = make_schedule()
    data = form_data(admin.get(change("schedule", schedule.pk)))
    data.update(
        lateness_target="-30",  # a negative target: every run would be "late"
        max_runtime="0",
        expected_every="-3600",
        zero_runs_alert="0",
    )
    response = admin.post(change("schedule", schedule.pk), data)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "lateness_target": ["Must be positive; leave it empty for no target."],
        "max_runtime": ["Must be positive; leave it empty for no target."],
        "expected_every": ["Must be positive; leave it empty for no target."],
        "zero_runs_alert": ["Must be at least 1; leave it empty for no alert."],
    }

    data.update(lateness_target="", max_runtime="", expected_every="", zero_runs_alert="3")
    response = admin.post(change("schedule", schedule.pk), data)
    assert response.context["adminform"].form.errors == {
        "zero_runs_alert": [
            "Needs a count key (the result key that counts items), here or on the task."
        ]
    }
    stored = Schedule.objects.get(pk=schedule.pk)
    assert (stored.lateness_target, stored.zero_runs_alert) == (None, None)


def test_a_zero_runs_alert_may_count_with_the_tasks_count_key(admin, make_schedule):
    schedule = make_schedule(task_name=COUNTED)  # the task declares count_key="processed"
    data = form_data(admin.get(change("schedule", schedule.pk)))
    data["zero_runs_alert"] = "3"
    response = admin.post(change("schedule", schedule.pk), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Schedule.objects.get(pk=schedule.pk).zero_runs_alert == 3


@pytest.mark.parametrize(
    "field", ["jitter", "misfire_grace", "interval", "expected_every", "max_runtime"]
)
def test_a_duration_beyond_ten_years_is_a_form_error_and_the_page_still_opens(admin, field):
    schedule = Schedule.objects.create(
        name="hourly",
        task_name="tests.noop",
        kind=Schedule.Kind.FIXED_RATE,
        interval=dt.timedelta(hours=1),
    )
    data = form_data(admin.get(change("schedule", schedule.pk)))
    data[field] = "999999999 00:00:00"  # the longest duration Django's form field reads
    saved = admin.post(change("schedule", schedule.pk), data)
    assert saved.status_code == 200
    assert saved.context["adminform"].form.errors[field] == [
        "Ensure this value is less than or equal to 3652 days, 0:00:00."
    ]
    assert admin.get(change("schedule", schedule.pk)).status_code == 200
