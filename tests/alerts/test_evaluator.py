"""The evaluator: delivery through notifiers and signals, failures contained, re-notification,
acknowledgement, and no duplicates when two evaluators run at once."""

from __future__ import annotations

import contextlib
import datetime as dt
import http.server
import json
import threading

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import mail
from django.db import connection
from django.test import override_settings

from scheduler_app.alerts import acknowledge, open_alert
from scheduler_app.alerts.evaluator import evaluate
from scheduler_app.clock import frozen_clock
from scheduler_app.models import Alert, Job
from scheduler_app.signals import alert_opened, alert_resolved
from tests.alerts.helpers import T0, open_alerts
from tests.alerts.notifiers import Exploding

Kind = Alert.Kind
HOUR = dt.timedelta(hours=1)
RESOLVE_AFTER = dt.timedelta(seconds=300)


def alert_settings(**values):
    return override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, **values})


def alert_mails() -> list:
    """Return the mails the MailAdmins notifier sent (Django also mails ADMINS logged errors)."""
    return [m for m in mail.outbox if m.subject.startswith("[Django] [")]


class QuietHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def webhook_target(handler: type[http.server.BaseHTTPRequestHandler]):
    """Serve ``handler`` on a free local port; yield the ALERT_NOTIFIERS entry for /hook."""
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%s/hook" % server.server_port
    try:
        yield {"class": "scheduler_app.alerts.notifiers.Webhook", "url": url}
    finally:
        server.shutdown()
        server.server_close()


def due_job_without_worker() -> Job:
    """A due job on a queue nobody serves: a no_worker alert (and later an overdue one)."""
    return Job.objects.create(task_name="tests.noop", scheduled_for=T0, run_at=T0)


@pytest.mark.django_db
def test_a_failing_notifier_is_logged_and_the_others_and_the_signal_still_deliver(
    caplog, django_capture_on_commit_callbacks
):
    received = []

    def receiver(sender, alert, **kwargs):
        received.append(("opened", alert.subject))

    def broken_receiver(sender, alert, **kwargs):
        raise RuntimeError("a project's receiver is broken")

    alert_opened.connect(receiver)
    alert_opened.connect(broken_receiver)
    Exploding.calls = 0
    try:
        with (
            alert_settings(
                ALERT_NOTIFIERS=[
                    "tests.alerts.notifiers.Exploding",
                    "scheduler_app.alerts.notifiers.MailAdmins",
                ]
            ),
            frozen_clock(T0),
            caplog.at_level("ERROR", logger="scheduler_app.alerts"),
        ):
            due_job_without_worker()
            with django_capture_on_commit_callbacks(execute=True):
                evaluation = evaluate()
    finally:
        alert_opened.disconnect(receiver)
        alert_opened.disconnect(broken_receiver)

    assert [a.subject for a in evaluation.opened] == ["queue:default"]
    assert Exploding.calls == 1
    alerts_mailed = alert_mails()
    assert [m.subject for m in alerts_mailed] == ["[Django] [opened] no_worker: queue:default"]
    assert "No live worker serves queue 'default'" in alerts_mailed[0].body
    assert received == [("opened", "queue:default")]
    assert "alert notifier failed notifier=Exploding" in caplog.text
    assert "alert signal receiver failed" in caplog.text


@pytest.mark.django_db
def test_the_webhook_receives_the_alert_as_json_when_it_opens_and_resolves(
    django_capture_on_commit_callbacks,
):
    bodies = []

    class Handler(QuietHandler):
        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

    with (
        webhook_target(Handler) as webhook,
        alert_settings(ALERT_NOTIFIERS=[webhook], ADMIN_BASE_URL="https://ops.example.com"),
        frozen_clock(T0) as clock,
    ):
        job = due_job_without_worker()
        with django_capture_on_commit_callbacks(execute=True):
            evaluate()
        Job.objects.filter(pk=job.pk).update(status=Job.Status.CANCELLED)
        evaluate()
        assert len(bodies) == 1  # resolved, not notified before ALERT_RESOLVE_AFTER (300 s)
        clock.advance(RESOLVE_AFTER)
        evaluate()

    assert [(b["event"], b["kind"], b["subject"]) for b in bodies] == [
        ("opened", "no_worker", "queue:default"),
        ("resolved", "no_worker", "queue:default"),
    ]
    assert bodies[0]["since"] == T0.isoformat()
    assert bodies[0]["admin_url"] == "https://ops.example.com/admin/scheduler_app/workerheartbeat/"
    assert bodies[1]["resolved_at"] == T0.isoformat()


def answering(*statuses: int) -> tuple[list, type[QuietHandler]]:
    """Return (bodies received, a handler answering ``statuses`` in turn, then 204s)."""
    bodies: list = []
    answers = list(statuses)

    class Handler(QuietHandler):
        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(answers.pop(0) if answers else 204)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return bodies, Handler


@pytest.mark.django_db
def test_a_failed_notice_is_retried_with_backoff_on_the_notifiers_that_missed_it(
    django_capture_on_commit_callbacks,
):
    """Before, the alert counted as notified before its delivery: a failed opened notice
    waited ALERT_RENOTIFY_AFTER (an hour) and a failed resolved notice was never sent."""
    bodies, handler = answering(500, 503, 204, 500)
    events = lambda: [body["event"] for body in bodies]  # noqa: E731
    notifiers = ["scheduler_app.alerts.notifiers.MailAdmins"]
    with (
        webhook_target(handler) as webhook,
        alert_settings(ALERT_NOTIFIERS=[webhook, *notifiers], ALERT_INTERVAL=60),
        frozen_clock(T0) as clock,
    ):
        job = due_job_without_worker()
        with django_capture_on_commit_callbacks(execute=True):
            evaluate()
        assert events() == ["opened"]  # answered 500
        clock.advance(dt.timedelta(seconds=59))
        evaluate()
        assert events() == ["opened"]  # the first retry waits ALERT_INTERVAL
        clock.advance(dt.timedelta(seconds=1))
        evaluate()
        assert events() == ["opened"] * 2  # answered 503: the next waits twice as long
        clock.advance(dt.timedelta(seconds=119))
        evaluate()
        assert events() == ["opened"] * 2
        clock.advance(dt.timedelta(seconds=1))
        evaluate()
        assert events() == ["opened"] * 3  # answered 204
        alert = Alert.objects.get()
        assert (alert.notifications, alert.notice, alert.last_notified_at) == (
            1,
            "",
            T0 + dt.timedelta(seconds=180),
        )
        assert len(alert_mails()) == 1  # the mail went out once, at the first try

        Job.objects.filter(pk=job.pk).update(status=Job.Status.CANCELLED)
        evaluate()
        clock.advance(RESOLVE_AFTER)
        evaluate()
        assert events()[3:] == ["resolved"]  # answered 500
        clock.advance(dt.timedelta(seconds=60))
        evaluate()
        assert events()[3:] == ["resolved"] * 2
    alert.refresh_from_db()
    assert (alert.notifications, alert.notice) == (2, "")
    assert [m.subject for m in alert_mails()] == [
        "[Django] [opened] no_worker: queue:default",
        "[Django] [resolved] no_worker: queue:default",
    ]


@pytest.mark.django_db
def test_a_flapping_condition_is_one_alert_with_one_opened_and_one_resolved_notice(
    django_capture_on_commit_callbacks,
):
    """Before, each flap opened a new alert and sent an opened and a resolved notice."""
    bodies, handler = answering()
    minute = dt.timedelta(minutes=1)
    with (
        webhook_target(handler) as webhook,
        alert_settings(ALERT_NOTIFIERS=[webhook]),
        frozen_clock(T0) as clock,
    ):
        for _ in range(3):  # due, then started, every minute
            job = due_job_without_worker()
            with django_capture_on_commit_callbacks(execute=True):
                evaluate()
            clock.advance(minute)
            Job.objects.filter(pk=job.pk).update(status=Job.Status.CANCELLED)
            evaluate()
            clock.advance(minute)
        assert [body["event"] for body in bodies] == ["opened"]
        clock.advance(RESOLVE_AFTER - minute)
        evaluate()
    assert [(body["event"], body["id"]) for body in bodies] == [
        ("opened", bodies[0]["id"]),
        ("resolved", bodies[0]["id"]),
    ]
    assert Alert.objects.filter(kind=Kind.NO_WORKER).count() == 1


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.django_db
def test_a_webhook_that_redirects_is_a_failed_delivery_not_an_empty_get(
    status, django_capture_on_commit_callbacks, caplog
):
    """urllib followed a 301/302/303 with a GET without the body: the target answered 200,
    and the alert counted as delivered while nobody received it (an http:// URL that
    redirects to https:// is the usual case)."""
    seen = []

    class Handler(QuietHandler):
        def do_POST(self):
            seen.append(("POST", self.path))
            self.send_response(status)
            self.send_header("Location", "/target")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self):
            seen.append(("GET", self.path))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    with (
        webhook_target(Handler) as webhook,
        alert_settings(ALERT_NOTIFIERS=[webhook]),
        frozen_clock(T0),
        caplog.at_level("ERROR", logger="scheduler_app.alerts"),
    ):
        due_job_without_worker()
        with django_capture_on_commit_callbacks(execute=True):
            evaluate()

    assert seen == [("POST", "/hook")]
    assert "alert notifier failed notifier=Webhook" in caplog.text
    assert "the webhook answered %s, a redirect to /target" % status in caplog.text


@pytest.mark.django_db
def test_an_open_alert_is_renotified_after_the_delay_until_someone_acknowledges_it(
    django_capture_on_commit_callbacks,
):
    resolved = []
    alert_resolved.connect(lambda sender, alert, **kw: resolved.append(alert.subject), weak=False)
    user = get_user_model().objects.create_user("ops")
    with alert_settings(ALERT_RENOTIFY_AFTER=3600, OVERDUE_AFTER=10**6), frozen_clock(T0) as clock:
        due_job_without_worker()
        with django_capture_on_commit_callbacks(execute=True):
            evaluate()
        clock.advance(dt.timedelta(minutes=59))
        evaluate()
        assert len(alert_mails()) == 1

        clock.advance(dt.timedelta(minutes=2))
        evaluate()
        assert len(alert_mails()) == 2
        alert = open_alerts(Kind.NO_WORKER)["queue:default"]
        assert alert.notifications == 2

        assert acknowledge([alert.pk], by=user) == 1
        assert acknowledge([alert.pk], by=user) == 0  # already acknowledged
        clock.advance(3 * HOUR)
        evaluate()
        assert len(alert_mails()) == 2
        alert.refresh_from_db()
        assert alert.acknowledged_by == user
        assert alert.acknowledged_at == T0 + dt.timedelta(minutes=61)
        assert alert.resolved_at is None  # acknowledged, still open until the rule clears


@pytest.mark.django_db
def test_a_rule_that_raises_is_skipped_and_its_open_alerts_are_not_resolved(monkeypatch, caplog):
    from scheduler_app.alerts import rules

    with frozen_clock(T0):
        due_job_without_worker()
        evaluate()
        assert set(open_alerts()) == {"queue:default"}

        def broken(situation):
            raise ZeroDivisionError("bug in a rule")

        monkeypatch.setitem(rules.RULES, Kind.NO_WORKER, broken)
        with caplog.at_level("ERROR", logger="scheduler_app.alerts"):
            evaluation = evaluate()
    assert evaluation.failed_rules == (Kind.NO_WORKER,)
    assert set(open_alerts()) == {"queue:default"}
    assert "alert rule failed kind=no_worker" in caplog.text


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_two_evaluators_on_separate_connections_open_each_alert_once():
    due_job_without_worker()
    barrier = threading.Barrier(2)
    results, errors = [], []

    def contender():
        try:
            barrier.wait(timeout=10)
            results.append(evaluate())
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    # The clock is one global: frozen here, not in each thread, or the thread that
    # leaves last would restore the other's frozen time.
    with frozen_clock(T0):
        for _ in range(5):
            threads = [threading.Thread(target=contender) for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=30)
    assert not errors
    assert len(results) == 10
    assert Alert.objects.filter(kind=Kind.NO_WORKER).count() == 1
    assert sum(len(r.opened) for r in results) == 1
    assert len(alert_mails()) == 1


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_two_processes_opening_the_same_alert_at_once_end_with_one_row():
    barrier = threading.Barrier(2)
    outcomes, errors = [], []

    def contender():
        try:
            barrier.wait(timeout=10)
            outcomes.append(open_alert(kind=Kind.STALE_SEND, subject="batch:1", summary="stale")[1])
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=contender) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    assert sorted(outcomes) == [False, True]
    assert Alert.objects.filter(kind=Kind.STALE_SEND).count() == 1


@pytest.mark.django_db
def test_an_alert_inserted_by_the_previous_release_owes_nothing_until_it_resolves():
    """Migration 0028 is additive: an INSERT that names only the old columns still works
    (database defaults), and the new code then owes that alert its resolved notice."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO scheduler_app_alert (kind, subject, summary, numbers, admin_url,"
            " opened_at, last_seen_at, last_notified_at, notifications)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            ["no_worker", "queue:default", "old", "{}", "", T0, T0, T0, 1],
        )
    alert = Alert.objects.get()
    assert (alert.notice, alert.notice_failures, alert.notice_due_at) == ("", 0, None)
    with frozen_clock(T0):
        evaluate()
    alert.refresh_from_db()
    assert (alert.resolved_at, alert.notice) == (T0, "resolved")
    assert alert.notice_due_at == T0 + RESOLVE_AFTER
