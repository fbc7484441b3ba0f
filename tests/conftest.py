from __future__ import annotations

import os

import pytest
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections

#: Folders whose tests depend on the database vendor but not on Django's version: real
#: worker processes, signals and brokers, driven through our own SQL (see REPEAT).
VERSION_FREE = ("processes", "sends_processes", "celery", "pgbouncer")

#: Folders whose tests depend on Django's version but not on the database vendor: the
#: admin in a real browser (see REPEAT).
VENDOR_FREE = ("browser",)

#: Folders whose tests need scheduler_app's tables on a database of their own, which only
#: SCHEDULER_TEST_SEPARATE_DATABASE=1 sets up (tests/settings.py; .ci/run's own step).
SEPARATE_DATABASE = ("separate_database",)

#: Whether the test database's job table is partitioned: on PostgreSQL, migrate partitions
#: a new install's (migration 0033) unless SCHEDULER_TEST_PLAIN_JOB_TABLE=1 (tests/settings.py).
PARTITIONED = connection.vendor == "postgresql" and settings.SCHEDULER_APP.get(
    "PARTITIONED_HISTORY", True
)

#: SCHEDULER_TESTS_REPEAT names what a repeat run of the suite is for: "vendor" (CI's
#: SQLite run) skips what cannot depend on the database vendor, "version" (CI's Django 6
#: run) what cannot depend on Django's version. Unset: every test runs.
REPEAT = os.environ.get("SCHEDULER_TESTS_REPEAT", "")


def uses_the_database(item: pytest.Item) -> bool:
    """Return whether ``item`` reaches the test database (pytest-django's mark or fixtures)."""
    return bool(
        item.get_closest_marker("django_db")
        or {"db", "transactional_db"} & set(getattr(item, "fixturenames", ()))
    )


def pytest_collection_modifyitems(config, items):
    if REPEAT not in ("", "vendor", "version"):
        raise pytest.UsageError(
            "SCHEDULER_TESTS_REPEAT=%r: use 'vendor', 'version' or leave it unset." % REPEAT
        )
    for item in items:
        folder = item.path.relative_to(config.rootpath / "tests").parts[0]
        if folder in VERSION_FREE:
            item.add_marker(pytest.mark.version_free)
        if folder in VENDOR_FREE or not uses_the_database(item):
            item.add_marker(pytest.mark.vendor_free)
        if folder in SEPARATE_DATABASE and "scheduler" not in settings.DATABASES:
            item.add_marker(
                pytest.mark.skip(
                    reason="runs with SCHEDULER_TEST_SEPARATE_DATABASE=1 (its own step in .ci/run)"
                )
            )
        elif connection.vendor != "postgresql" and "postgres_only" in item.keywords:
            item.add_marker(
                pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL=postgres://...)")
            )
        elif PARTITIONED and "plain_job_table" in item.keywords:
            item.add_marker(
                pytest.mark.skip(
                    reason="reads the job or recipient table's own storage: runs with "
                    "SCHEDULER_TEST_PLAIN_JOB_TABLE=1 (its own step in .ci/run)"
                )
            )
        elif REPEAT and "%s_free" % REPEAT in item.keywords:
            item.add_marker(
                pytest.mark.skip(
                    reason="%s-free: runs in CI's PostgreSQL run, not in this repeat "
                    "(SCHEDULER_TESTS_REPEAT=%s)" % (REPEAT, REPEAT)
                )
            )


@pytest.fixture
def other_connection():
    """Return a function that opens a psycopg connection of its own to the test database
    (another process's, as a migration's or an operator's would be); closed after the test."""
    import psycopg

    opened = []

    def open_connection(**options) -> psycopg.Connection:
        settings = connection.settings_dict
        opened.append(
            psycopg.connect(
                dbname=settings["NAME"],
                user=settings["USER"],
                password=settings["PASSWORD"],
                host=settings["HOST"],
                port=settings["PORT"],
                **options,
            )
        )
        return opened[-1]

    yield open_connection
    for conn in opened:
        conn.close()


@pytest.fixture
def widen_column(other_connection):
    """Return a function that lengthens a varchar column by one, as a deploy's migration
    would, on a connection of its own; the column is put back after the test."""
    migrating = other_connection(autocommit=True)
    widened = []

    def widen(table: str, column: str) -> None:
        (length,) = migrating.execute(
            "SELECT character_maximum_length FROM information_schema.columns "
            "WHERE table_name = %s AND column_name = %s",
            [table, column],
        ).fetchone()
        widened.append((table, column, length))
        migrating.execute(ALTER_VARCHAR % (table, column, length + 1))

    yield widen
    for table, column, length in widened:
        migrating.execute(ALTER_VARCHAR % (table, column, length))


ALTER_VARCHAR = "ALTER TABLE %s ALTER COLUMN %s TYPE varchar(%d)"


@pytest.fixture(params=[None, "UTC", "Europe/Paris"], ids=["no TIME_ZONE", "UTC", "Paris"])
def database_time_zone(request):
    """The database's TIME_ZONE setting: PostgreSQL's session time zone; on SQLite the
    zone stored times are written in. It reconnects: use it with
    ``django_db(transaction=True)``."""
    wrapper = connections[DEFAULT_DB_ALIAS]  # not the proxy: its cached properties
    before = wrapper.settings_dict["TIME_ZONE"]

    def use(name):
        wrapper.close()
        wrapper.settings_dict["TIME_ZONE"] = name
        for cached in ("timezone", "timezone_name"):
            wrapper.__dict__.pop(cached, None)

    use(request.param)
    yield request.param
    use(before)
