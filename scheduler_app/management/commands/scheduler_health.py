"""``manage.py scheduler_health``: exit 0 when healthy, 1 when not, 2 when it cannot tell.

--check=alerts (default): evaluate the alert rules, then fail while an alert
is open and not acknowledged (for cron and monitoring); otherwise "cannot
tell" when a rule failed to evaluate. --check=readiness:
the database is reachable and migrated. --check=liveness: this process
reaches the database; it never fails because a job is late, so a probe
built on it never restarts healthy pods.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand
from django.db import DatabaseError

from scheduler_app.alerts.evaluator import evaluate
from scheduler_app.alerts.notifiers import alert_document
from scheduler_app.database import connection
from scheduler_app.db import database_now
from scheduler_app.management.database import unapplied_migrations
from scheduler_app.models import Alert

OK, FAILING, UNKNOWN = 0, 1, 2
STATUS = {OK: "ok", FAILING: "failing", UNKNOWN: "unknown"}


class Command(BaseCommand):
    help = "Exit 0 if healthy, 1 if not (open unacknowledged alerts), 2 if it cannot tell."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--check",
            choices=["alerts", "readiness", "liveness"],
            default="alerts",
            help="alerts (default): no open unacknowledged alert after evaluating the rules; "
            "readiness: the database is reachable and migrated; liveness: the database is "
            "reachable.",
        )
        parser.add_argument("--json", action="store_true", help="Print the details as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        check = options["check"]
        try:
            code, details = CHECKS[check]()
        except DatabaseError as exc:
            code, details = UNKNOWN, {"error": "%s: %s" % (type(exc).__name__, exc)}
        report = {"check": check, "status": STATUS[code], **details}
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2, sort_keys=True))
        else:
            self._print(report)
        sys.exit(code)

    def _print(self, report: dict[str, Any]) -> None:
        line = "%s: %s" % (report["check"], report["status"])
        if "error" in report:
            line += " (%s)" % report["error"]
        for alert in report.get("open_alerts", []):
            line += "\n  %s %s since %s: %s %s" % (
                alert["kind"],
                alert["subject"],
                alert["since"],
                alert["summary"],
                alert["admin_url"],
            )
        stream = self.stdout if report["status"] == "ok" else self.stderr
        stream.write(line)


def check_liveness() -> tuple[int, dict[str, Any]]:
    connection.ensure_connection()
    return OK, {"database": connection.vendor, "database_now": database_now().isoformat()}


def check_readiness() -> tuple[int, dict[str, Any]]:
    database_now()
    unapplied = unapplied_migrations()
    if unapplied:
        return FAILING, {"database": connection.vendor, "unapplied_migrations": unapplied}
    return OK, {"database": connection.vendor}


def check_alerts() -> tuple[int, dict[str, Any]]:
    evaluation = evaluate()
    open_alerts = Alert.objects.open().order_by("opened_at", "id")
    unacknowledged = [a for a in open_alerts if a.acknowledged_at is None]
    details: dict[str, Any] = {
        "evaluated": not evaluation.skipped,
        "open_alerts": [alert_document("open", a) for a in open_alerts],
        "unacknowledged": len(unacknowledged),
        "failed_rules": list(evaluation.failed_rules),
    }
    if evaluation.failed_rules:
        details["error"] = "alert rules failed to evaluate: %s" % ", ".join(evaluation.failed_rules)
    if unacknowledged:
        return FAILING, details
    # A rule that failed may have found something: its alerts cannot be told.
    return (UNKNOWN if evaluation.failed_rules else OK), details


CHECKS = {"alerts": check_alerts, "readiness": check_readiness, "liveness": check_liveness}
