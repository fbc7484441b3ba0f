"""A worker's alert evaluation gives up on a locked table instead of holding the side
connection, whose turns the lease renewal shares, for as long as the lock lasts."""

from __future__ import annotations

import threading

import pytest
from django.db import OperationalError, connections

from scheduler_app.alerts.evaluator import evaluate
from scheduler_app.models import Schedule

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]


def test_an_evaluation_with_a_time_limit_gives_up_on_a_table_a_migration_locked():
    migration = connections.create_connection("default")
    outcome: list[BaseException | None] = []

    def evaluating() -> None:
        try:
            evaluate(time_limit=0.2)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)
        finally:
            connections.close_all()

    try:
        with migration.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("LOCK TABLE %s IN ACCESS EXCLUSIVE MODE" % Schedule._meta.db_table)
            thread = threading.Thread(target=evaluating)
            thread.start()
            thread.join(timeout=20)
            assert not thread.is_alive(), "the evaluation waited for the lock"
            cursor.execute("ROLLBACK")
    finally:
        migration.close()
    assert len(outcome) == 1 and isinstance(outcome[0], OperationalError), outcome
    assert "canceling statement due to" in str(outcome[0])
    assert not evaluate(time_limit=0.2).skipped  # the lock is gone: it evaluates
