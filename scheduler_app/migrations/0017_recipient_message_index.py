from django.db import migrations, models

from scheduler_app.db.indexes import AddIndexConcurrently


class Migration(migrations.Migration):
    # Feedback webhooks tie a bounce or complaint back to its recipient by the provider's
    # message id: without an index each event read the whole recipient table. Built
    # CONCURRENTLY, which cannot run in a transaction: lanes keep marking meanwhile, and
    # old workers need no index.
    atomic = False

    dependencies = [
        ("scheduler_app", "0016_slimmer_job_indexes"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="recipient",
            index=models.Index(
                condition=~models.Q(provider_message_id=""),
                fields=["provider_message_id"],
                name="scheduler_recipient_message",
            ),
        ),
    ]
