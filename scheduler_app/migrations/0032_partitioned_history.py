import importlib

from django.db import migrations, models

from scheduler_app.db.functions import RunSQLOnPostgreSQL

# Partitioned history (scheduler_app.partitions), the part every install gets; all of it
# additive, so that workers of the release before keep running during a deploy:
# - Job.in_history, a column with a default (instant on PostgreSQL 11+), set by the
#   batched finish when a job ends once the job table is partitioned, which routes rows
#   by it.
# - The three foreign keys to the job table lose their database constraint (the ORM's
#   on_delete still applies): a partitioned table cannot have a unique constraint on id
#   alone, which a foreign key needs. Dropping a constraint is instant.
# - The claim and the batched finish (CREATE OR REPLACE of migration 0031's functions,
#   same arguments and columns) read only the hot partition, and the finish marks the
#   jobs that end. On a table that is not partitioned the extra condition is always true.

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
          -- Only the hot partition, where every unfinished job is (scheduler_app.partitions).
          AND (CASE WHEN in_history AND status IN ('succeeded', 'failed', 'cancelled')
                   THEN COALESCE(finished_at, created_at) ELSE 'infinity' END) = 'infinity'
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
      AND (CASE WHEN j.in_history AND j.status IN ('succeeded', 'failed', 'cancelled')
                THEN COALESCE(j.finished_at, j.created_at) ELSE 'infinity' END) = 'infinity'
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
    -- whose lease expired: its rows match nothing, and write no history row. With
    -- partitioned history a job that ends is marked in_history, and its row moves, in
    -- this update, into the partition of the time it finished (scheduler_app.partitions).
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
            lease_expires_at = NULL,
            -- Only once the table is partitioned (scheduler_partition): a row that ended
            -- before stays in the hot partition, whose bound the conversion checks.
            in_history = v.status IN ('succeeded', 'failed', 'cancelled') AND (
                SELECT EXISTS (SELECT FROM pg_partitioned_table
                               WHERE partrelid = to_regclass('scheduler_app_job')))
        FROM v
        WHERE j.id = ANY(p_ids) AND j.id = v.id AND j.lease_token = v.token
          AND (j.status = 'running') IS TRUE
          -- Only the hot partition, where every unfinished job is (scheduler_app.partitions).
          AND (CASE WHEN j.in_history AND j.status IN ('succeeded', 'failed', 'cancelled')
                    THEN COALESCE(j.finished_at, j.created_at) ELSE 'infinity' END) = 'infinity'
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



# Unapplied, the functions go back to migration 0031's (before in_history is removed).
BEFORE = importlib.import_module("scheduler_app.migrations.0031_claim_and_finish_functions")


def job_reference(related_name, on_delete, **kwargs):
    return models.ForeignKey(
        db_constraint=False,
        on_delete=on_delete,
        related_name=related_name,
        to="scheduler_app.job",
        **kwargs,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_app", "0031_claim_and_finish_functions"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="in_history",
            field=models.BooleanField(db_default=False, default=False, editable=False),
        ),
        migrations.AlterField(
            model_name="jobattempt",
            name="job",
            field=job_reference("recorded_attempts", models.deletion.CASCADE),
        ),
        migrations.AlterField(
            model_name="scheduleoccurrence",
            name="job",
            field=job_reference(
                "schedule_occurrences", models.deletion.SET_NULL, blank=True, null=True
            ),
        ),
        migrations.AlterField(
            model_name="synccursor",
            name="job",
            field=job_reference("+", models.deletion.SET_NULL, blank=True, null=True),
        ),
        RunSQLOnPostgreSQL(CLAIM_JOBS, BEFORE.CLAIM_JOBS),
        RunSQLOnPostgreSQL(FINISH_JOBS, BEFORE.FINISH_JOBS),
    ]
