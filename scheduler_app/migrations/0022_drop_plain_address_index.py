from django.db import migrations

from scheduler_app.db.indexes import RemoveIndexConcurrently


class Migration(migrations.Migration):
    # 0021's UPPER(address) index serves the admin's exact-address search; nothing reads
    # the plain one. A migration of its own, so that an interrupted migrate can run again:
    # 0021 is recorded once its index is built, and this drop (IF EXISTS) repeats.
    atomic = False

    dependencies = [
        ("scheduler_app", "0021_recipient_address_any_case_index"),
    ]

    operations = [
        RemoveIndexConcurrently(
            model_name="recipient",
            name="scheduler_recipient_address",
        ),
    ]
