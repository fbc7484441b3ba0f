"""Django's task backend contract, run by real runworker processes on PostgreSQL.

Each test enqueues through the django.tasks API (the django_tasks backport on
Django 5.2) and reads results back with get_result() while a runworker
subprocess runs the jobs: one worker for the module on the "default" queue
(starting one per test would double the run time), and one of its own for the
priority test, on the "emails" queue.
"""

from __future__ import annotations

import datetime as dt

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone

from scheduler_app.models import Job
from scheduler_app.tasks_framework import TaskResultDoesNotExist, TaskResultStatus
from tests.helpers import wait_until
from tests.processes.conftest import WorkerProcess
from tests.testapp.framework_tasks import (
    TaskFailure,
    add,
    async_multiply,
    divide,
    echo,
    fail,
    record,
    retry_once,
    returns_a_set,
    wait_for_file,
)
from tests.testapp.models import Run

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

Status = TaskResultStatus


def wait_for(task, result, *statuses, timeout=30.0):
    """Wait until the stored result of ``result`` has one of ``statuses``; return it."""

    def stored():
        current = task.get_result(result.id)
        return current if current.status in statuses else None

    return wait_until(stored, timeout=timeout, message="result %s to be %s" % (result.id, statuses))


@pytest.fixture(scope="module")
def worker(django_db_setup):
    """Run one runworker on the "default" queue for the module's tests."""
    # A short lease: it rescues the lease of a killed worker within a second or two.
    process = WorkerProcess("--worker-id", "tasks-shared", "--queue", "default", "--lease", "2")
    try:
        yield process
    finally:
        process.kill()


def test_result_lifecycle_ready_running_successful(worker, tmp_path):
    """A result is READY when enqueued, RUNNING on a worker, SUCCESSFUL with its return value."""
    flag = tmp_path / "flag"
    with transaction.atomic():  # not yet visible to the worker
        result = wait_for_file.enqueue(str(flag))
        assert result.status == Status.READY
        assert wait_for_file.get_result(result.id).status == Status.READY

    running = wait_for(wait_for_file, result, Status.RUNNING)
    assert running.worker_ids == ["tasks-shared"]
    assert running.attempts == 1
    assert running.started_at is not None
    assert running.last_attempted_at == running.started_at
    assert running.finished_at is None
    assert not running.is_finished

    flag.write_text("done")
    result.refresh()  # TaskResult.refresh() goes through get_result
    wait_for(wait_for_file, result, Status.SUCCESSFUL)
    result.refresh()
    assert result.status == Status.SUCCESSFUL
    assert result.return_value == "done"
    assert result.is_finished
    assert result.errors == []
    assert result.worker_ids == ["tasks-shared"]
    assert result.enqueued_at <= result.started_at <= result.finished_at


def test_arguments_return_values_context_and_async_tasks(worker):
    """Arguments reach the function as JSON, return values come back, contexts and coroutines."""
    summed = add.enqueue(2, 3)
    echoed = echo.enqueue(1, (2, 3), text="x", nested={"b": b"bytes"})
    contexted = record.enqueue("ctx")

    async def enqueue_and_wait_async():
        result = await async_multiply.aenqueue(6, 7)
        return result

    multiplied = async_to_sync(enqueue_and_wait_async)()

    assert wait_for(add, summed, Status.SUCCESSFUL).return_value == 5
    assert wait_for(echo, echoed, Status.SUCCESSFUL).return_value == {
        "args": [1, [2, 3]],
        "kwargs": {"text": "x", "nested": {"b": "bytes"}},
    }
    context = wait_for(record, contexted, Status.SUCCESSFUL).return_value
    assert context == {
        "label": "ctx",
        "attempt": 1,
        "status": "RUNNING",
        "id": contexted.id,
        "worker_ids": ["tasks-shared"],
    }
    wait_for(async_multiply, multiplied, Status.SUCCESSFUL)

    async def read_async():
        return await async_multiply.aget_result(multiplied.id)

    assert async_to_sync(read_async)().return_value == 42


def test_exceptions_fail_the_task_with_class_path_and_traceback(worker):
    """An exception fails the task at once (no retry), reporting its class and traceback."""
    failed = fail.enqueue("boom")
    divided = divide.enqueue(1, 0)
    unstorable = returns_a_set.enqueue()

    result = wait_for(fail, failed, Status.FAILED)
    assert result.attempts == 1
    assert result.finished_at is not None
    [error] = result.errors
    assert error.exception_class_path == "tests.testapp.framework_tasks.TaskFailure"
    assert error.exception_class is TaskFailure
    assert "raise TaskFailure(message)" in error.traceback
    assert error.traceback.startswith("Traceback (most recent call last):\n")
    assert error.traceback.endswith("\ntests.testapp.framework_tasks.TaskFailure: boom\n")
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value

    [error] = wait_for(divide, divided, Status.FAILED).errors
    assert error.exception_class is ZeroDivisionError
    assert "return a / b" in error.traceback

    # A return value JSON cannot hold fails the task, as with Django's backends.
    [error] = wait_for(returns_a_set, unstorable, Status.FAILED).errors
    assert error.exception_class is TypeError
    assert "Unsupported type" in error.traceback


def test_run_after_defers_the_task(worker):
    """A Task with run_after stays READY until then; its result reports run_after."""
    run_after = timezone.now() + dt.timedelta(hours=1)
    deferred = add.using(run_after=run_after).enqueue(1, 1)
    now = add.enqueue(2, 2)

    wait_for(add, now, Status.SUCCESSFUL)
    assert add.get_result(deferred.id).status == Status.READY
    # Stage the passing of time on the row, not by waiting an hour.
    Job.objects.filter(pk=deferred.id).update(run_at=timezone.now())
    result = wait_for(add, deferred, Status.SUCCESSFUL)
    assert result.return_value == 2
    assert result.task.run_after == run_after


def test_larger_priority_runs_first(start_worker):
    """Tasks run from the largest django.tasks priority to the smallest, then in enqueue order."""
    priorities = [0, -100, 100, 10, 10, -5]
    emails = record.using(queue_name="emails")  # a queue the module's worker does not serve
    results = [emails.using(priority=p).enqueue(str(i)) for i, p in enumerate(priorities)]
    start_worker(
        "--worker-id",
        "tasks-priority",
        "--queue",
        "emails",
        "--concurrency",
        "1",
        "--batch-size",
        "1",
    )
    for result in results:
        wait_for(record, result, Status.SUCCESSFUL)

    ran = [str(run.job_id) for run in Run.objects.order_by("id")]
    by_id = {result.id: result for result in results}
    assert [by_id[job_id].task.priority for job_id in ran] == [100, 10, 10, 0, -5, -100]
    assert [by_id[job_id].args[0] for job_id in ran] == ["2", "3", "4", "0", "5", "1"]


def test_task_enqueued_in_a_rolled_back_transaction_never_runs(worker):
    """Enqueueing commits with the caller's transaction: rolled back, the Task never runs."""

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        rolled_back = record.enqueue("rolled back")
        raise Rollback
    with transaction.atomic():
        committed = record.enqueue("committed")

    wait_for(record, committed, Status.SUCCESSFUL)
    later = record.enqueue("later")  # enqueued after, so it runs after anything left
    wait_for(record, later, Status.SUCCESSFUL)
    assert [run.job_id for run in Run.objects.all()] == [int(committed.id), int(later.id)]
    with pytest.raises(TaskResultDoesNotExist):
        record.get_result(rolled_back.id)


def test_retry_later_runs_the_task_again_without_using_an_attempt(worker, tmp_path):
    """scheduler_app's RetryLater works from a Task: READY again, then SUCCESSFUL, one attempt."""
    result = wait_for(retry_once, retry_once.enqueue(str(tmp_path / "asked")), Status.SUCCESSFUL)
    assert result.return_value == "second run"
    assert (result.attempts, result.errors) == (1, [])
    assert (tmp_path / "asked").exists()


def test_a_task_whose_worker_died_runs_again_on_another(worker, start_worker, tmp_path):
    """SIGKILL mid-task loses nothing: after lease expiry the Task runs again, on another worker.

    The lost attempt raised nothing, so it adds a worker id but no error.
    """
    flag = tmp_path / "flag"
    result = wait_for_file.using(queue_name="emails").enqueue(str(flag))
    workers = {name: start_worker("--worker-id", name, "--queue", "emails") for name in "ab"}
    [doomed] = wait_for(wait_for_file, result, Status.RUNNING).worker_ids
    workers[doomed].kill()
    flag.write_text("second")
    # Stage the lease's expiry on the row, not by waiting; the module's worker rescues it.
    expired = timezone.now() - dt.timedelta(seconds=1)
    assert Job.objects.filter(pk=result.id).update(lease_expires_at=expired) == 1

    result = wait_for(wait_for_file, result, Status.SUCCESSFUL)
    assert result.return_value == "second"
    [survivor] = set(workers) - {doomed}
    assert result.worker_ids == [doomed, survivor]
    assert (result.attempts, result.errors) == (2, [])
