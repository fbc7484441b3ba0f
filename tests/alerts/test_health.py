"""``manage.py scheduler_health``: exit 0 healthy, 1 an open unacknowledged alert, 2 cannot tell.

Run in this process (call_command) against the test database, and as a real
subprocess for an unreachable database.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import subprocess
import sys

import pytest
from django.core.management import call_command

from scheduler_app import clock
from scheduler_app.models import Alert, Job, WorkerHeartbeat
from tests.helpers import REPO

pytestmark = pytest.mark.django_db


def health(*args: str) -> subprocess.CompletedProcess:
    """Run the command in this process; return its exit code and output."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("scheduler_health", *args, stdout=out, stderr=err)
    return subprocess.CompletedProcess(args, exited.value.code, out.getvalue(), err.getvalue())


def health_process(*args: str, url: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "django", "scheduler_health", "--settings=tests.settings", *args],
        cwd=REPO,
        env={**os.environ, "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_healthy_exits_0_and_no_worker_at_all_for_due_jobs_exits_1_until_acknowledged():
    ok = health()
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "alerts: ok"

    Job.objects.create(task_name="tests.noop", scheduled_for=clock.now(), run_at=clock.now())
    failing = health("--json")
    assert failing.returncode == 1, failing.stderr
    report = json.loads(failing.stdout)
    assert report["status"] == "failing" and report["evaluated"] is True
    assert [(a["kind"], a["subject"]) for a in report["open_alerts"]] == [
        ("no_worker", "queue:default")
    ]

    Alert.objects.update(acknowledged_at=clock.now())
    acknowledged = health()
    assert acknowledged.returncode == 0, acknowledged.stderr


def test_liveness_and_readiness_pass_while_an_alert_is_open():
    Job.objects.create(task_name="tests.noop", scheduled_for=clock.now(), run_at=clock.now())
    assert health().returncode == 1
    liveness = health("--check=liveness", "--json")
    assert liveness.returncode == 0, liveness.stderr
    assert json.loads(liveness.stdout)["status"] == "ok"
    assert health("--check=readiness").returncode == 0


def test_a_live_worker_resolves_the_alert_on_the_next_run():
    Job.objects.create(task_name="tests.noop", scheduled_for=clock.now(), run_at=clock.now())
    assert health().returncode == 1
    now = clock.now()
    WorkerHeartbeat.objects.create(
        worker_id="w",
        host="h",
        pid=1,
        queues=["default"],
        concurrency=1,
        started_at=now,
        last_seen_at=now,
    )
    Job.objects.update(run_at=now + dt.timedelta(seconds=5))  # and its job is not overdue
    assert health().returncode == 0


def test_an_unreachable_database_exits_2():
    # Every check reports a database error the same way; liveness is what a probe runs.
    result = health_process(
        "--check=liveness", "--json", url="postgres://postgres@127.0.0.1:9/nowhere"
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    report = json.loads(result.stdout)
    assert report["status"] == "unknown" and "OperationalError" in report["error"]


def test_a_rule_that_failed_to_evaluate_exits_2_and_is_named(monkeypatch):
    """Its alerts cannot be told: healthy would be a guess. An open alert still exits 1."""
    from scheduler_app.alerts import rules

    def broken(situation):
        raise ZeroDivisionError("bug in a rule")

    monkeypatch.setitem(rules.RULES, Alert.Kind.LATE, broken)
    unknown = health()
    assert unknown.returncode == 2, unknown.stdout
    assert unknown.stderr.strip() == "alerts: unknown (alert rules failed to evaluate: late)"
    report = json.loads(health("--json").stdout)
    assert (report["status"], report["failed_rules"]) == ("unknown", ["late"])

    Job.objects.create(task_name="tests.noop", scheduled_for=clock.now(), run_at=clock.now())
    failing = health()
    assert failing.returncode == 1
    assert failing.stderr.startswith("alerts: failing (alert rules failed to evaluate: late)")
