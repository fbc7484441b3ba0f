"""Alert memory: what the absent and suspicious-success rules keep of the history retention deletes.

The pruner calls ``remember_pruned`` before it deletes anything, so the worker's hot
path (finishing a job) writes nothing more. The rules read ``AlertMemory`` rows next to
the jobs and occurrences that remain.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import Q

from scheduler_app import database
from scheduler_app.alerts.targets import task_targets
from scheduler_app.models import AlertMemory, Job, Schedule, ScheduleOccurrence


def remember_pruned(
    jobs_cutoff: dt.datetime | None, occurrences_cutoff: dt.datetime | None
) -> None:
    """Record the successes and history that pruning jobs finished before ``jobs_cutoff`` and
    occurrences before ``occurrences_cutoff`` takes away (None: that kind is kept).

    A task's memory is what the rules read of it: its latest success and first finish
    (the absent rule, for a task with ``expected_every``) and its latest results (the
    zero-runs rule). It is kept for the tasks whose targets (``task_targets``) those
    rules read, each with a few look-ups of the index of a task's finished jobs, so the
    cost does not grow with the jobs that go (a partition of millions, dropped whole).
    """
    if jobs_cutoff is None and occurrences_cutoff is None:
        return
    _remember_schedules(jobs_cutoff, occurrences_cutoff)
    if jobs_cutoff is None:
        return
    pruned = Job.objects.filter(finished_at__lt=jobs_cutoff)
    targets = task_targets(list(Schedule.objects.filter(enabled=True)))
    for name, wanted in sorted(targets.items()):
        runs = wanted.zero_runs_alert if wanted.count_key else None
        if not (wanted.expected_every or runs):
            continue  # neither the absent nor the zero-runs rule reads its memory
        jobs = pruned.filter(task_name=name)
        last_success = _first_finish(jobs, Job.Status.SUCCEEDED, latest=True)
        finishes = [
            _first_finish(jobs, status) for status in (Job.Status.SUCCEEDED, Job.Status.FAILED)
        ]
        first_finished = min((at for at in finishes if at is not None), default=None)
        if first_finished is None:
            continue  # none of its jobs goes
        _merge(
            "task:%s" % name,
            last_success=(last_success, None) if last_success else None,
            first_finished=first_finished,
            results=_latest_results(pruned, name, runs, wanted.count_key) if runs else [],
            keep=runs or 0,
        )


def _first_finish(jobs: Any, status: str, *, latest: bool = False) -> dt.datetime | None:
    """Return the earliest (or ``latest``) finish time of ``jobs`` in ``status``: one entry
    of the index of a task's finished jobs (scheduler_job_task_ends)."""
    ordered = jobs.filter(status=status).order_by("-finished_at" if latest else "finished_at")
    return ordered.values_list("finished_at", flat=True).first()


def _remember_schedules(jobs_cutoff: dt.datetime | None, occurrences_cutoff: dt.datetime | None):
    # A schedule loses a success when its occurrence goes, or when its job goes (the
    # occurrence is then unlinked from it).
    going = Q(pk__in=[])
    if jobs_cutoff is not None:
        going |= Q(job__finished_at__lt=jobs_cutoff)
    if occurrences_cutoff is not None:
        going |= Q(occurrence_at__lt=occurrences_cutoff)
    successes = ScheduleOccurrence.objects.filter(going, job__status=Job.Status.SUCCEEDED)
    for schedule_id, name in Schedule.objects.values_list("pk", "name").order_by("name"):
        latest = (
            successes.filter(schedule_id=schedule_id)
            .order_by("-job__finished_at")
            .values_list("job__finished_at", "job__started_at")
            .first()
        )
        if latest is not None:
            finished, started = latest
            took = finished - started if started else None
            _merge("schedule:%s" % name, last_success=(finished, took), keep=0)


def _latest_results(pruned: Any, task_name: str, runs: int, key: str) -> list[dict[str, Any]]:
    latest = (
        pruned.filter(task_name=task_name, status=Job.Status.SUCCEEDED)
        .order_by("-finished_at")
        .values_list("pk", "finished_at", "result")[:runs]
    )
    return [
        {
            "job": pk,
            "finished_at": finished.isoformat(),
            # Only what the rule reads: a result can be large.
            "result": {key: result[key]} if isinstance(result, dict) and key in result else {},
        }
        for pk, finished, result in latest
    ]


def _merge(
    subject: str,
    *,
    last_success: tuple[dt.datetime, dt.timedelta | None] | None,
    first_finished: dt.datetime | None = None,
    results: list[dict[str, Any]] | None = None,
    keep: int,
) -> None:
    """Fold what is being pruned into ``subject``'s memory (two prunes may overlap)."""
    with database.atomic():
        memory, _ = AlertMemory.objects.select_for_update().get_or_create(subject=subject)
        if last_success and (
            memory.last_success_at is None or last_success[0] > memory.last_success_at
        ):
            memory.last_success_at, memory.last_success_took = last_success
        if first_finished and (
            memory.first_finished_at is None or first_finished < memory.first_finished_at
        ):
            memory.first_finished_at = first_finished
        if results:
            known = {entry["job"] for entry in results}
            merged = [*results, *(e for e in memory.recent_results if e["job"] not in known)]
            merged.sort(key=lambda entry: dt.datetime.fromisoformat(entry["finished_at"]))
            merged.reverse()
            memory.recent_results = merged[:keep]
        memory.save()
