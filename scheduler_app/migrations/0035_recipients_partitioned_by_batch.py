import django.db.models.deletion
from django.db import migrations, models

# Recipients partitioned by batch (scheduler_app.recipient_partitions):
# - The feedback events' foreign key to the recipient table loses its database
#   constraint (the ORM's on_delete still applies): a partitioned table cannot have a
#   unique constraint on id alone, which a foreign key needs. Dropping it is instant.
# - A new install's recipient table is partitioned here, while it is empty
#   (PARTITIONED_HISTORY, default True), as migration 0033 does the job table's; so is an
#   existing install's whose recipient table is empty. A table that holds rows is left as
#   it is: `manage.py scheduler_partition` converts it online. SQLite keeps one table.
#   Backwards, a partitioned recipient table is put back as one table with its rows.


def partition_new_install(apps, schema_editor):
    from scheduler_app import partitions, recipient_partitions
    from scheduler_app.conf import app_settings

    if (
        not partitions.migrates_here(schema_editor)
        or not app_settings.PARTITIONED_HISTORY
        or recipient_partitions.is_partitioned()
    ):
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT EXISTS (SELECT 1 FROM %s)" % recipient_partitions.RECIPIENT)
        if cursor.fetchone()[0]:
            return
    recipient_partitions.convert()


def unlink_feedback_from_pruned_recipients(apps, schema_editor):
    """Backwards, before the constraint comes back: an event recorded while its recipient
    was being pruned may name one that is gone."""
    from django.db.models import Exists, OuterRef

    FeedbackEvent = apps.get_model("scheduler_app", "FeedbackEvent")
    Recipient = apps.get_model("scheduler_app", "Recipient")
    alias = schema_editor.connection.alias
    FeedbackEvent.objects.using(alias).exclude(recipient=None).exclude(
        Exists(Recipient.objects.using(alias).filter(pk=OuterRef("recipient_id")))
    ).update(recipient=None)


def put_back_as_one_table(apps, schema_editor):
    from scheduler_app import partitions, recipient_partitions

    if partitions.migrates_here(schema_editor):
        recipient_partitions.revert()


class Migration(migrations.Migration):
    # convert() runs its own short transactions, each with a lock timeout.
    atomic = False

    dependencies = [("scheduler_app", "0034_job_ids_sequence_owned_by_the_job_table")]

    operations = [
        migrations.AlterField(
            model_name="feedbackevent",
            name="recipient",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="scheduler_app.recipient",
            ),
        ),
        migrations.RunPython(migrations.RunPython.noop, unlink_feedback_from_pruned_recipients),
        migrations.RunPython(partition_new_install, put_back_as_one_table),
    ]
