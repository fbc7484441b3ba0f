"""SchedulerBackend without a worker: enqueue, validation, results, checks (both databases)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import traceback

import django
import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from scheduler_app.cancellation import CancelOutcome, cancel
from scheduler_app.checks.tasks_backend import check_tasks_backends
from scheduler_app.conf import app_settings
from scheduler_app.db import backend
from scheduler_app.exceptions import InvalidPayload, RetryLater, UnknownTask
from scheduler_app.models import Job
from scheduler_app.registry import JobContext
from scheduler_app.scheduling import schedule
from scheduler_app.tasks_backend import RUNNER_TASK, SchedulerBackend, run_django_task, task_error
from scheduler_app.tasks_framework import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
)
from scheduler_app.worker.execution import ClaimedJob, hand_back
from scheduler_app.worker.outcomes import record_one
from tests.testapp.framework_tasks import TaskFailure, add, echo, record

pytestmark = pytest.mark.django_db

BACKEND = "scheduler_app.tasks_backend.SchedulerBackend"


def test_the_backend_is_built_on_djangos_framework_on_django_6_and_the_backport_before():
    framework = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
    assert SchedulerBackend.__mro__[1].__module__ == framework + ".backends.base"


def test_backend_claims_every_capability():
    backend = task_backends["default"]
    assert isinstance(backend, SchedulerBackend)
    assert backend.supports_defer is True
    assert backend.supports_async_task is True
    assert backend.supports_get_result is True
    assert backend.supports_priority is True


def test_enqueue_writes_one_runner_job_and_returns_a_ready_result():
    result = echo.using(priority=30).enqueue(1, (2, 3), key={"nested": [b"bytes"]})

    job = Job.objects.get()
    assert result.id == str(job.pk)
    assert (job.task_name, job.queue, job.status) == (RUNNER_TASK, "default", Job.Status.PENDING)
    assert job.priority == -30, "django.tasks runs larger first, scheduler_app smaller first"
    assert job.payload == {
        "task": "tests.testapp.framework_tasks.echo",
        "args": [1, [2, 3]],
        "kwargs": {"key": {"nested": ["bytes"]}},
        "priority": 30,
        "run_after": None,
        "backend": "default",
    }
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs) == ([1, [2, 3]], {"key": {"nested": ["bytes"]}})
    assert result.enqueued_at == job.created_at
    assert (result.started_at, result.finished_at, result.last_attempted_at) == (None, None, None)
    assert (result.errors, result.worker_ids, result.backend) == ([], [], "default")
    assert not result.is_finished
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = result.return_value

    stored = echo.get_result(result.id)
    assert stored.status == TaskResultStatus.READY
    assert (stored.args, stored.kwargs) == (result.args, result.kwargs)
    assert stored.task.priority == 30
    assert stored.task.func is echo.func


@pytest.mark.parametrize("then", ["handed_back", "cancelled"])
def test_a_result_claimed_and_handed_back_unstarted_reports_no_start(then):
    """A worker stopping before it started the job (or a Celery relay that could not
    publish it) hands it back; the claim's time is no start of the Task."""
    result = add.enqueue(1, 2)
    (row,) = backend().claim_jobs(
        worker="w", queues=["default"], limit=1, lease=dt.timedelta(seconds=30)
    )
    job = ClaimedJob.from_row(row)
    assert record_one(hand_back(job, "Worker w stopped before starting it."), worker="w")
    if then == "cancelled":
        assert cancel(int(result.id)) == CancelOutcome.CANCELLED

    again = add.get_result(result.id)

    assert (again.started_at, again.last_attempted_at, again.worker_ids) == (None, None, [])


def test_priority_maps_to_the_opposite_job_priority_at_both_ends():
    highest = add.using(priority=100).enqueue(1, 1)
    lowest = add.using(priority=-100).enqueue(1, 1)
    assert Job.objects.get(pk=highest.id).priority == -100
    assert Job.objects.get(pk=lowest.id).priority == 100
    assert add.get_result(lowest.id).task.priority == -100
    with pytest.raises(InvalidTask, match="priority must be a whole number between -100 and 100"):
        add.using(priority=101)


def test_run_after_is_the_jobs_run_time():
    run_after = timezone.now() + dt.timedelta(hours=2)
    result = add.using(run_after=run_after).enqueue(1, 2)
    job = Job.objects.get(pk=result.id)
    assert job.run_at == run_after
    assert job.scheduled_for == run_after
    assert add.get_result(result.id).task.run_after == run_after
    with pytest.raises(InvalidTask, match="run_after must be an aware datetime"):
        add.using(run_after=dt.datetime(2030, 1, 1))


def test_arguments_json_cannot_hold_are_refused_and_nothing_is_written():
    with pytest.raises(TypeError, match="Unsupported type"):
        add.enqueue({1, 2}, 3)
    with pytest.raises(InvalidPayload, match="NaN or Infinity"):
        add.enqueue(math.nan, 3)
    with pytest.raises(InvalidPayload, match="not valid Unicode"):
        add.enqueue("\udc80", 3)
    assert not Job.objects.exists()


def test_queues_are_validated_against_the_backend_and_scheduler_app():
    assert add.using(queue_name="emails").enqueue(1, 1).task.queue_name == "emails"
    assert Job.objects.get().queue == "emails"
    # "slow" is in SCHEDULER_APP['QUEUES'] but not in the backend's QUEUES.
    with pytest.raises(InvalidTask, match="Queue 'slow' is not valid for backend"):
        add.using(queue_name="slow")
    tasks = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "elsewhere"]}}
    with (
        override_settings(TASKS=tasks),
        pytest.raises(
            InvalidTask, match=r"Queue 'elsewhere' is not listed in SCHEDULER_APP\['QUEUES'\]"
        ),
    ):
        add.using(queue_name="elsewhere")


def test_enqueue_inside_a_rolled_back_transaction_leaves_no_job():
    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        result = add.enqueue(1, 2)
        assert add.get_result(result.id).status == TaskResultStatus.READY
        raise Rollback
    assert not Job.objects.exists()
    with pytest.raises(TaskResultDoesNotExist):
        add.get_result(result.id)


def test_get_result_of_anything_but_an_enqueued_task_does_not_exist():
    other = schedule("tests.noop")
    backend = task_backends["default"]
    for result_id in ["", "abc", "0", "-1", "1.5", "²", str(2**63), str(other.pk)]:
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(result_id)


def test_a_cancelled_job_is_failed_with_a_scheduler_error():
    result = add.enqueue(1, 2)
    assert cancel(int(result.id)) == CancelOutcome.CANCELLED
    stored = add.get_result(result.id)
    assert stored.status == TaskResultStatus.FAILED
    assert stored.finished_at is not None
    assert [error.exception_class_path for error in stored.errors] == [
        "scheduler_app.exceptions.SchedulerError"
    ]
    with pytest.raises(ValueError, match="Task failed"):
        _ = stored.return_value


def test_async_enqueue_and_get_result():
    async def enqueue_and_read():
        result = await record.aenqueue("async")
        return result, await record.aget_result(result.id)

    result, stored = async_to_sync(enqueue_and_read)()
    assert Job.objects.get().pk == int(result.id)
    assert stored.status == TaskResultStatus.READY
    assert stored.args == ["async"]
    assert stored.task.takes_context is True


def _traceback_of(exc):
    return "".join(traceback.format_exception(exc))


def test_task_error_reads_the_class_path_from_the_stored_traceback():
    def raised(exc, cause=None):
        try:
            raise exc from cause
        except BaseException as caught:
            return caught

    custom = raised(TaskFailure("boom\nsecond line"), cause=ValueError("inner"))
    text = "TaskFailure: boom\nsecond line\n\n" + _traceback_of(custom).rstrip()
    error = task_error(text)
    assert error.exception_class_path == "tests.testapp.framework_tasks.TaskFailure"
    assert error.exception_class is TaskFailure
    assert error.traceback == _traceback_of(custom)

    builtin = task_error("ZeroDivisionError: x\n\n" + _traceback_of(raised(ZeroDivisionError())))
    assert builtin.exception_class_path == "builtins.ZeroDivisionError"
    unknown = task_error("UnknownTask: no such task")
    assert unknown.exception_class_path == "scheduler_app.exceptions.UnknownTask"
    assert unknown.traceback == "UnknownTask: no such task"
    assert task_error("Lease expired at 2030-01-01T00:00:00: worker w").exception_class_path == (
        "scheduler_app.exceptions.SchedulerError"
    )


def test_checks_refuse_queues_scheduler_app_does_not_list():
    assert check_tasks_backends() == []
    tasks = {
        "default": {"BACKEND": BACKEND, "QUEUES": ["default", "nope", "slow"]},
        "empty": {"BACKEND": BACKEND, "QUEUES": []},
        "text": {"BACKEND": BACKEND, "QUEUES": "default"},
        "options": {"BACKEND": BACKEND, "OPTIONS": {"X": 1}},
        # Not a SchedulerBackend: not ours to check.
        "other": {"BACKEND": "tests.testapp.no_such_backend", "QUEUES": ["nope"]},
    }
    with override_settings(TASKS=tasks):
        errors = check_tasks_backends()
    assert [(error.id, error.msg) for error in errors] == [
        (
            "scheduler_app.E070",
            "TASKS['default'] lists queue 'nope', which SCHEDULER_APP['QUEUES'] does not list.",
        ),
        (
            "scheduler_app.E071",
            "TASKS['empty']['QUEUES'] is empty, which lets Tasks name any queue.",
        ),
        ("scheduler_app.E071", "TASKS['text']['QUEUES'] must be a list of queue names."),
        (
            "scheduler_app.E072",
            "TASKS['options']['OPTIONS'] is set, but SchedulerBackend takes no options.",
        ),
    ]
    # Left out, QUEUES is Django's ["default"], which must be listed too.
    scheduler_app = {"QUEUES": ["emails"]}
    with override_settings(TASKS={"default": {"BACKEND": BACKEND}}, SCHEDULER_APP=scheduler_app):
        assert [error.id for error in check_tasks_backends()] == ["scheduler_app.E070"]


@pytest.mark.parametrize("queues", [None, 5, True])
def test_checks_leave_a_scheduler_app_queues_of_the_wrong_type_to_e002(queues):
    """The comparison with SCHEDULER_APP['QUEUES'] crashed the check (TypeError)."""
    tasks = {
        "default": {"BACKEND": BACKEND, "QUEUES": ["default"]},
        "options": {"BACKEND": BACKEND, "QUEUES": ["default"], "OPTIONS": {"X": 1}},
    }
    with override_settings(TASKS=tasks, SCHEDULER_APP={"QUEUES": queues}):
        errors = check_tasks_backends()
    assert [error.id for error in errors] == ["scheduler_app.E072"]


def test_a_task_this_worker_cannot_import_waits_for_one_that_can_then_fails():
    """As with unknown tasks: handed back until UNKNOWN_TASK_GRACE after its time, then failed."""
    payload = {**Job.objects.get(pk=add.enqueue(1, 2).id).payload, "task": "tests.testapp.gone"}
    job = schedule(RUNNER_TASK, payload)
    context = JobContext(
        job_id=job.pk,
        task_name=RUNNER_TASK,
        payload=job.payload,
        payload_version=1,
        attempt=1,
        scheduled_for=job.scheduled_for,
        idempotency_key=str(job.pk),
    )
    with pytest.raises(RetryLater, match=r"No Task can be imported as 'tests\.testapp\.gone'"):
        run_django_task(context)

    grace = dt.timedelta(seconds=app_settings.UNKNOWN_TASK_GRACE)
    late = dataclasses.replace(context, scheduled_for=job.scheduled_for - grace)
    with pytest.raises(UnknownTask, match=r"No Task can be imported as 'tests\.testapp\.gone'"):
        run_django_task(late)
