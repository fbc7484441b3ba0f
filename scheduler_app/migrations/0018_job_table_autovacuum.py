from django.db import migrations

from scheduler_app.db.storage import SetStorageParameters

#: Vacuum the job table after a fixed number of dead rows, not a fifth of the table, and
#: clean its indexes each time: PostgreSQL skips the index pass when under 2 % of the
#: table's pages have dead rows, and that pass is what removes the claim index's entries.
AUTOVACUUM = {
    "autovacuum_vacuum_scale_factor": "0",
    "autovacuum_vacuum_threshold": "10000",
    "vacuum_index_cleanup": "on",
}


class Migration(migrations.Migration):
    # Every claim leaves the claimed job's entry in the claim index dead until VACUUM
    # removes it, and the next claims step over it. PostgreSQL's default autovacuums a
    # table once a fifth of its rows are dead (a claim and a finish leave two): with a
    # million finished jobs, after about 100,000 claims, so the claim's cost grew with the
    # history kept. A fixed number of dead rows, and the index pass every time, keep it
    # flat (docs/performance.md, bench/sustained.py). ALTER TABLE ... SET (...) takes a
    # SHARE UPDATE EXCLUSIVE lock: claims and finishes go on. Backwards, the three
    # settings are reset to PostgreSQL's defaults, whoever set them.

    dependencies = [
        ("scheduler_app", "0017_recipient_message_index"),
    ]

    operations = [
        SetStorageParameters("job", AUTOVACUUM),
    ]
