"""The jobs endpoints: list and retrieve the caller's jobs, cancel one, undo one inside
its undo window.

Cancel and undo are one guarded UPDATE each (scheduler_app.cancellation), on jobs the
caller may see, so the status code always says what happened in the database, whoever
raced the request.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from scheduler_app import cancellation, clock
from scheduler_app.api.errors import Conflict
from scheduler_app.api.permissions import job_owner_scope, visible_jobs
from scheduler_app.api.serializers import (
    JobCancelResultSerializer,
    JobConflictSerializer,
    JobFilterSerializer,
    JobSerializer,
    job_data,
)
from scheduler_app.api.viewsets import (
    NOT_AUTHENTICATED,
    VisibleObjectsViewSet,
    action_responses,
    conflict_example,
    document,
    error_response,
    utc_text,
)
from scheduler_app.cancellation import CancelOutcome
from scheduler_app.exceptions import SendLaneNotCancellable
from scheduler_app.models import Job

Status = Job.Status

NOT_FOUND = error_response("No such job, or not one of yours.")
CANCEL_CONFLICT = OpenApiResponse(
    JobConflictSerializer,
    description="Too late: the job is running (`already_running`) or has finished "
    "(`already_finished`); or the job is a lane of a send batch (`send_lane`), which only "
    "the batch's cancel (POST batches/{id}/cancel/) stops. Nothing was changed; `job` is "
    "its current state.",
    examples=[
        conflict_example(
            "already_running",
            "Job 42 is already running; it can no longer be cancelled.",
            job={"id": 42, "status": "running"},
        )
    ],
)
UNDO_CONFLICT = OpenApiResponse(
    JobConflictSerializer,
    description="Too late to undo: the undo window has closed or a worker claimed the job "
    "(`already_sending`), it has finished (`already_finished`), or it was scheduled "
    "without an undo window (`not_undoable`). Nothing was changed; `job` is its "
    "current state.",
    examples=[
        conflict_example(
            "already_sending",
            "Too late to undo: job 42 is already being sent.",
            job={"id": 42, "status": "running"},
        )
    ],
)


class JobViewSet(VisibleObjectsViewSet[Job]):
    """The caller's jobs (all jobs for staff with scheduler_app.change_job)."""

    serializer_class = JobSerializer
    queryset = Job.objects.none()  # the real one depends on the user: get_queryset()
    visible = staticmethod(visible_jobs)

    @document(
        summary="List jobs",
        description="The caller's jobs, newest first, in pages of `page_size` (default 50, "
        "at most 200). Follow `next` for the following page. Time filters take ISO 8601 "
        "date-times; a time without an offset is UTC. `*_after` includes the given time, "
        "`*_before` excludes it.",
        parameters=[JobFilterSerializer],
        responses={
            200: JobSerializer(many=True),
            400: error_response("Invalid filter or page parameter; `fields` names it."),
            401: NOT_AUTHENTICATED,
        },
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        filters = JobFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        jobs = filters.filter(self.get_queryset())
        page = self.paginate_queryset(jobs)
        return self.get_paginated_response(JobSerializer(page, many=True).data)

    @document(
        summary="Retrieve a job",
        description="One of the caller's jobs.",
        responses={200: JobSerializer, 401: NOT_AUTHENTICATED, 404: NOT_FOUND},
    )
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(JobSerializer(self.visible_object()).data)

    @document(
        summary="Cancel a job",
        description="Cancel a pending job. Exactly one of a cancel and a worker's claim wins; "
        "the response says which. Repeating a successful cancel returns 200 with "
        '`"outcome": "already_cancelled"`. A lane of a send batch (task '
        "`scheduler_app.send_batch`) is never cancelled on its own: cancel its batch.",
        request=None,
        responses=action_responses(
            JobCancelResultSerializer, not_found=NOT_FOUND, conflict=CANCEL_CONFLICT
        ),
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        job_id = self.object_id()
        visible = self.get_queryset()
        try:
            outcome = cancellation.cancel(job_id, by=request.user, queryset=visible)
        except SendLaneNotCancellable as exc:
            raise self._lane_conflict(visible, job_id, exc) from exc
        job = self._stored(visible, job_id, outcome)
        if outcome is CancelOutcome.TOO_LATE:
            raise self._conflict(
                job,
                "already_running",
                "Job %s is already running; it can no longer be cancelled." % job_id,
            )
        if outcome is CancelOutcome.ALREADY_FINISHED:
            raise self._conflict(
                job,
                "already_finished",
                "Job %s has already finished (%s); there is nothing to cancel."
                % (job_id, job.status),
            )
        return self._cancelled(job, outcome)

    @document(
        summary="Undo a job inside its undo window",
        description="Cancel a job scheduled with an undo window (e.g. a message), but only "
        "before its `undo_deadline` and before a worker claims it. Repeating a successful "
        'undo returns 200 with `"outcome": "already_cancelled"`.',
        request=None,
        responses=action_responses(
            JobCancelResultSerializer, not_found=NOT_FOUND, conflict=UNDO_CONFLICT
        ),
    )
    @action(detail=True, methods=["post"])
    def undo(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        job_id = self.object_id()
        if not request.user.is_authenticated:  # IsAuthenticated says so; never anyone's jobs
            raise exceptions.NotFound()
        now = clock.now()
        # One guarded UPDATE ... RETURNING, the window part of its guard; when
        # it changes nothing, one read says why (see cancellation.undo).
        try:
            outcome, job = cancellation.undo(
                job_id, by=request.user, owner=job_owner_scope(request.user)
            )
        except SendLaneNotCancellable as exc:
            raise self._lane_conflict(self.get_queryset(), job_id, exc) from exc
        if job is None:  # not visible, or no such job
            raise exceptions.NotFound()
        if outcome in (CancelOutcome.CANCELLED, CancelOutcome.ALREADY_CANCELLED):
            return self._cancelled(job, outcome)
        if job.undo_deadline is None:
            raise self._conflict(
                job,
                "not_undoable",
                "Job %s was scheduled without an undo window; it cannot be undone." % job_id,
            )
        if job.status in (Status.SUCCEEDED, Status.FAILED):
            raise self._conflict(
                job,
                "already_finished",
                "Too late to undo: job %s has already run (%s)." % (job_id, job.status),
            )
        if job.undo_deadline <= now:
            message = (
                "Too late to undo: the undo window of job %s closed at %s; it is "
                "already being sent." % (job_id, utc_text(job.undo_deadline))
            )
        else:
            message = "Too late to undo: job %s is already being sent." % job_id
        raise self._conflict(job, "already_sending", message)

    def _stored(self, visible: Any, job_id: int, outcome: CancelOutcome | None = None) -> Job:
        """Return the job as stored after cancel() reported ``outcome``; 404 if it is not there."""
        job = None if outcome is CancelOutcome.NOT_FOUND else visible.filter(pk=job_id).first()
        if job is None:  # not visible, or deleted since
            raise exceptions.NotFound()
        return job

    def _lane_conflict(self, visible: Any, job_id: int, exc: SendLaneNotCancellable) -> Conflict:
        batch_id = exc.params["batch"]
        return self._conflict(
            self._stored(visible, job_id),
            exc.code,
            "Job %s is a lane of send batch %s and cannot be cancelled on its own; "
            "cancel the batch instead: POST %s."
            % (job_id, batch_id, self.absolute_url("batch-cancel", batch_id)),
        )

    def _cancelled(self, job: Job, outcome: CancelOutcome) -> Response:
        return Response({"outcome": outcome.value, "job": job_data(job)})

    def _conflict(self, job: Job, code: str, message: str) -> Conflict:
        return Conflict(message, code=code, extra={"job": job_data(job)})
