"""django.tasks Tasks (the django_tasks backport on Django 5.2) the SchedulerBackend tests enqueue.

Worker subprocesses import this module when they run one of them.
"""

import asyncio
import os
import time
from pathlib import Path

from scheduler_app import RetryLater
from scheduler_app.tasks_framework import task
from tests.testapp.models import Run


class TaskFailure(Exception):
    """What ``fail`` raises: a class outside builtins, to check its path is reported."""


@task
def add(a, b):
    return a + b


@task
def echo(*args, **kwargs):
    """Return the arguments as the function received them."""
    return {"args": args, "kwargs": kwargs}


@task
def fail(message):
    raise TaskFailure(message)


@task
def divide(a, b):
    return a / b


@task
def returns_a_set():
    return {1, 2}


@task
async def async_multiply(a, b):
    await asyncio.sleep(0)
    return a * b


@task(takes_context=True)
def record(context, label):
    """Record this run in a Run row (for the order of runs); return what the context says."""
    result = context.task_result
    Run.objects.create(job_id=int(result.id), attempt=context.attempt, pid=os.getpid())
    return {
        "label": label,
        "attempt": context.attempt,
        "status": str(result.status),
        "id": result.id,
        "worker_ids": result.worker_ids,
    }


@task
def wait_for_file(path, max_wait=60):
    """Wait until ``path`` exists (TimeoutError after ``max_wait`` seconds); return its text."""
    deadline = time.monotonic() + max_wait
    flag = Path(path)
    while not flag.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("%s did not appear" % path)
        time.sleep(0.02)
    return flag.read_text()


@task
def retry_once(path):
    """Create ``path`` and ask to run again later (RetryLater) if it is missing; then return."""
    flag = Path(path)
    if not flag.exists():
        flag.write_text("asked")
        raise RetryLater(0, reason="first run")
    return "second run"
