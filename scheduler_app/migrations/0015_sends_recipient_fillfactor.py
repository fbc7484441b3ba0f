"""Recipient pages keep a fifth free (PostgreSQL), so a lane's claim and attempt updates
are HOT: no new index entries for rows that keep their indexed values.

Only pages written from now on (new batches' freezes) get the room; the ALTER takes a
lock that does not block reads or writes, so old workers keep running.
"""

from django.db import migrations

RECIPIENT = "scheduler_app_recipient"


def set_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE %s SET (fillfactor = 80)" % RECIPIENT)


def reset_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE %s RESET (fillfactor)" % RECIPIENT)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduler_app", "0009_schedule_declared_version"),
    ]

    operations = [migrations.RunPython(set_fillfactor, reset_fillfactor, elidable=False)]
