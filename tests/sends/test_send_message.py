"""send_message(): one email through the worker after an undo window, sent at most once."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import mail

from scheduler_app import cancel, clock
from scheduler_app.cancellation import CancelOutcome
from scheduler_app.exceptions import ValidationError
from scheduler_app.models import Job
from scheduler_app.sends.batches import send_message
from scheduler_app.sends.providers.email import message_id_for
from scheduler_app.sends.task_names import SEND_MESSAGE_TASK
from tests.helpers import running_worker, wait_for_status

WINDOW = dt.timedelta(seconds=10)


def make_due(job: Job) -> None:
    """The undo window has passed: the job is due now."""
    Job.objects.filter(pk=job.pk).update(run_at=clock.now())


@pytest.mark.django_db(transaction=True)
def test_a_message_cancelled_inside_the_undo_window_is_never_sent():
    undone = send_message("ann@example.com", "Hello", "Hi Ann", undo_window=WINDOW)
    kept = send_message("bob@example.com", "Hello", "Hi Bob", undo_window=WINDOW)
    assert undone.undo_deadline is not None
    assert cancel(undone.pk) is CancelOutcome.CANCELLED

    with running_worker():
        make_due(undone)  # its time comes: still nothing, it is cancelled
        make_due(kept)
        wait_for_status(kept, Job.Status.SUCCEEDED)

    assert [m.to for m in mail.outbox] == [["bob@example.com"]]
    assert Job.objects.get(pk=undone.pk).status == Job.Status.CANCELLED


@pytest.mark.django_db(transaction=True)
def test_a_message_not_undone_is_sent_once_with_a_deterministic_message_id():
    before = clock.now()
    job = send_message(
        "ann@example.com",
        "Your receipt",
        "Thanks, Ann.",
        html="<p>Thanks, Ann.</p>",
        undo_window=WINDOW,
    )
    # Runs after the window plus UNDO_SAFETY_MARGIN (2 s), so a last-moment undo wins.
    assert job.queue == "default"
    assert job.task_name == SEND_MESSAGE_TASK
    assert before + WINDOW <= job.undo_deadline <= clock.now() + WINDOW
    assert job.run_at == job.undo_deadline + dt.timedelta(seconds=2)

    with running_worker():
        make_due(job)
        done = wait_for_status(job, Job.Status.SUCCEEDED)

    assert len(mail.outbox) == 1
    sent = mail.outbox[0]
    key = "message:%s" % job.pk
    assert (sent.to, sent.subject, sent.body) == (
        ["ann@example.com"],
        "Your receipt",
        "Thanks, Ann.",
    )
    assert sent.alternatives[0][:2] == ("<p>Thanks, Ann.</p>", "text/html")
    headers = sent.message()
    assert headers["Message-ID"] == message_id_for(key)
    assert headers["Idempotency-Key"] == key
    assert done.result == {"message_id": message_id_for(key)}
    # Too late to undo now.
    assert cancel(job.pk) is CancelOutcome.ALREADY_FINISHED


def test_message_ids_are_derived_from_the_idempotency_key():
    first = message_id_for("message:42", domain="mail.example.com")
    assert first == message_id_for("message:42", domain="mail.example.com")
    assert first != message_id_for("message:43", domain="mail.example.com")
    assert first.startswith("<") and first.endswith("@mail.example.com>")
    assert len(first) == len("<@mail.example.com>") + 40


@pytest.mark.django_db
def test_an_unknown_provider_is_refused_when_scheduling():
    with pytest.raises(ValidationError) as caught:
        send_message("ann@example.com", "Hello", "Hi", provider="pigeon")
    assert caught.value.message == (
        "Unknown provider 'pigeon'; SCHEDULER_APP['PROVIDERS'] lists: email, fake, noop, report."
    )
    assert not Job.objects.exists()
