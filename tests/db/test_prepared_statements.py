"""The claim loop's statements are prepared once per connection, and stay usable after a
refused turn."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import DatabaseError, connection

from scheduler_app import clock, schedule
from scheduler_app.db import postgresql as pg
from scheduler_app.worker.execution import ClaimedJob, Finish

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]


def claim_arguments() -> dict:
    """The keyword arguments of a claim of one job by worker "w" from now."""
    return {
        "worker": "w",
        "queues": ["default"],
        "limit": 1,
        "lease": dt.timedelta(seconds=30),
    }


def test_a_refused_first_turn_does_not_leave_statements_half_prepared():
    """The first pipeline of a connection fails at FINISH: the server skips the rest of it,
    including the statements psycopg was preparing. The next turn must still work."""
    for _ in range(3):
        schedule("tests.noop")
    arguments = claim_arguments()
    (row,) = pg.claim_jobs(**arguments)
    refused = Finish(
        job=ClaimedJob.from_row(row),
        status="failed",
        outcome="failed",
        finished_at=clock.now(),
        error="a\x00b",
    )
    connection.close()  # a new connection: nothing prepared yet

    with pytest.raises(DatabaseError):
        pg.finish_and_claim([refused.as_row()], **arguments)
    for _ in range(2):
        _, claimed = pg.finish_and_claim([], **arguments)
        assert len(claimed) == 1


def claim_finish_and_claim_again() -> list[str]:
    """On a new connection, claim one of two jobs, then finish it and claim the other in
    one round trip, as the claim loop does; return the statements left prepared."""
    for _ in range(2):
        schedule("tests.noop")
    connection.close()  # a new connection: nothing prepared yet
    arguments = claim_arguments()
    (row,) = pg.claim_jobs(**arguments)
    done = Finish(
        job=ClaimedJob.from_row(row),
        status="succeeded",
        outcome="succeeded",
        finished_at=clock.now(),
    )
    accepted, claimed = pg.finish_and_claim([done.as_row()], **arguments)

    assert (accepted, len(claimed)) == ({done.job.fence}, 1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_the_claim_loops_statements_are_planned_once_per_connection():
    """CLAIM and FINISH are prepared: parsing and planning them on every turn cost about
    two thirds of PostgreSQL's CPU per job (bench/worker.py)."""
    prepared = claim_finish_and_claim_again()
    # As PostgreSQL keeps them: with $1, $2, ... for the parameters.
    assert [s for s in prepared if "scheduler_app_claim_jobs(" in s], prepared  # CLAIM
    assert [s for s in prepared if "scheduler_app_finish_jobs(" in s], prepared  # FINISH


def claim_and_start_one() -> int:
    """Claim one job unstarted, as the Celery relay does, and start it, as a Celery worker
    does (START, a prepared statement); return how many started."""
    arguments = claim_arguments()
    (row,) = pg.claim_jobs(**arguments, started=False)
    job = ClaimedJob.from_row(row)
    return len(pg.start_jobs([job.fence], worker="celery", lease=arguments["lease"]))


def test_a_migration_that_changes_a_returned_columns_type_does_not_stop_the_claim_loop(
    widen_column,
):
    """After a deploy's migration lengthens a varchar column, PostgreSQL refuses a statement
    prepared before it that returns the column ("cached plan must not change result
    type"): START returns unique_key as it is, and is prepared again instead of failing
    every turn. The claim's function returns it as text, and PostgreSQL plans the
    function's statement again itself."""
    for _ in range(3):
        schedule("tests.noop")
    assert claim_and_start_one() == 1  # CLAIM and START prepared on this connection

    widen_column("scheduler_app_job", "unique_key")

    for _ in range(2):
        assert claim_and_start_one() == 1


def test_behind_a_transaction_pooler_the_claim_loop_prepares_nothing(monkeypatch):
    """A statement prepared in one transaction's server session is unknown to the next
    one's behind a transaction pooler (DISABLE_SERVER_SIDE_CURSORS): nothing is prepared,
    and CLAIM and FINISH still go out in one pipeline."""
    monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    assert claim_finish_and_claim_again() == []
    connection.close()
