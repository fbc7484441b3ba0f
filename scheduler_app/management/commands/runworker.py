"""manage.py runworker: parse and validate options, build a Worker, run it."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import OperationalError

from scheduler_app.bounds import positive_float, positive_int
from scheduler_app.conf import app_settings
from scheduler_app.management.database import check_migrated
from scheduler_app.worker.loop import Worker, WorkerFatal
from scheduler_app.worker.options import WorkerOptions, default_worker_id
from scheduler_app.worker.shutdown import graceful_signals

logger = logging.getLogger("scheduler_app.worker")


def port(value: str) -> int:
    """Accept a TCP port number."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a port number" % value) from None
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError("must be from 1 to 65535, got %s" % number)
    return number


def worker_id(value: str) -> str:
    """Accept a name the jobs' worker_id column can hold."""
    if not 1 <= len(value) <= 200 or "\x00" in value:
        raise argparse.ArgumentTypeError(
            "must be 1 to 200 characters without NUL, got %s characters" % len(value)
        )
    return value


class Command(BaseCommand):
    help = "Run a worker: claim due jobs and run them until SIGTERM/SIGINT."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "-q",
            "--queue",
            action="append",
            dest="queues",
            metavar="NAME",
            help="Serve this queue (repeatable). Default: every queue in SCHEDULER_APP['QUEUES'].",
        )
        parser.add_argument(
            "-c",
            "--concurrency",
            type=positive_int("CONCURRENCY"),
            help="Jobs run at once (threads), 1 to 1000. Default: CONCURRENCY. Not with "
            "--executor celery.",
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int("CLAIM_BATCH_SIZE"),
            help="Most jobs claimed per statement. Default: CLAIM_BATCH_SIZE.",
        )
        parser.add_argument(
            "--poll-interval",
            type=positive_float("POLL_INTERVAL"),
            metavar="SECONDS",
            help="Longest idle wait between claims, at least 0.05. Default: POLL_INTERVAL.",
        )
        parser.add_argument(
            "--lease",
            type=positive_float("LEASE_SECONDS"),
            metavar="SECONDS",
            help="Lease length, at least 1; renewed every third of it. Default: LEASE_SECONDS.",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=positive_float("SHUTDOWN_TIMEOUT"),
            metavar="SECONDS",
            help="How long a stop waits for running jobs. Default: SHUTDOWN_TIMEOUT.",
        )
        parser.add_argument(
            "--worker-id", type=worker_id, help="Name this worker (default host:pid:random)."
        )
        parser.add_argument(
            "--executor",
            choices=("local", "celery"),
            default="local",
            help="local: run jobs in this process's threads. celery: relay them to Celery "
            "workers (SCHEDULER_APP['CELERY_APP']); see docs/celery.md.",
        )
        parser.add_argument(
            "--no-scheduler",
            action="store_true",
            help="Do not enqueue recurring schedules' occurrences from this worker.",
        )
        parser.add_argument(
            "--no-alerts",
            action="store_true",
            help="Do not evaluate the alert rules from this worker.",
        )
        parser.add_argument(
            "--metrics-port",
            type=port,
            metavar="PORT",
            help="Serve this worker's Prometheus counters on this port (needs the [metrics] "
            "extra).",
        )
        parser.add_argument(
            "--metrics-address",
            metavar="ADDRESS",
            help="Address the metrics port listens on (default 127.0.0.1; 0.0.0.0 for all). "
            "Only with --metrics-port.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        known = list(app_settings.QUEUES)
        queues = options["queues"] or known
        unknown = sorted(set(queues) - set(known))
        if unknown:
            raise CommandError(
                "Unknown queue(s): %s. SCHEDULER_APP['QUEUES'] lists: %s."
                % (", ".join(unknown), ", ".join(known))
            )
        if options["executor"] == "celery" and options["concurrency"] is not None:
            raise CommandError(
                "--concurrency does not apply to --executor celery: the Celery workers' own "
                "--concurrency bounds what runs, and SCHEDULER_APP['CELERY_MAX_IN_FLIGHT'] how "
                "many jobs a relay keeps published per queue."
            )
        if options["metrics_address"] is not None and options["metrics_port"] is None:
            raise CommandError(
                "--metrics-address needs --metrics-port: without a port no metrics are served."
            )
        worker_options = WorkerOptions(
            queues=tuple(dict.fromkeys(queues)),
            concurrency=options["concurrency"] or app_settings.CONCURRENCY,
            batch_size=options["batch_size"] or app_settings.CLAIM_BATCH_SIZE,
            poll_interval=options["poll_interval"] or app_settings.POLL_INTERVAL,
            lease_seconds=options["lease"] or app_settings.LEASE_SECONDS,
            shutdown_timeout=options["shutdown_timeout"] or app_settings.SHUTDOWN_TIMEOUT,
            database_unavailable_timeout=app_settings.DATABASE_UNAVAILABLE_TIMEOUT,
            summary_interval=app_settings.SUMMARY_INTERVAL,
            scheduler_interval=None if options["no_scheduler"] else app_settings.SCHEDULER_INTERVAL,
            worker_id=options["worker_id"] or default_worker_id(),
            heartbeat_interval=app_settings.WORKER_HEARTBEAT_INTERVAL,
            alert_interval=None if options["no_alerts"] else app_settings.ALERT_INTERVAL,
        )
        if options["metrics_port"] is not None:
            self._serve_metrics(worker_options.worker_id, options)
        with contextlib.suppress(OperationalError):  # not up yet: the worker waits for it
            check_migrated()
        worker = self.build_worker(worker_options, options["executor"])
        with graceful_signals(worker.stop):
            try:
                worker.run()
            except WorkerFatal as exc:
                raise CommandError(str(exc)) from exc

    def build_worker(self, options: WorkerOptions, executor: str) -> Worker:
        if executor == "local":
            return Worker(options)
        # Imported here, so that a worker without --executor celery never loads Celery.
        from scheduler_app.celery.relay import Relay
        from scheduler_app.celery.routing import celery_app

        try:
            app = celery_app()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        # No thread runs a job here: a relay's concurrency is its published jobs per queue.
        options = dataclasses.replace(options, concurrency=app_settings.CELERY_MAX_IN_FLIGHT)
        return Relay(
            options,
            app=app,
            max_in_flight=app_settings.CELERY_MAX_IN_FLIGHT,
            max_broker_wait=app_settings.CELERY_MAX_BROKER_WAIT,
            jobs_per_message=app_settings.CELERY_JOBS_PER_MESSAGE,
        )

    def _serve_metrics(self, worker_id: str, options: dict[str, Any]) -> None:
        from django.core.exceptions import ImproperlyConfigured

        try:
            from scheduler_app.metrics.worker import WorkerMetrics
        except ImproperlyConfigured as exc:
            raise CommandError("--metrics-port: %s" % exc) from exc
        metrics = WorkerMetrics(worker_id)
        address = "127.0.0.1" if options["metrics_address"] is None else options["metrics_address"]
        try:
            metrics.serve(options["metrics_port"], address)
        except OSError as exc:
            raise CommandError(
                "--metrics-port: cannot listen on %s:%s: %s"
                % (address, options["metrics_port"], exc)
            ) from exc
        metrics.connect()
