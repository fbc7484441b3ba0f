"""The checks of the scheduler's database on a single database (tests/separate_database
checks two): the default needs nothing, an unknown alias is refused (E120), and so is an
outbox that waits for the scheduler's own database or an unknown one (E123)."""

from __future__ import annotations

from django.conf import settings
from django.test import override_settings

from scheduler_app.checks.routing import check_scheduler_database


def with_settings(**scheduler_app):
    return override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, **scheduler_app})


def test_the_default_database_needs_no_router_and_costs_nothing():
    assert check_scheduler_database() == []


def test_an_unknown_alias_is_refused():
    with with_settings(DATABASE="jobs"):
        (error,) = check_scheduler_database()
    assert error.id == "scheduler_app.E120"
    assert error.msg == (
        "SCHEDULER_APP['DATABASE'] must be the alias of a database in DATABASES, not 'jobs'."
    )
    assert error.hint == "Known aliases: 'default'."


def test_the_outbox_must_wait_for_another_known_database():
    with with_settings(ENQUEUE_ON_COMMIT_OF="default"):
        (error,) = check_scheduler_database()
    assert error.id == "scheduler_app.E123"
    assert error.msg.startswith(
        "SCHEDULER_APP['ENQUEUE_ON_COMMIT_OF'] is 'default', the scheduler's own database"
    )
    with with_settings(ENQUEUE_ON_COMMIT_OF=["default"]):
        assert [e.id for e in check_scheduler_database()] == ["scheduler_app.E123"]
