"""System check E081: LISTEN_DATABASE is None, "" or the alias of a PostgreSQL database."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from scheduler_app.checks.database import check_listen_database

POSTGRES = {"ENGINE": "django.db.backends.postgresql", "NAME": "direct"}
SQLITE = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}


@pytest.fixture
def listen_on(monkeypatch):
    """listen_on(value, **databases): the setting, with these aliases added to DATABASES."""

    def listen_on(value, **databases):
        for alias, database in databases.items():
            monkeypatch.setitem(settings.DATABASES, alias, database)
        return override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, "LISTEN_DATABASE": value})

    return listen_on


@pytest.mark.parametrize("value", [None, ""])
def test_the_side_connection_or_nowhere_is_fine(listen_on, value):
    with listen_on(value):
        assert check_listen_database() == []


def test_an_alias_of_a_postgresql_database_is_fine(listen_on):
    with listen_on("direct", direct=POSTGRES):
        assert check_listen_database() == []


@pytest.mark.parametrize(
    ("value", "databases"),
    [
        pytest.param("direct", {}, id="unknown-alias"),
        pytest.param("direct", {"direct": SQLITE}, id="not-postgresql"),
        pytest.param(["direct"], {"direct": POSTGRES}, id="not-a-string"),
    ],
)
def test_anything_else_is_e081(listen_on, value, databases):
    with listen_on(value, **databases):
        errors = check_listen_database()
    assert [error.id for error in errors] == ["scheduler_app.E081"]
    assert 'must be None, "" or the alias of a PostgreSQL database' in errors[0].msg
