import django.db.models.functions.text
from django.db import migrations, models

from scheduler_app.db.indexes import AddIndexConcurrently


class Migration(migrations.Migration):
    # The admin's exact-address search compares UPPER(address) (any case), which the plain
    # address index cannot serve: each search read every recipient. The new index takes
    # the old one's place (0022 drops it), one entry per recipient as before. Built
    # CONCURRENTLY, which cannot run in a transaction: lanes keep marking meanwhile.
    atomic = False

    dependencies = [
        ("scheduler_app", "0020_batch_contexts_blanked_at"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="recipient",
            index=models.Index(
                django.db.models.functions.text.Upper("address"),
                name="scheduler_recipient_address_ci",
            ),
        ),
    ]
