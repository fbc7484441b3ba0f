from django.db import migrations

# Job attempts partitioned by job (scheduler_app.attempt_partitions): a new install's
# attempt table is partitioned here, while it is empty (PARTITIONED_HISTORY, default True),
# as migration 0033 does the job table's; so is an existing install's whose attempt
# table is empty. A table that holds rows is left as it is: `manage.py
# scheduler_partition` converts it online. SQLite keeps one table. Backwards, a
# partitioned attempt table is put back as one table with its rows.


def partition_new_install(apps, schema_editor):
    from scheduler_app import attempt_partitions, partitions
    from scheduler_app.conf import app_settings

    if (
        not partitions.migrates_here(schema_editor)
        or not app_settings.PARTITIONED_HISTORY
        or attempt_partitions.is_partitioned()
    ):
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT EXISTS (SELECT 1 FROM %s)" % attempt_partitions.ATTEMPT)
        if cursor.fetchone()[0]:
            return
    attempt_partitions.convert()


def put_back_as_one_table(apps, schema_editor):
    from scheduler_app import attempt_partitions, partitions

    if partitions.migrates_here(schema_editor):
        attempt_partitions.revert()


class Migration(migrations.Migration):
    # convert() runs its own short transactions, each with a lock timeout.
    atomic = False

    dependencies = [("scheduler_app", "0036_occurrences_partitioned_by_time")]

    operations = [migrations.RunPython(partition_new_install, put_back_as_one_table)]
