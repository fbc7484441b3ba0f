"""How the recipient table is stored on PostgreSQL."""

from __future__ import annotations

import pytest
from django.db import connection

from scheduler_app.models import Recipient

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]


def test_recipient_pages_keep_room_for_the_lanes_updates():
    """A lane updates each recipient row up to three times (claim, attempt, marker); room
    on its page lets the first two be HOT updates, with no new index entries."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reloptions FROM pg_class WHERE relname = %s", [Recipient._meta.db_table]
        )
        (options,) = cursor.fetchone()

    assert "fillfactor=80" in (options or [])
