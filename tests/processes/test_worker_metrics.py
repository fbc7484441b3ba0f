"""runworker --metrics-port serves the worker's counters over HTTP."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scheduler_app import schedule
from scheduler_app.models import Job
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def runs(port: int) -> float:
    """Return scheduler_worker_runs_total for tests.record succeeded (0 if not there yet)."""
    with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=5) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "scheduler_worker_runs_total"
        and sample.labels == {"task": "tests.record", "outcome": "succeeded"}
    )


def test_runworker_serves_its_counters_on_the_metrics_port(start_worker):
    port = free_port()
    worker = start_worker("--metrics-port", str(port))
    worker.wait_for_output("worker metrics served")
    for _ in range(2):
        schedule("tests.record", {})
    wait_until(lambda: not Job.objects.unfinished().exists(), message="jobs finished")
    wait_until(lambda: runs(port) == 2, message="two runs counted")
