"""The pre-flight checklist: each item fails and passes as documented; scheduling obeys it."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app import clock
from scheduler_app.models import ControlEvent, Job, SendBatch
from scheduler_app.sends.batches import schedule_batch, seed_send
from scheduler_app.sends.checklist import ChecklistFailed, run_checklist
from scheduler_app.sends.dry_run import dry_run
from scheduler_app.sends.task_names import SEND_BATCH_TASK

WHEN = dt.datetime(2027, 5, 4, 8, 30, tzinfo=dt.UTC)
ALL_ITEMS = [
    "audience_within_limit",
    "dry_run_clean",
    "seed_sent",
    "schedule_unambiguous",
    "no_other_large_batch",
]


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path)


@pytest.fixture
def audience(customer):
    customer("ann@example.com", "Ann")
    customer("bob@example.com", "Bob")


@pytest.fixture
def draft(make_batch, audience):
    """A draft for two customers, to be sent at WHEN (Paris time), with a seed list."""
    return make_batch(
        status=SendBatch.Status.DRAFT,
        scheduled_at=WHEN,
        seed_list=["seed@example.com"],
        seed_context={"first_name": "Seed"},
    )


@pytest.fixture
def ready(draft):
    """The draft after a clean dry-run and a seed send: every item passes."""
    assert dry_run(draft).problems == 0
    seed_send(draft)
    draft.refresh_from_db()
    return draft


def items(batch: SendBatch) -> dict[str, tuple[bool, str]]:
    return {item.name: (item.ok, item.detail) for item in run_checklist(batch)}


@pytest.mark.django_db
def test_a_batch_after_a_clean_dry_run_and_a_seed_send_passes_every_item(ready):
    assert items(ready) == {
        "audience_within_limit": (
            True,
            "Audience of 2 recipients against an expected maximum of 100.",
        ),
        "dry_run_clean": (True, "The dry-run found 0 problem(s)."),
        "seed_sent": (True, "A seed send of the current template happened."),
        "schedule_unambiguous": (
            True,
            "Send time 2027-05-04 08:30:00 UTC (intended time zone Europe/Paris).",
        ),
        "no_other_large_batch": (True, "This batch is not large, or has no time yet."),
    }
    assert [item.name for item in run_checklist(ready)] == ALL_ITEMS


@pytest.mark.django_db
def test_without_a_dry_run_the_audience_is_uncounted_and_the_dry_run_item_fails(draft):
    checked = items(draft)
    assert checked["audience_within_limit"] == (
        False,
        "The audience has not been counted; run a dry-run.",
    )
    assert checked["dry_run_clean"] == (False, "No dry-run of the current template and audience.")
    assert checked["seed_sent"] == (False, "No seed send of the current template and audience.")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "change",
    [
        {"subject_template": "Spring news for you"},
        {"text_template": "Hello {{ first_name|default:'friend' }}, the spring news is here."},
        {"html_template": "<p>Spring news</p>"},
        {"audience_params": {"plan": "free"}},
    ],
)
def test_an_edit_after_the_dry_run_and_seed_makes_them_stale(ready, change):
    for field, value in change.items():
        setattr(ready, field, value)
    ready.save()

    checked = items(ready)
    assert checked["dry_run_clean"] == (
        False,
        "The template or audience changed since the last dry-run.",
    )
    assert checked["seed_sent"] == (False, "No seed send of the current template and audience.")

    dry_run(ready)
    seed_send(ready)
    ready.refresh_from_db()
    assert all(ok for ok, _ in items(ready).values())


@pytest.mark.django_db
def test_a_dry_run_with_problems_fails_the_item(draft, customer):
    customer("blank@example.com")
    draft.text_template = "Hi {{ first_name }}, here is the spring news."
    draft.save()

    dry_run(draft)

    assert items(draft)["dry_run_clean"] == (False, "The dry-run found 1 problem(s).")


@pytest.mark.django_db
def test_an_audience_over_the_maximum_fails_the_item(draft):
    draft.expected_max_audience = 1
    draft.save()
    dry_run(draft)

    assert items(draft)["audience_within_limit"] == (
        False,
        "Audience of 2 recipients against an expected maximum of 1.",
    )
    draft.expected_max_audience = 2
    assert items(draft)["audience_within_limit"] == (
        True,
        "Audience of 2 recipients against an expected maximum of 2.",
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("scheduled_at", "timezone"),
    [(None, "Europe/Paris"), (WHEN, ""), (WHEN, "Mars/Olympus"), (WHEN, "../etc/passwd")],
)
def test_a_schedule_without_a_time_or_a_valid_zone_fails(ready, scheduled_at, timezone):
    ready.scheduled_at = scheduled_at
    ready.timezone = timezone

    assert items(ready)["schedule_unambiguous"] == (
        False,
        "A send time and a valid time zone are both needed.",
    )


@pytest.mark.django_db
def test_another_large_batch_within_the_window_fails_the_item(ready, make_batch, settings):
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "LARGE_BATCH": 2}
    other = make_batch(name="Summer sale", scheduled_at=WHEN + dt.timedelta(minutes=59), total=5)

    assert items(ready)["no_other_large_batch"] == (
        False,
        "Large batch 'Summer sale' is scheduled at 2027-05-04T09:29:00+00:00, "
        "within 1:00:00 of this one.",
    )

    # Not counted yet: its expected maximum says how large it may be.
    SendBatch.objects.filter(pk=other.pk).update(total=None, expected_max_audience=3)
    assert items(ready)["no_other_large_batch"][0] is False

    # Outside the window, finished, or small: no clash.
    for change in (
        {"total": 5, "scheduled_at": WHEN + dt.timedelta(minutes=61)},
        {"scheduled_at": WHEN, "status": SendBatch.Status.COMPLETED},
        {"status": SendBatch.Status.SCHEDULED, "total": 1},
    ):
        SendBatch.objects.filter(pk=other.pk).update(**change)
        assert items(ready)["no_other_large_batch"] == (
            True,
            "No other large batch within the window.",
        ), change


@pytest.mark.django_db
def test_the_window_is_a_setting(ready, make_batch, settings):
    settings.SCHEDULER_APP = {
        **settings.SCHEDULER_APP,
        "LARGE_BATCH": 2,
        "LARGE_BATCH_WINDOW": 7200,
    }
    make_batch(name="Summer sale", scheduled_at=WHEN - dt.timedelta(minutes=90), total=2)

    assert items(ready)["no_other_large_batch"] == (
        False,
        "Large batch 'Summer sale' is scheduled at 2027-05-04T07:00:00+00:00, "
        "within 2:00:00 of this one.",
    )


@pytest.mark.django_db
def test_schedule_batch_refuses_a_failing_checklist_and_changes_nothing(draft):
    draft.timezone = "Mars/Olympus"
    draft.save()

    with pytest.raises(ChecklistFailed) as caught:
        schedule_batch(draft)

    assert caught.value.message == (
        "The pre-flight checklist failed: "
        "The audience has not been counted; run a dry-run.; "
        "No dry-run of the current template and audience.; "
        "No seed send of the current template and audience.; "
        "A send time and a valid time zone are both needed."
    )
    assert [item.name for item in caught.value.failing] == ALL_ITEMS[:4]
    assert caught.value.code == "checklist_failed"
    draft.refresh_from_db()
    assert (draft.status, draft.undo_deadline, draft.status_changed_at) == ("draft", None, None)
    assert not Job.objects.exists()
    assert not ControlEvent.objects.exists()


@pytest.mark.django_db
def test_schedule_batch_schedules_a_batch_that_passes(ready):
    scheduled = schedule_batch(ready)

    assert scheduled.status == "scheduled"
    lanes = Job.objects.filter(task_name=SEND_BATCH_TASK)
    assert lanes.count() == 2
    assert {job.run_at for job in lanes} == {WHEN}
    assert {job.payload["batch"] for job in lanes} == {ready.pk}
    assert list(
        ControlEvent.objects.filter(action="schedule").values_list("scope", "target", "reason")
    ) == [("batch", str(ready.pk), "")]


@pytest.mark.django_db
def test_relax_lets_the_named_items_through(draft):
    draft.scheduled_at = clock.now() + dt.timedelta(hours=1)
    draft.save()

    with pytest.raises(ChecklistFailed) as caught:
        schedule_batch(draft, relax=("audience_within_limit", "dry_run_clean"))
    assert [item.name for item in caught.value.failing] == ["seed_sent"]
    assert caught.value.message == (
        "The pre-flight checklist failed: No seed send of the current template and audience."
    )

    scheduled = schedule_batch(draft, relax=("audience_within_limit", "dry_run_clean", "seed_sent"))
    assert scheduled.status == "scheduled"
    assert ControlEvent.objects.get(action="schedule").reason == (
        "audience_within_limit, dry_run_clean, seed_sent"
    )


@pytest.mark.django_db
def test_the_checklist_relax_setting_lets_items_through_for_everyone(draft, settings):
    settings.SCHEDULER_APP = {
        **settings.SCHEDULER_APP,
        "CHECKLIST_RELAX": ["audience_within_limit", "dry_run_clean"],
    }
    with pytest.raises(ChecklistFailed) as caught:
        schedule_batch(draft)
    assert [item.name for item in caught.value.failing] == ["seed_sent"]

    scheduled = schedule_batch(draft, relax=("seed_sent",))
    assert scheduled.status == "scheduled"
