from django.db import migrations

# A job table partitioned before this migration drew its ids from the hot partition's
# identity sequence, which Django's sequence reset (loaddata, sqlsequencereset) cannot
# find from the partitioned table: jobs loaded from a fixture could have their ids handed
# out again. Here the partitioned table's id column takes a sequence of its own, at the
# same value (partitions.own_id_sequence(); one short transaction with a lock timeout,
# retried, while workers run). Tables not partitioned, and SQLite, are left as they are.


def own_id_sequence(apps, schema_editor):
    from scheduler_app import partitions

    if partitions.migrates_here(schema_editor):
        partitions.own_id_sequence()


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("scheduler_app", "0033_partition_new_installs")]

    # Backwards there is nothing to undo: a sequence the id column owns serves 0033's
    # table as well, and partitions.revert() keeps it.
    operations = [migrations.RunPython(own_id_sequence, migrations.RunPython.noop)]
