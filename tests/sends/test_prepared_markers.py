"""A lane's prepared marker statement survives a deploy's migration in the middle of a send."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler_app.models import Recipient
from scheduler_app.sends.rendering import Message
from tests.sends.helpers import run_lane_now

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]


class MigratingProvider:
    """Sends; runs ``before_second_call`` before its second call."""

    calls = 0
    before_second_call: Callable[[], None] = staticmethod(lambda: None)

    def send(self, message: Message, idempotency_key: str) -> str:
        MigratingProvider.calls += 1
        if MigratingProvider.calls == 2:
            MigratingProvider.before_second_call()
        return "migrating-%s" % idempotency_key


def test_a_migration_mid_send_does_not_fail_the_lane(customer, make_batch, settings, widen_column):
    """The marker statement returns the recipient's status: lengthening that column makes
    PostgreSQL refuse the statement prepared before (as a rolling deploy's migration
    would); the lane prepares it again and every recipient is sent once."""
    settings.SCHEDULER_APP = {
        **settings.SCHEDULER_APP,
        "PROVIDERS": {
            **settings.SCHEDULER_APP["PROVIDERS"],
            "migrating": "tests.sends.test_prepared_markers.MigratingProvider",
        },
    }
    MigratingProvider.calls = 0
    MigratingProvider.before_second_call = staticmethod(
        lambda: widen_column("scheduler_app_recipient", "status")
    )
    for name in ("ann", "bob", "cat"):
        customer("%s@example.com" % name, name.title())
    batch = make_batch(provider="migrating")

    run = run_lane_now(batch)

    assert (run.counts, run.retry) == ({"sent": 3}, None)
    assert set(Recipient.objects.values_list("status", "attempts")) == {("sent", 1)}
