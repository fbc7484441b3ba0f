"""The scheduler's database: the alias of DATABASES that holds scheduler_app's tables.

SCHEDULER_APP['DATABASE'] names it ("default" unless the project moves the job churn off
its business database; docs/separate-database.md). The ORM reaches it through
``scheduler_app.routers.SchedulerRouter``; everything else that must act on the
scheduler's tables goes through here: raw SQL (db/), transactions, on-commit callbacks,
reconnects and the vendor checks. So ``connection`` below, not ``django.db.connection``
(the default database's), and ``atomic()``, not a bare ``transaction.atomic()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connections, transaction

from scheduler_app.conf import app_settings


def alias() -> str:
    """Return the alias of the database that holds scheduler_app's tables."""
    return app_settings.DATABASE


class SchedulerConnection:
    """This thread's connection to the scheduler's database, looked up on each use.

    What ``django.db.connection`` is for the default database: attribute access goes to
    ``connections[alias()]`` of the calling thread, so a module can import it once and
    every thread (and an ``override_settings`` of DATABASE) gets its own connection.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(connections[alias()], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(connections[alias()], name, value)

    def __delattr__(self, name: str) -> None:
        delattr(connections[alias()], name)

    def __eq__(self, other: object) -> bool:
        return connections[alias()] == other

    __hash__ = None  # type: ignore[assignment]  # equal to a connection that may change

    def __repr__(self) -> str:
        return "<SchedulerConnection %s>" % alias()


#: The scheduler's connection (see SchedulerConnection).
connection = SchedulerConnection()


def atomic(*, savepoint: bool = True, durable: bool = False) -> transaction.Atomic:
    """Return ``transaction.atomic()`` on the scheduler's database."""
    return transaction.atomic(using=alias(), savepoint=savepoint, durable=durable)


def on_commit(func: Callable[[], Any], *, robust: bool = False) -> None:
    """Run ``func`` once the scheduler's database commits its current transaction (at once
    outside one): ``transaction.on_commit()`` on the scheduler's database."""
    transaction.on_commit(func, using=alias(), robust=robust)


def in_transaction(using: str | None = None) -> bool:
    """Return whether the calling thread is inside ``atomic()`` on database ``using`` (default:
    the scheduler's)."""
    return connections[using or alias()].in_atomic_block
