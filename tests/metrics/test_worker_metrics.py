"""A worker's own counters: runs by task and outcome, lateness, claims and rate-limit waits."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from prometheus_client import generate_latest

from scheduler_app import schedule, task
from scheduler_app.clock import frozen_clock
from scheduler_app.metrics.worker import WorkerMetrics
from scheduler_app.models import Job
from scheduler_app.sends import limiter
from tests.helpers import REPO, running_worker, wait_until
from tests.metrics.conftest import parse, value


@task(name="tests.metrics_fails", max_attempts=1)
def fails(job):
    raise ValueError("no")


@pytest.fixture
def metrics():
    counters = WorkerMetrics("test-worker")
    counters.connect()
    try:
        yield counters
    finally:
        counters.disconnect()


def exposition(metrics: WorkerMetrics) -> dict:
    return parse(generate_latest(metrics.registry).decode())


@pytest.mark.django_db(transaction=True)
def test_runs_by_task_and_outcome_and_claimed_jobs(metrics):
    for _ in range(3):
        schedule("tests.record", {})
    schedule("tests.metrics_fails", {})
    with running_worker():
        wait_until(lambda: not Job.objects.unfinished().exists(), message="all jobs finished")
        wait_until(
            lambda: value(
                exposition(metrics),
                "scheduler_worker_runs_total",
                task="tests.metrics_fails",
                outcome="failed",
            ),
            message="the failure counted",
        )
        samples = exposition(metrics)
    assert (
        value(samples, "scheduler_worker_runs_total", task="tests.record", outcome="succeeded") == 3
    )
    assert value(samples, "scheduler_worker_claimed_jobs_total") == 4
    assert value(samples, "scheduler_worker_lateness_seconds_count", task="tests.record") == 3
    assert value(samples, "scheduler_worker_run_duration_seconds_count", task="tests.record") == 3
    assert value(samples, "scheduler_worker_info", worker_id="test-worker") == 1


def test_a_disconnected_worker_metrics_counts_nothing(metrics):
    metrics.disconnect()
    from scheduler_app.signals import jobs_claimed

    jobs_claimed.send(sender=None, worker_id="w", count=5)
    assert value(exposition(metrics), "scheduler_worker_claimed_jobs_total") == 0


@pytest.mark.django_db
def test_rate_limit_waits_are_counted_per_key(metrics):
    # A frozen clock: the bucket earns nothing between calls, so each wait is exact.
    with frozen_clock(dt.datetime(2026, 3, 2, tzinfo=dt.UTC)):
        limiter.set_rate("fake", 100.0, burst=1)  # an empty bucket, 10 ms per token
        limiter.set_rate("other", 0)  # unlimited: never waits
        for _ in range(2):
            assert limiter.wait_for_token("fake")  # waits 10 ms, then 20 ms
            assert limiter.wait_for_token("other")
    samples = exposition(metrics)
    assert value(samples, "scheduler_worker_rate_limit_waits_total", key="fake") == 2
    waited = value(samples, "scheduler_worker_rate_limit_wait_seconds_total", key="fake")
    assert waited == pytest.approx(0.03)
    assert value(samples, "scheduler_worker_rate_limit_waits_total", key="other") is None


@pytest.fixture
def without_prometheus_client(monkeypatch):
    """Make ``import prometheus_client`` fail, as it does without the [metrics] extra."""
    for name in list(sys.modules):
        if name == "prometheus_client" or name.startswith(
            ("prometheus_client.", "scheduler_app.metrics")
        ):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)


def test_without_the_extra_importing_the_view_says_what_to_install(without_prometheus_client):
    with pytest.raises(
        ImproperlyConfigured, match=r"pip install 'django-scheduler-app\[metrics\]'"
    ):
        import scheduler_app.metrics.views  # noqa: F401


def test_without_the_extra_runworker_metrics_port_is_a_clear_error(without_prometheus_client):
    with pytest.raises(CommandError, match=r"--metrics-port: .*\[metrics\]"):
        call_command("runworker", "--metrics-port", "9999")


def test_without_the_extra_the_rest_of_the_app_imports_and_checks():
    """Only scheduler_app.metrics imports prometheus_client (a fresh process, no extra)."""
    code = (
        "import sys; sys.modules['prometheus_client'] = None\n"
        "import django; django.setup()\n"
        "import scheduler_app.admin, scheduler_app.api.urls, scheduler_app.worker.loop\n"
        "import scheduler_app.retention, scheduler_app.stats\n"
        "from scheduler_app.management.commands import runworker, scheduler_prune\n"
        "from django.core import checks\n"
        "print([m.id for m in checks.run_checks(tags=['compatibility'])])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "prometheus" not in done.stderr
