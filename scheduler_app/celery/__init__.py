"""Run scheduler_app's jobs on Celery: the only package that imports Celery.

The database stays the record (a transactional outbox): ``runworker
--executor celery`` (the relay, see ``relay``) claims due jobs with the same
lease as the local executor and publishes each job's id and lease token;
``run_job`` and ``run_jobs`` (see ``tasks``) start each job with one guarded
UPDATE that consumes the token, so of two deliveries of one message only one runs.

Add ``"scheduler_app.celery"`` to your Celery app's ``include`` so its
workers know both tasks. See docs/celery.md.
"""

from scheduler_app.celery.tasks import RUN_JOB, RUN_JOBS, run_job, run_jobs

__all__ = ["RUN_JOB", "RUN_JOBS", "run_job", "run_jobs"]
