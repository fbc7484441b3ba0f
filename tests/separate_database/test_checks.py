"""The checks of the scheduler's database with two databases in DATABASES: the router
(E121), foreign keys across databases (E122), the outbox mode (W120, E123)."""

from __future__ import annotations

from django.conf import settings
from django.test import override_settings

from scheduler_app.checks.routing import check_scheduler_database

ROUTER = "scheduler_app.routers.SchedulerRouter"
USERS = "tests.routers.UsersWithTheScheduler"


def ids(messages) -> list[str]:
    return [message.id for message in messages]


def with_settings(**scheduler_app):
    return override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, **scheduler_app})


def test_the_tests_setup_passes_but_for_the_warning_on_what_it_costs():
    (warning,) = check_scheduler_database()
    assert warning.id == "scheduler_app.W120"
    assert warning.msg.startswith(
        "scheduler_app's tables are on database 'scheduler': schedule() inside a transaction "
        "of another database (your business data's, such as 'default') is not atomic with it."
    )
    assert "a crash between that commit and the write loses them" in warning.hint


def test_the_outbox_mode_takes_the_warning_away():
    with with_settings(ENQUEUE_ON_COMMIT_OF="default"):
        assert check_scheduler_database() == []


def test_without_the_router_the_models_would_stay_on_default():
    with override_settings(DATABASE_ROUTERS=[USERS]):
        messages = check_scheduler_database()
    assert ids(messages) == ["scheduler_app.E121", "scheduler_app.W120"]
    error = messages[0]
    assert "the routers send scheduler_app's models elsewhere: " in error.msg
    assert "reads Alert to 'default'" in error.msg
    assert error.hint.startswith("Add %r to DATABASE_ROUTERS" % ROUTER)


def test_a_user_model_on_another_database_is_refused_field_by_field():
    with override_settings(DATABASE_ROUTERS=[ROUTER]):
        messages = check_scheduler_database()
    errors = [m for m in messages if m.id == "scheduler_app.E122"]
    fields = {"%s.%s" % (e.obj.model.__name__, e.obj.name) for e in errors}
    assert {"Job.owner", "Job.cancelled_by", "SendBatch.owner", "ControlEvent.by"} <= fields
    owner = next(e for e in errors if e.obj.name == "owner" and e.obj.model.__name__ == "Job")
    assert owner.msg == (
        "scheduler_app.Job.owner relates scheduler_app.Job to auth.User, which the routers "
        "put on database 'default', while scheduler_app's tables are on 'scheduler': Django "
        "cannot keep a foreign key across databases (migrate fails to create it, deletes "
        "and joins fail)."
    )
    assert owner.hint.startswith("Route auth to 'scheduler' as well (a router listed before")


def test_enqueue_on_commit_of_must_name_another_known_database():
    with with_settings(ENQUEUE_ON_COMMIT_OF="scheduler"):
        assert ids(check_scheduler_database()) == ["scheduler_app.E123"]
    with with_settings(ENQUEUE_ON_COMMIT_OF="business"):
        assert ids(check_scheduler_database()) == ["scheduler_app.E123"]
