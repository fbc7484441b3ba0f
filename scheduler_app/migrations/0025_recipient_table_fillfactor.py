from django.db import migrations

from scheduler_app.db.storage import SetStorageParameters

#: Room on each page of a frozen audience for about one more version of each of its rows.
FILLFACTOR = 50


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
        SetStorageParameters("recipient", {"fillfactor": FILLFACTOR}),
    ]
