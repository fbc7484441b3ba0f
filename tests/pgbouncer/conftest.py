"""Real runworker processes behind a real PgBouncer in transaction-pooling mode.

SCHEDULER_TEST_PGBOUNCER_URL names the PgBouncer (``postgres://postgres@127.0.0.1:6432``,
no database: any name it is given maps to the same name on the PostgreSQL the tests use);
without it these tests are skipped, and `.ci/run` fails if they were in its PgBouncer step
(`bash .ci/pgbouncer start DIR PORT` starts one, see docs/development.md). The test process
itself connects directly; what goes through PgBouncer runs in subprocesses, with
DISABLE_SERVER_SIDE_CURSORS = True as a project behind transaction pooling sets it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from tests.helpers import REPO, database_url, wait_until
from tests.processes.conftest import start_worker  # noqa: F401  (the fixture)

PGBOUNCER_URL = os.environ.get("SCHEDULER_TEST_PGBOUNCER_URL", "").rstrip("/")

#: The skip reason `.ci/run` looks for in its PgBouncer step.
NO_PGBOUNCER = (
    "needs PgBouncer in transaction mode (set SCHEDULER_TEST_PGBOUNCER_URL=postgres://"
    "postgres@127.0.0.1:6432; bash .ci/pgbouncer start DIR starts one)"
)


def pooled_url() -> str:
    """Return the URL of the test database through PgBouncer."""
    return "%s/%s" % (PGBOUNCER_URL, connection.settings_dict["NAME"])


def pooled_env(*, listen: str | None = "direct", **extra: str) -> dict[str, str]:
    """Return the environment of a subprocess whose database goes through PgBouncer in
    transaction mode (tests/settings.py): LISTEN on the direct alias "direct", or ``listen``
    = "" to poll, or None to leave SCHEDULER_APP['LISTEN_DATABASE'] unset."""
    env = {
        "DATABASE_URL": pooled_url(),
        "SCHEDULER_TEST_TRANSACTION_POOLING": "1",
        "SCHEDULER_TEST_DIRECT_DATABASE_URL": database_url(),
        **extra,
    }
    if listen is not None:
        env["SCHEDULER_TEST_LISTEN_DATABASE"] = listen
    return env


def run_pooled(code: str) -> str:
    """Run ``code`` in ``manage.py shell`` through PgBouncer (a web process's connection);
    return its output, failing with it if the process fails."""
    result = subprocess.run(
        [sys.executable, "-m", "django", "shell", "--settings=tests.settings", "-v0", "-c", code],
        cwd=REPO,
        env={**os.environ, **pooled_env()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def admin_console() -> psycopg.Connection:
    """Return a connection to PgBouncer's admin console (its "pgbouncer" database)."""
    # It speaks only the simple query protocol: nothing prepared, no parameters.
    return psycopg.connect(
        PGBOUNCER_URL.replace("postgres://", "postgresql://") + "/pgbouncer",
        autocommit=True,
        prepare_threshold=None,
    )


def pooled_transactions() -> int:
    """Return how many transactions PgBouncer has passed to the test database so far."""
    with admin_console() as console:
        cursor = console.execute("SHOW STATS")
        names = [column.name for column in cursor.description]
        for row in cursor.fetchall():
            stats = dict(zip(names, row, strict=True))
            if stats["database"] == connection.settings_dict["NAME"]:
                return int(stats["total_xact_count"])
    return 0


def server_connections(console: psycopg.Connection, database: str) -> int:
    """Return how many server connections PgBouncer holds to ``database``."""
    cursor = console.execute("SHOW SERVERS")
    names = [column.name for column in cursor.description]
    return sum(dict(zip(names, row, strict=True))["database"] == database for row in cursor)


@pytest.fixture(scope="session", autouse=True)
def pgbouncer_lets_go(django_db_setup) -> Iterator[None]:
    """Check that the PgBouncer pools by transaction; after the last test, have it close
    its server connections to the test database, so that Django can drop it."""
    if not PGBOUNCER_URL:
        yield
        return
    with admin_console() as console:
        config = {row[0]: row[1] for row in console.execute("SHOW CONFIG")}
    mode = config["pool_mode"]
    assert mode == "transaction", "PgBouncer at %s pools by %s." % (PGBOUNCER_URL, mode)
    yield
    name = connection.settings_dict["NAME"]
    with admin_console() as console:
        console.execute("RECONNECT %s" % name)  # closes the idle ones at once
        wait_until(
            lambda: server_connections(console, name) == 0,
            timeout=10,
            message="PgBouncer to close its connections to %s" % name,
        )
