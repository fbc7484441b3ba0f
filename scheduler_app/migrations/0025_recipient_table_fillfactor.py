from django.db import migrations, router

#: Room on each page of a frozen audience for about one more version of each of its rows.
FILLFACTOR = 50


def _alter(apps, schema_editor, clause):
    recipient = apps.get_model("scheduler_app", "Recipient")
    alias = schema_editor.connection.alias
    if schema_editor.connection.vendor != "postgresql" or not router.allow_migrate_model(
        alias, recipient
    ):
        return
    table = schema_editor.quote_name(recipient._meta.db_table)
    schema_editor.execute("ALTER TABLE %s %s" % (table, clause))


def leave_room_on_pages(apps, schema_editor):
    _alter(apps, schema_editor, "SET (fillfactor = %d)" % FILLFACTOR)


def pack_pages_full(apps, schema_editor):
    _alter(apps, schema_editor, "RESET (fillfactor)")


class Migration(migrations.Migration):
    # A send updates each recipient row at least three times: the chunk's claim, the
    # charge of the attempt, the marker. The claim and the charge change no indexed column,
    # so PostgreSQL can rewrite the row on its own page without new index entries (a HOT
    # update), but only if the page has room. The freeze packed pages full, so a chunk's
    # claim, and an idempotent provider's charge of a group, wrote each row elsewhere with
    # four new index entries. Half of each page is left free for audiences frozen from
    # now on (pages already written keep their rows). ALTER TABLE ... SET (fillfactor)
    # takes a SHARE UPDATE EXCLUSIVE lock: lanes, freezes and the admin go on (it waits
    # for a VACUUM of the table that is running). Backwards, the setting is reset to
    # PostgreSQL's default, whoever set it.

    dependencies = [
        ("scheduler_app", "0024_drop_job_task_outcomes_index"),
    ]

    operations = [
        migrations.RunPython(leave_room_on_pages, pack_pages_full, elidable=False),
    ]
