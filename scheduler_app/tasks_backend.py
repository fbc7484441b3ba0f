"""SchedulerBackend: Django's tasks framework enqueues jobs that runworker runs.

``TASKS = {"default": {"BACKEND": "scheduler_app.tasks_backend.SchedulerBackend"}}``
makes ``@task`` functions (``django.tasks`` on Django 6, the ``django_tasks``
backport on 5.2) enqueue jobs. Each enqueued Task becomes one job of the runner
task ``scheduler_app.django_task``, written by schedule() on the scheduler's
database, so it commits or rolls back with the caller's transaction there. The
job's payload names the Task by module path and holds its JSON arguments;
get_result() reads the job and its attempt history back as a TaskResult.

Priorities run the other way round: django.tasks runs a larger number first
(-100 to 100), scheduler_app a smaller one. A Task of priority ``p`` becomes a
job of priority ``-p``; the payload keeps ``p``, which results report.
"""

from __future__ import annotations

import builtins
import dataclasses
import datetime as dt
import traceback
from typing import Any

from django.utils import timezone
from django.utils.module_loading import import_string

from scheduler_app import clock, exceptions
from scheduler_app.conf import app_settings
from scheduler_app.exceptions import RetryLater, UnknownTask
from scheduler_app.models import Job, JobAttempt
from scheduler_app.registry import JobContext
from scheduler_app.registry import task as scheduler_task
from scheduler_app.retry import RetryPolicy
from scheduler_app.scheduling import check_payload, schedule
from scheduler_app.tasks_framework import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
    task_finished,
    task_started,
)
from scheduler_app.worker.execution import UNKNOWN_TASK_RECHECK

#: The scheduler_app task whose jobs run django.tasks Tasks.
RUNNER_TASK = "scheduler_app.django_task"

Status = Job.Status
Outcome = JobAttempt.Outcome

#: A pending job is READY, also between attempts; a cancelled one never ran,
#: which django.tasks calls FAILED ("unable to start").
STATUSES = {
    Status.PENDING: TaskResultStatus.READY,
    Status.RUNNING: TaskResultStatus.RUNNING,
    Status.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    Status.FAILED: TaskResultStatus.FAILED,
    Status.CANCELLED: TaskResultStatus.FAILED,
}
#: Attempts that used no attempt (retry later, shutdown hand-back) name no worker.
UNCOUNTED = (Outcome.DEFERRED, Outcome.INTERRUPTED)
#: Attempts whose error is an exception the Task raised.
RAISED = (Outcome.FAILED, Outcome.RETRIED)
#: The exception class reported for failures that raised nothing (cancel, lost lease).
NOT_RAISED = "scheduler_app.exceptions.SchedulerError"
TRACEBACK_HEADER = "Traceback (most recent call last):"
#: Largest job id: ids are bigint; a larger one would be a database error, not "no such result".
MAX_JOB_ID = 2**63 - 1

#: A Task fails at its first exception, as with Django's own backends; a job whose
#: worker died still runs again (up to max_attempts), as every job does.
NO_RETRY = RetryPolicy(retry_on=())


class SchedulerBackend(BaseTaskBackend):
    """Enqueue django.tasks Tasks as scheduler_app jobs, in the caller's transaction."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def validate_task(self, task: Task) -> None:
        """Refuse what Django refuses, and queues that SCHEDULER_APP['QUEUES'] does not list."""
        super().validate_task(task)
        if task.queue_name not in app_settings.QUEUES:
            raise InvalidTask(
                "Queue %r is not listed in SCHEDULER_APP['QUEUES']." % (task.queue_name,)
            )

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Write the Task's job on the caller's connection and return its READY result.

        Arguments that JSON cannot hold raise TypeError (as with Django's
        backends); the result holds them as the worker will read them back.
        """
        self.validate_task(task)
        run_after = task.run_after
        payload = check_payload(
            {
                "task": task.module_path,
                "args": normalize_json(args),
                "kwargs": normalize_json(kwargs),
                "priority": task.priority,
                "run_after": run_after.isoformat() if run_after else None,
                "backend": self.alias,
            }
        )
        if run_after is not None and timezone.is_naive(run_after):
            run_after = timezone.make_aware(run_after)  # USE_TZ = False
        # The result needs the job's id now: never wait for a business commit (the outbox
        # mode); Django's own advice, transaction.on_commit(task.enqueue), does that.
        job = schedule(
            RUNNER_TASK,
            payload,
            at=run_after,
            queue=task.queue_name,
            priority=-task.priority,
            outbox=False,
        )
        result = _result(job, task, attempts=[])
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """Return the result of the job ``result_id``, or raise TaskResultDoesNotExist."""
        job_id = str(result_id)
        job = None
        if job_id.isascii() and job_id.isdigit() and 0 < int(job_id) <= MAX_JOB_ID:
            job = Job.objects.filter(pk=int(job_id), task_name=RUNNER_TASK).first()
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        return load_result(job)


def load_result(job: Job) -> TaskResult:
    """Return ``job`` (a runner job) as a TaskResult, with errors and workers from its history."""
    attempts = job.attempt_history()
    return _result(job, enqueued_task(job), attempts)


def enqueued_task(job: Job) -> Task:
    """Return the Task a runner job runs, with the options it was enqueued with.

    Raise UnknownTask if its module path names no Task in this process.
    """
    payload = job.payload
    path = payload["task"]
    try:
        task = import_string(path)
    except ImportError as exc:
        raise UnknownTask("No Task can be imported as %r: %s" % (path, exc)) from exc
    if not isinstance(task, Task):
        raise UnknownTask("%r is not a Task." % path)
    run_after = payload["run_after"]
    return task.using(
        priority=payload["priority"],
        queue_name=job.queue,
        run_after=dt.datetime.fromisoformat(run_after) if run_after else None,
        backend=payload["backend"],
    )


def _result(job: Job, task: Task, attempts: list[JobAttempt]) -> TaskResult:
    counted = [attempt for attempt in attempts if attempt.outcome not in UNCOUNTED]
    worker_ids = [attempt.worker_id for attempt in counted]
    if job.status == Status.RUNNING:
        worker_ids.append(job.worker_id)  # the running attempt has no history row yet
    status = STATUSES[Status(job.status)]
    finished = status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
    # The job row's started_at is its latest claim's: an attempt only if the job is running
    # or ended by it (a pending or cancelled job's may be a claim handed back unstarted).
    starts = [attempt.started_at for attempt in counted]
    if job.status in (Status.RUNNING, Status.SUCCEEDED, Status.FAILED) and job.started_at:
        starts.append(job.started_at)
    result = TaskResult(
        task=task,
        id=str(job.pk),
        status=status,
        enqueued_at=job.created_at,
        started_at=starts[0] if starts else None,
        finished_at=(job.finished_at or job.cancelled_at) if finished else None,
        last_attempted_at=starts[-1] if starts else None,
        args=job.payload["args"],
        kwargs=job.payload["kwargs"],
        backend=job.payload["backend"],
        errors=_errors(job, attempts),
        worker_ids=worker_ids,
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", job.result)
    return result


def _errors(job: Job, attempts: list[JobAttempt]) -> list[TaskError]:
    errors = [task_error(attempt.error) for attempt in attempts if attempt.outcome in RAISED]
    if job.status == Status.CANCELLED:
        errors.append(TaskError(exception_class_path=NOT_RAISED, traceback="Job cancelled."))
    elif job.status == Status.FAILED and (not attempts or attempts[-1].outcome != Outcome.FAILED):
        # It failed without raising on its last attempt (e.g. its worker died).
        errors.append(task_error(job.last_error or "Job failed."))
    return errors


def task_error(error: str) -> TaskError:
    """Return the TaskError that an attempt's error text describes.

    Failed attempts store "Class: message" and then, for exceptions a task
    raised, the formatted traceback: the TaskError's traceback, whose last
    exception line names the class by module path (Python leaves out
    ``builtins.``). Other errors are reported whole.
    """
    lines = error.splitlines()
    if TRACEBACK_HEADER not in lines:
        path = _class_path(lines[0]) if lines else None
        return TaskError(exception_class_path=path or NOT_RAISED, traceback=error)
    outermost = len(lines) - lines[::-1].index(TRACEBACK_HEADER)
    exception_line = next(
        (line for line in lines[outermost:] if line and not line[0].isspace()), ""
    )
    # What follows the "Class: message" line, as traceback.format_exception() wrote it
    # (the worker strips the last newline).
    return TaskError(
        exception_class_path=_class_path(exception_line) or NOT_RAISED,
        traceback=error.partition("\n\n")[2] + "\n",
    )


def _class_path(exception_line: str) -> str | None:
    """Return the class path an exception line ("[module.]Class[: message]") names, if any."""
    name = exception_line.split(":", 1)[0]
    if not name.replace(".", "").replace("_", "").isalnum():
        return None
    if "." in name:
        return name
    for module in (builtins, exceptions):
        value = getattr(module, name, None)
        if isinstance(value, type) and issubclass(value, BaseException):
            return "%s.%s" % (module.__name__, name)
    return None


@scheduler_task(name=RUNNER_TASK, retry=NO_RETRY)
def run_django_task(job: JobContext) -> Any:
    """Call the Task a SchedulerBackend job names with its arguments; return its JSON result.

    A Task this worker cannot import (a newer deploy's) is left for a worker
    that can, as unknown tasks are, until UNKNOWN_TASK_GRACE after its
    scheduled time; then the job fails with UnknownTask.
    """
    try:
        result = load_result(Job.objects.get(pk=job.job_id))
    except UnknownTask as exc:
        grace_ends = job.scheduled_for + dt.timedelta(seconds=app_settings.UNKNOWN_TASK_GRACE)
        now = clock.now()
        if now >= grace_ends:
            raise
        raise RetryLater(min(UNKNOWN_TASK_RECHECK, grace_ends - now), reason=str(exc)) from exc
    task = result.task
    sender = type(task.get_backend())
    task_started.send(sender, task_result=result)
    args = [TaskContext(task_result=result), *result.args] if task.takes_context else result.args
    try:
        # TypeError for what JSON cannot hold, as with Django's backends.
        value = check_payload(normalize_json(task.call(*args, **result.kwargs)))
    except (RetryLater, KeyboardInterrupt):
        raise
    except BaseException as exc:  # SystemExit fails a Task too, as with Django's backends
        error = TaskError(
            exception_class_path="%s.%s" % (type(exc).__module__, type(exc).__qualname__),
            traceback="".join(traceback.format_exception(exc)),
        )
        failed = _finished(result, TaskResultStatus.FAILED, errors=[*result.errors, error])
        task_finished.send(sender, task_result=failed)
        raise
    succeeded = _finished(result, TaskResultStatus.SUCCESSFUL, errors=result.errors)
    object.__setattr__(succeeded, "_return_value", value)
    task_finished.send(sender, task_result=succeeded)
    return value


def _finished(result: TaskResult, status: TaskResultStatus, errors: list[TaskError]) -> TaskResult:
    """Return ``result`` as it ends (what task_finished receivers get; the worker stores it)."""
    return dataclasses.replace(result, status=status, finished_at=clock.now(), errors=errors)
