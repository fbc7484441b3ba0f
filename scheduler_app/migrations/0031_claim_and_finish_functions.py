from django.db import migrations

from scheduler_app.db.functions import RunSQLOnPostgreSQL

# The claim loop's two hot statements as PL/pgSQL functions, whose plans PostgreSQL keeps
# per server session, through a transaction pooler too (see scheduler_app.db.functions).
# The SQL is this migration's own: a later change to either function is a new migration
# (CREATE OR REPLACE with the same arguments and columns, or a function of a new name, so
# that workers of the release before keep calling the one they know during a deploy).
# So is a migration that changes the type of a column the claim returns beyond its length
# (varchar columns are returned as text): PL/pgSQL refuses rows of another type than the
# function declares.

CLAIM_JOBS = """
CREATE OR REPLACE FUNCTION scheduler_app_claim_jobs(
    p_worker text, p_queues text[], p_limit integer, p_frozen timestamptz,
    p_lease interval, p_paused_tasks text[], p_started boolean
) RETURNS TABLE (
    id bigint, task_name text, payload text, payload_version smallint, attempts integer,
    max_attempts integer, scheduled_for timestamptz, run_at timestamptz, unique_key text,
    lease_token bigint, retry_later_deadline timestamptz, claimed_at timestamptz
)
LANGUAGE plpgsql
-- The claim index holds pending jobs in claim order, so a claim reads p_limit entries and
-- stops. Without statistics (a fresh install's first burst, until autoanalyze runs) the
-- planner guesses that almost nothing is pending, and reading every due job and sorting
-- them looks as cheap: 7 ms per claim at 20,000 due jobs instead of 0.1 ms. The setting
-- holds while the function runs, and for the plan it keeps.
SET enable_sort = off
AS $fn$
#variable_conflict use_column
BEGIN
    -- The locking query is a MATERIALIZED CTE, run once: as a subquery in FROM, with the
    -- statistics of an emptied table, the planner put it inside a nested loop and ran it
    -- again for each row of the table, and one claim took every due job. p_frozen: NULL,
    -- or the frozen test clock; statement_timestamp(), not now(), which stays at the
    -- start of the transaction.
    RETURN QUERY
    WITH due AS MATERIALIZED (
        SELECT id FROM scheduler_app_job
        WHERE status = 'pending' AND queue = ANY(p_queues)
          AND run_at <= COALESCE(p_frozen, statement_timestamp())
          AND NOT (task_name = ANY(p_paused_tasks))
        ORDER BY priority, run_at, id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    )
    UPDATE scheduler_app_job AS j
    SET status = 'running', worker_id = p_worker,
        lease_expires_at = COALESCE(p_frozen, statement_timestamp()) + p_lease,
        started_at = CASE WHEN p_started THEN COALESCE(p_frozen, statement_timestamp()) END,
        attempts = j.attempts + 1, lease_token = j.lease_token + 1
    FROM due
    WHERE j.id = due.id
    RETURNING j.id, j.task_name::text, j.payload::text, j.payload_version, j.attempts,
              j.max_attempts, j.scheduled_for, j.run_at, j.unique_key::text, j.lease_token,
              j.retry_later_deadline, COALESCE(p_frozen, statement_timestamp());
END
$fn$
"""

FINISH_JOBS = """
CREATE OR REPLACE FUNCTION scheduler_app_finish_jobs(
    p_rows json, p_ids bigint[], p_worker text
) RETURNS TABLE (id bigint, token bigint)
LANGUAGE plpgsql
AS $fn$
#variable_conflict use_column
BEGIN
    -- Rows are found by primary key (j.id = ANY(p_ids)); the status guard is written
    -- IS TRUE so that it implies no partial index's predicate, or the planner may scan
    -- one of them (every pending job) instead. The lease_token guard fences out a worker
    -- whose lease expired: its rows match nothing, and write no history row.
    RETURN QUERY
    WITH v AS (
        SELECT * FROM json_to_recordset(p_rows) AS v(
            id bigint, token bigint, status text, outcome text, run_at timestamptz,
            refund int, error text, finished_at timestamptz, result text,
            deadline timestamptz, attempt int, task_name text, due_at timestamptz,
            started_at timestamptz, history bool)
    ), done AS (
        UPDATE scheduler_app_job AS j
        SET status = v.status,
            run_at = COALESCE(v.run_at, j.run_at),
            attempts = j.attempts - v.refund,
            finished_at = CASE WHEN v.status = 'pending' THEN NULL ELSE v.finished_at END,
            last_error = v.error,
            result = v.result::jsonb,
            retry_later_deadline = COALESCE(v.deadline, j.retry_later_deadline),
            worker_id = CASE WHEN v.history THEN '' ELSE j.worker_id END,
            lease_expires_at = NULL
        FROM v
        WHERE j.id = ANY(p_ids) AND j.id = v.id AND j.lease_token = v.token
          AND (j.status = 'running') IS TRUE
        RETURNING j.id, j.lease_token AS token
    ), recorded AS (
        INSERT INTO scheduler_app_jobattempt (job_id, attempt, task_name, worker_id, due_at,
                                              started_at, finished_at, outcome, error)
        SELECT v.id, v.attempt, v.task_name, p_worker, v.due_at, v.started_at,
               v.finished_at, v.outcome, v.error
        FROM v JOIN done ON done.id = v.id AND done.token = v.token
        WHERE v.history
    )
    SELECT done.id, done.token FROM done;
END
$fn$
"""


class Migration(migrations.Migration):
    # Additive: two functions that workers of this release call; workers of the release
    # before send the same statements as their own and never call them.
    dependencies = [
        ("scheduler_app", "0030_feedback_event_message"),
    ]

    operations = [
        RunSQLOnPostgreSQL(
            CLAIM_JOBS,
            "DROP FUNCTION IF EXISTS scheduler_app_claim_jobs("
            "text, text[], integer, timestamptz, interval, text[], boolean)",
        ),
        RunSQLOnPostgreSQL(
            FINISH_JOBS,
            "DROP FUNCTION IF EXISTS scheduler_app_finish_jobs(json, bigint[], text)",
        ),
    ]
