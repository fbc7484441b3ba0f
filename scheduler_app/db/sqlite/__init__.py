"""SQLite statements: what ``scheduler_app.db.backend()`` returns on SQLite.

The same semantics as ``scheduler_app.db.postgresql``, module for module, with
serialised writes: SQLite lets one writer in at a time, so the claim's single UPDATE is
atomic without SKIP LOCKED. It suits development and single-host use; run production
on PostgreSQL.

- ``jobs``: claim, finish and start; ``notify`` does nothing (workers poll);
- ``recipients``: audience freeze, recipient claims and per-recipient sent markers;
- ``undo``: cancel inside the undo window in one guarded statement;
- ``clock``: the host's clock, and stored times read back as aware datetimes.
"""

from scheduler_app.db.sqlite.clock import now_sql, read_now
from scheduler_app.db.sqlite.jobs import (
    claim_jobs,
    finish_and_claim,
    finish_and_start,
    finish_jobs,
    notify,
    start_jobs,
    still_published,
)
from scheduler_app.db.sqlite.recipients import (
    begin_recipients,
    claim_recipients,
    extend_claims,
    freeze_recipients,
    lane_session,
    mark_and_begin,
    mark_recipients,
)
from scheduler_app.db.sqlite.undo import read_job_state, undo_job

__all__ = [
    "begin_recipients",
    "claim_jobs",
    "claim_recipients",
    "extend_claims",
    "finish_and_claim",
    "finish_and_start",
    "finish_jobs",
    "freeze_recipients",
    "lane_session",
    "mark_and_begin",
    "mark_recipients",
    "notify",
    "now_sql",
    "read_job_state",
    "read_now",
    "start_jobs",
    "still_published",
    "undo_job",
]
