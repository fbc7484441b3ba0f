from django.db import migrations

# A new install's job table is partitioned here, while it is empty (scheduler_app.partitions;
# PARTITIONED_HISTORY, default True): no row to check or move, and the table's lock is
# held for milliseconds. So is an existing install's whose job table is empty at that
# migrate. A table that holds rows is left as it is: converting it takes
# `manage.py scheduler_partition`, online, whenever its operators choose. SQLite keeps
# one table. Backwards, a partitioned job table (made here or by the command) is put back
# as one table with its history (partitions.revert()): the migrations before this one
# add constraints and reset storage parameters that a partitioned table cannot take.


def partition_new_install(apps, schema_editor):
    from scheduler_app import partitions
    from scheduler_app.conf import app_settings

    if (
        not partitions.migrates_here(schema_editor)
        or not app_settings.PARTITIONED_HISTORY
        or partitions.is_partitioned()
    ):
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT EXISTS (SELECT 1 FROM %s)" % partitions.JOB)
        if cursor.fetchone()[0]:
            return
    partitions.convert()


def put_back_as_one_table(apps, schema_editor):
    from scheduler_app import partitions

    if partitions.migrates_here(schema_editor):
        partitions.revert()


class Migration(migrations.Migration):
    # convert() runs its own short transactions, each with a lock timeout.
    atomic = False

    dependencies = [("scheduler_app", "0032_partitioned_history")]

    operations = [migrations.RunPython(partition_new_install, put_back_as_one_table)]
