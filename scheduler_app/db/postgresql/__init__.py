"""PostgreSQL statements: what ``scheduler_app.db.backend()`` returns on PostgreSQL.

Every SQL-backed operation of one concept lives in one module; this package is their
one entry point, with the functions ``scheduler_app.db.sqlite`` has too, plus those only
PostgreSQL has. By the guarantee each keeps (docs/guarantees.md):

- ``jobs``: at most one worker runs a job (the SKIP LOCKED claim, the lease-fenced
  batched finish, both in one round trip; the Celery executor's start), and the NOTIFY
  that wakes idle workers;
- ``recipients``: per-recipient sent markers (audience freeze, recipient claims, mark
  and begin, on a lane's own session);
- ``undo``: what an undo window guarantees (cancel inside it in one guarded statement);
- ``clock``: one clock, the database's, in every statement;
- ``prune``: cleanup is guarded (batched deletes of finished jobs);
- ``lateness``: lateness is a query (percentiles per task);
- ``locks``: the advisory locks that let one worker at a time enqueue schedule
  occurrences or evaluate the alert rules;
- ``statements``: how the hot statements are sent (server-side binding, reused
  cursors, prepared statements).
"""

from scheduler_app.db.postgresql.clock import now_sql, read_now
from scheduler_app.db.postgresql.jobs import (
    CHANNEL,
    claim_jobs,
    finish_and_claim,
    finish_and_start,
    finish_jobs,
    notify,
    start_jobs,
    still_published,
)
from scheduler_app.db.postgresql.lateness import lateness_percentiles
from scheduler_app.db.postgresql.locks import (
    limit_transaction,
    try_alert_lock,
    try_scheduler_lock,
)
from scheduler_app.db.postgresql.prune import (
    count_finished_jobs,
    count_recipients,
    prune_finished_jobs,
    prune_recipients,
)
from scheduler_app.db.postgresql.recipients import (
    begin_recipients,
    claim_recipients,
    extend_claims,
    freeze_recipients,
    lane_session,
    mark_and_begin,
    mark_recipients,
)
from scheduler_app.db.postgresql.undo import read_job_state, undo_job

__all__ = [
    "CHANNEL",
    "begin_recipients",
    "claim_jobs",
    "claim_recipients",
    "count_finished_jobs",
    "count_recipients",
    "extend_claims",
    "finish_and_claim",
    "finish_and_start",
    "finish_jobs",
    "freeze_recipients",
    "lane_session",
    "lateness_percentiles",
    "limit_transaction",
    "mark_and_begin",
    "mark_recipients",
    "notify",
    "now_sql",
    "prune_finished_jobs",
    "prune_recipients",
    "read_job_state",
    "read_now",
    "start_jobs",
    "still_published",
    "try_alert_lock",
    "try_scheduler_lock",
    "undo_job",
]
