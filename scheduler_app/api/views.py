"""The API: jobs, send batches and single messages; plus the schema and its docs page.

Cancel and undo are one guarded UPDATE each (scheduler_app.cancellation,
scheduler_app.sends.batches), on objects the caller may see, so the status
code always says what happened in the database, whoever raced the request.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from django.apps import apps
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.templatetags.static import static
from django.urls import reverse
from django.utils.html import escape
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from drf_spectacular.views import SpectacularAPIView
from rest_framework import authentication, exceptions, mixins, viewsets
from rest_framework.authentication import SessionAuthentication
from rest_framework.decorators import action
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler_app import cancellation, clock
from scheduler_app.api.authentication import TokenAuthentication
from scheduler_app.api.errors import Conflict, error_body, exception_handler
from scheduler_app.api.negotiation import JSONOnlyNegotiation
from scheduler_app.api.parsers import JSONParser
from scheduler_app.api.permissions import (
    RESUME_BATCHES,
    SEND_MESSAGES,
    job_owner_scope,
    visible_batches,
    visible_jobs,
)
from scheduler_app.api.serializers import (
    BatchConflictSerializer,
    BatchPauseSerializer,
    BatchResultSerializer,
    BatchSerializer,
    BatchUndoConflictSerializer,
    ErrorSerializer,
    JobCancelResultSerializer,
    JobConflictSerializer,
    JobFilterSerializer,
    JobSerializer,
    MessageScheduledSerializer,
    MessageSerializer,
    job_data,
)
from scheduler_app.api.throttling import WriteRateThrottle
from scheduler_app.cancellation import CancelOutcome
from scheduler_app.exceptions import SendLaneNotCancellable
from scheduler_app.models import Job, SendBatch
from scheduler_app.sends import batches

#: Largest primary key a BigAutoField holds; larger ids cannot exist.
MAX_ID = 2**63 - 1

Status = Job.Status


def document(**kwargs: Any) -> Any:
    """Return extend_schema(**kwargs) built on drf-spectacular's AutoSchema.

    extend_schema() extends REST_FRAMEWORK['DEFAULT_SCHEMA_CLASS'], which
    projects leave as DRF's own; seeding the method's schema makes these
    views document themselves whatever the project's settings say.
    """

    def decorator(method: Any) -> Any:
        if not hasattr(method, "kwargs"):
            method.kwargs = {}
        method.kwargs.setdefault("schema", AutoSchema)
        return extend_schema(**kwargs)(method)

    return decorator


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


NOT_AUTHENTICATED = _error("Not authenticated (no or invalid credentials).")
NOT_FOUND = _error("No such job, or not one of yours.")
FORBIDDEN = _error("CSRF check failed (session authentication only).")
THROTTLED = _error("Too many write requests; the Retry-After header says when to try again.")


class SchedulerViewSet(viewsets.GenericViewSet):
    """The base of scheduler_app's API viewsets: one policy, whatever the project's defaults.

    Token (when ``rest_framework.authtoken`` is installed) and session
    authentication, authenticated users only, writes throttled per user,
    JSON only (JSONOnlyNegotiation), errors in the format of scheduler_app.api.errors, and
    drf-spectacular's schema inspector.
    """

    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]
    throttle_classes = [WriteRateThrottle]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JSONOnlyNegotiation
    parser_classes = [JSONParser]
    schema = AutoSchema()

    def get_authenticators(self) -> list[Any]:
        # TokenAuthentication queries the Token model, which exists only when
        # its app is installed; without it a "Token" header would be a 500.
        # Token comes first so that an anonymous request gets 401 with a
        # WWW-Authenticate header, not a 403.
        classes = self.authentication_classes
        if not apps.is_installed("rest_framework.authtoken"):
            classes = [
                cls for cls in classes if not issubclass(cls, authentication.TokenAuthentication)
            ]
        return [cls() for cls in classes]

    def get_exception_handler(self) -> Any:
        return exception_handler

    def object_id(self) -> int:
        """Return the URL's object id as an int; 404 for anything that cannot be an id."""
        raw = str(self.kwargs.get(self.lookup_url_kwarg or self.lookup_field, ""))
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 19 or int(raw) > MAX_ID:
            raise exceptions.NotFound()
        return int(raw)

    def absolute_url(self, name: str, *args: Any) -> str:
        """Return the absolute URL of the API route ``name`` (in this request's namespace)."""
        match = self.request.resolver_match
        namespace = match.namespace + ":" if match and match.namespace else ""
        return self.request.build_absolute_uri(reverse(namespace + name, args=args))


#: What DRF's cursors are made of (base64); the schema states it, the server checks the rest.
CURSOR_PATTERN = "^[A-Za-z0-9+/]*={0,2}$"


class JobCursorPagination(CursorPagination):
    """Newest first; a stable cursor however many jobs are added meanwhile."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200
    invalid_cursor_message = "Invalid cursor."

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= self.max_page_size:
            raise exceptions.ValidationError(
                {
                    self.page_size_query_param: [
                        "Must be an integer from 1 to %s." % self.max_page_size
                    ]
                }
            )
        return int(raw)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"].update(minimum=1, maximum=self.max_page_size)
            elif parameter["name"] == self.cursor_query_param:
                parameter["description"] = (
                    "Opaque: pass on the `cursor` of a `next` or `previous` link as it is. "
                    "Its content may change between releases; a value the server did not "
                    "issue is a 400."
                )
                parameter["schema"]["pattern"] = CURSOR_PATTERN
        return parameters

    def decode_cursor(self, request: Request) -> Any:
        raw = request.query_params.get(self.cursor_query_param)
        if raw is not None and not re.fullmatch(CURSOR_PATTERN, raw):
            raise exceptions.ValidationError(
                {self.cursor_query_param: [self.invalid_cursor_message]}
            )
        try:
            cursor = super().decode_cursor(request)
        except exceptions.NotFound:
            cursor = None
        else:
            position = cursor.position if cursor is not None else None
            if position is None or (
                position.isascii() and position.isdigit() and int(position) <= MAX_ID
            ):
                return cursor
        raise exceptions.ValidationError({self.cursor_query_param: [self.invalid_cursor_message]})


def _utc(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


BatchStatus = SendBatch.Status

CANCEL_CONFLICT = OpenApiResponse(
    JobConflictSerializer,
    description="Too late: the job is running (`already_running`) or has finished "
    "(`already_finished`); or the job is a lane of a send batch (`send_lane`), which only "
    "the batch's cancel (POST batches/{id}/cancel/) stops. Nothing was changed; `job` is "
    "its current state.",
    examples=[
        OpenApiExample(
            "already_running",
            value={
                "error": {
                    "code": "already_running",
                    "message": "Job 42 is already running; it can no longer be cancelled.",
                    "fields": {},
                },
                "job": {"id": 42, "status": "running"},
            },
            response_only=True,
            status_codes=["409"],
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
        OpenApiExample(
            "already_sending",
            value={
                "error": {
                    "code": "already_sending",
                    "message": "Too late to undo: job 42 is already being sent.",
                    "fields": {},
                },
                "job": {"id": 42, "status": "running"},
            },
            response_only=True,
            status_codes=["409"],
        )
    ],
)


class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, SchedulerViewSet):
    """The caller's jobs (all jobs for staff with scheduler_app.change_job)."""

    serializer_class = JobSerializer
    pagination_class = JobCursorPagination
    # Any one path segment reaches the view, which answers 404 in the API's
    # format for what cannot be an id (DRF's default also stops at dots).
    lookup_value_regex = "[^/]+"
    queryset = Job.objects.none()  # the real one depends on the user: get_queryset()

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return Job.objects.none()
        return visible_jobs(self.request.user)

    @document(
        summary="List jobs",
        description="The caller's jobs, newest first, in pages of `page_size` (default 50, "
        "at most 200). Follow `next` for the following page. Time filters take ISO 8601 "
        "date-times; a time without an offset is UTC. `*_after` includes the given time, "
        "`*_before` excludes it.",
        parameters=[JobFilterSerializer],
        responses={
            200: JobSerializer(many=True),
            400: _error("Invalid filter or page parameter; `fields` names it."),
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
        job = self.get_queryset().filter(pk=self.object_id()).first()
        if job is None:
            raise exceptions.NotFound()
        return Response(JobSerializer(job).data)

    @document(
        summary="Cancel a job",
        description="Cancel a pending job. Exactly one of a cancel and a worker's claim wins; "
        "the response says which. Repeating a successful cancel returns 200 with "
        '`"outcome": "already_cancelled"`. A lane of a send batch (task '
        "`scheduler_app.send_batch`) is never cancelled on its own: cancel its batch.",
        request=None,
        responses={
            200: JobCancelResultSerializer,
            401: NOT_AUTHENTICATED,
            403: FORBIDDEN,
            404: NOT_FOUND,
            409: CANCEL_CONFLICT,
            429: THROTTLED,
        },
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
        responses={
            200: JobCancelResultSerializer,
            401: NOT_AUTHENTICATED,
            403: FORBIDDEN,
            404: NOT_FOUND,
            409: UNDO_CONFLICT,
            429: THROTTLED,
        },
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
                "already being sent." % (job_id, _utc(job.undo_deadline))
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


BATCH_NOT_FOUND = _error("No such batch, or not one of yours.")
BATCH_CONFLICT = OpenApiResponse(
    BatchConflictSerializer,
    description="The batch's state does not allow this (`invalid_state`), or it has "
    "finished (`already_finished`). Nothing was changed; `batch` is its current state.",
)
BATCH_UNDO_CONFLICT = OpenApiResponse(
    BatchUndoConflictSerializer,
    description="Too late to undo: a lane has started sending (`already_sending`) or the "
    "send has finished (`already_finished`); or the batch is a draft or paused "
    "(`invalid_state`). Nothing was changed; `sent` and `total` say how far it got.",
    examples=[
        OpenApiExample(
            "already_sending",
            value={
                "error": {
                    "code": "already_sending",
                    "message": "Too late to undo: batch 7 is already being sent (120 of 5000 "
                    "sent).",
                    "fields": {},
                },
                "sent": 120,
                "total": 5000,
                "batch": {"id": 7, "status": "sending"},
            },
            response_only=True,
            status_codes=["409"],
        )
    ],
)


class BatchViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, SchedulerViewSet):
    """The caller's send batches (all for staff with scheduler_app.change_sendbatch)."""

    serializer_class = BatchSerializer
    pagination_class = JobCursorPagination
    lookup_value_regex = "[^/]+"
    queryset = SendBatch.objects.none()  # the real one depends on the user

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):
            return SendBatch.objects.none()
        return visible_batches(self.request.user)

    def get_batch(self) -> SendBatch:
        """Return the URL's batch if the caller may see it; 404 otherwise."""
        batch = self.get_queryset().filter(pk=self.object_id()).first()
        if batch is None:
            raise exceptions.NotFound()
        return batch

    def refreshed(self, batch: SendBatch) -> SendBatch:
        """Return the batch as stored now; 404 if it was deleted meanwhile."""
        stored = SendBatch.objects.filter(pk=batch.pk).first()
        if stored is None:
            raise exceptions.NotFound()
        return stored

    @document(
        summary="List send batches",
        description="The caller's send batches, newest first, in pages of `page_size` "
        "(default 50, at most 200). Follow `next` for the following page.",
        responses={
            200: BatchSerializer(many=True),
            400: _error("Invalid page parameter; `fields` names it."),
            401: NOT_AUTHENTICATED,
        },
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(BatchSerializer(page, many=True).data)

    @document(
        summary="Retrieve a send batch",
        description="One batch: its status and progress (`total`, `sent`, `failed`, "
        "`skipped`, `remaining`, `percent`), `undo_deadline` and `status_reason`.",
        responses={200: BatchSerializer, 401: NOT_AUTHENTICATED, 404: BATCH_NOT_FOUND},
    )
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(BatchSerializer(self.get_batch()).data)

    @document(
        summary="Pause a send batch",
        description="Pause a scheduled or sending batch; its lanes stop before their next "
        "chunk. `reason` is required. Pausing a paused batch again changes nothing and "
        'returns 200 with `"outcome": "already_paused"`.',
        request=BatchPauseSerializer,
        responses={
            200: BatchResultSerializer,
            400: _error("Invalid body; `fields` names the field (e.g. a missing `reason`)."),
            401: NOT_AUTHENTICATED,
            403: FORBIDDEN,
            404: BATCH_NOT_FOUND,
            409: BATCH_CONFLICT,
            429: THROTTLED,
        },
    )
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        batch = self.get_batch()
        body = BatchPauseSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if batches.pause_batch(batch.pk, by=request.user, reason=body.validated_data["reason"]):
            return self._result("paused", batch)
        batch = self.refreshed(batch)
        if batch.status == BatchStatus.PAUSED:
            return self._result("already_paused", batch)
        raise self._conflict(
            batch,
            "Only a scheduled or sending batch can be paused; batch %s is %s."
            % (batch.pk, batch.status),
        )

    @document(
        summary="Resume a paused send batch",
        description="Resume a paused batch exactly where it stopped. Needs the "
        "`scheduler_app.resume_sendbatch` permission (403 without it).",
        request=None,
        responses={
            200: BatchResultSerializer,
            401: NOT_AUTHENTICATED,
            403: _error("No permission to resume sends, or the CSRF check failed."),
            404: BATCH_NOT_FOUND,
            409: BATCH_CONFLICT,
            429: THROTTLED,
        },
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        batch = self.get_batch()  # 404 before 403: nothing leaks about others' batches
        if not request.user.has_perm(RESUME_BATCHES):
            raise exceptions.PermissionDenied("You do not have permission to resume sends.")
        try:
            batches.resume_batch(batch.pk, by=request.user)
        except SendBatch.DoesNotExist as exc:
            raise exceptions.NotFound() from exc
        except batches.BatchStateError as exc:
            raise self._conflict(
                self.refreshed(batch),
                "Only a paused batch can be resumed; batch %s is %s."
                % (batch.pk, self.refreshed(batch).status),
            ) from exc
        return self._result("resumed", batch)

    @document(
        summary="Cancel a send batch",
        description="Cancel a batch that has not finished; its pending lanes are cancelled "
        "and recipients already sent stay recorded. Repeating a successful cancel returns "
        '200 with `"outcome": "already_cancelled"`.',
        request=None,
        responses={
            200: BatchResultSerializer,
            401: NOT_AUTHENTICATED,
            403: FORBIDDEN,
            404: BATCH_NOT_FOUND,
            409: BATCH_CONFLICT,
            429: THROTTLED,
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        batch = self.get_batch()
        if batches.cancel_batch(batch.pk, by=request.user, reason="Cancelled through the API."):
            return self._result("cancelled", batch)
        batch = self.refreshed(batch)
        if batch.status == BatchStatus.CANCELLED:
            return self._result("already_cancelled", batch)
        raise self._conflict(
            batch,
            "Batch %s has already finished (%s); there is nothing to cancel."
            % (batch.pk, batch.status),
            code="already_finished",
        )

    @document(
        summary="Undo a scheduled send batch",
        description='Cancel a scheduled batch before any lane starts sending ("undo send"); '
        "its lanes are cancelled. Too late returns 409 with how far the send got. Repeating "
        'a successful undo returns 200 with `"outcome": "already_cancelled"`.',
        request=None,
        responses={
            200: BatchResultSerializer,
            401: NOT_AUTHENTICATED,
            403: FORBIDDEN,
            404: BATCH_NOT_FOUND,
            409: BATCH_UNDO_CONFLICT,
            429: THROTTLED,
        },
    )
    @action(detail=True, methods=["post"])
    def undo(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        batch = self.get_batch()
        try:
            outcome = batches.undo_batch(batch.pk, by=request.user)
        except SendBatch.DoesNotExist as exc:
            raise exceptions.NotFound() from exc
        if outcome.cancelled:
            return self._result("cancelled", batch)
        batch = self.refreshed(batch)
        if outcome.status == BatchStatus.CANCELLED and batch.started_at is None:
            return self._result("already_cancelled", batch)
        progress = "%s of %s sent" % (
            outcome.sent,
            outcome.total if outcome.total is not None else "?",
        )
        if outcome.status == BatchStatus.CANCELLED:  # by a cancel, after lanes had started
            code = "already_sending"
            message = (
                "Too late to undo: batch %s was cancelled after it had started sending (%s)."
                % (batch.pk, progress)
            )
        elif outcome.status in (BatchStatus.COMPLETED, BatchStatus.FAILED):
            code = "already_finished"
            message = "Too late to undo: batch %s has already been sent (%s, %s)." % (
                batch.pk,
                outcome.status,
                progress,
            )
        elif outcome.status == BatchStatus.SENDING or batch.started_at is not None:
            code = "already_sending"
            message = "Too late to undo: batch %s is already being sent (%s)." % (
                batch.pk,
                progress,
            )
        else:
            code = "invalid_state"
            message = "Only a scheduled batch can be undone; batch %s is %s." % (
                batch.pk,
                outcome.status,
            )
        raise self._conflict(batch, message, code=code, sent=outcome.sent, total=outcome.total)

    def _result(self, outcome: str, batch: SendBatch) -> Response:
        return Response({"outcome": outcome, "batch": BatchSerializer(self.refreshed(batch)).data})

    def _conflict(
        self, batch: SendBatch, message: str, *, code: str = "invalid_state", **extra: Any
    ) -> Conflict:
        return Conflict(message, code=code, extra={**extra, "batch": BatchSerializer(batch).data})


class MessageViewSet(SchedulerViewSet):
    """Schedule one email, sent by a worker after an undo window unless undone."""

    serializer_class = MessageSerializer

    @document(
        summary="Schedule a message with an undo window",
        description="Schedule one email to `to`, sent by a worker once `undo_seconds` "
        "(default 10, at most 3600) have passed. Undo it before `undo_deadline` with "
        "`POST undo_url` (jobs/{id}/undo/). Needs the `scheduler_app.send_message` "
        "permission (403 without it).",
        request=MessageSerializer,
        responses={
            201: MessageScheduledSerializer,
            400: _error("Invalid body; `fields` names each invalid field."),
            401: NOT_AUTHENTICATED,
            403: _error("No permission to send messages, or the CSRF check failed."),
            429: THROTTLED,
        },
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if not request.user.has_perm(SEND_MESSAGES):
            raise exceptions.PermissionDenied(
                "You do not have permission to send messages (%s)." % SEND_MESSAGES
            )
        body = MessageSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        job = batches.send_message(
            data["to"],
            data["subject"],
            data["text"],
            html=data["html"],
            undo_window=dt.timedelta(seconds=data["undo_seconds"]),
            owner=request.user,
        )
        return Response(
            {
                "job": job.pk,
                "undo_deadline": _utc(job.undo_deadline),
                "undo_url": self.absolute_url("job-undo", job.pk),
            },
            status=201,
        )


@csrf_exempt  # it changes nothing; a session POST gets the JSON 404, not a CSRF page
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """Answer 404 in the API's error format (paths below a router prefix that match no route)."""
    return JsonResponse(error_body("not_found", "Not found."), status=404)


class ApiRootView(APIView):
    """The API's front door: a link to each endpoint, the schema and its docs page.

    Public, like the schema: it lists routes, not anyone's data.
    """

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JSONOnlyNegotiation
    schema = None  # not part of the OpenAPI document: it describes nothing a client calls
    #: Each key and its URL name (below the API's namespace).
    links = {
        "jobs": "job-list",
        "batches": "batch-list",
        "messages": "message-list",
        "suppressions": "suppression-list",
        "schema": "schema",
        "docs": "docs",
    }

    def get_exception_handler(self) -> Any:
        return exception_handler

    def get(self, request: Request) -> Response:
        match = request.resolver_match
        namespace = match.namespace + ":" if match and match.namespace else ""
        return Response(
            {
                key: request.build_absolute_uri(reverse(namespace + name))
                for key, name in self.links.items()
            }
        )


class SchemaView(SpectacularAPIView):
    """The OpenAPI 3 schema of the routes it is given, at the prefix it is mounted under.

    Public (it describes the API, not anyone's data). Give it the router's
    ``patterns``; it serves YAML, or JSON with ``?format=json``.
    """

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    #: The path of this view below the API's prefix (see urls.py).
    route = "schema/"

    def get_exception_handler(self) -> Any:
        return exception_handler

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        prefix = request.path_info.removesuffix(self.route).rstrip("/")
        self.custom_settings = {
            "TITLE": "scheduler_app API",
            "DESCRIPTION": "Jobs: list, retrieve, cancel, and undo inside an undo window. "
            "Send batches: list, progress, pause, resume, cancel and undo. Messages: "
            "schedule one email with an undo window. "
            "Authenticate with `Authorization: Token <key>` or a session. Errors have one "
            'format: `{"error": {"code": ..., "message": ..., "fields": {...}}}`.',
            "VERSION": "1",
            # The routes are given without the project's prefix; put it back.
            "SCHEMA_PATH_PREFIX": "/",
            "SCHEMA_PATH_PREFIX_INSERT": prefix,
            "POSTPROCESSING_HOOKS": [
                "drf_spectacular.hooks.postprocess_schema_enums",
                "scheduler_app.api.schema_hooks.blank_text_any_of",
            ],
            **(self.custom_settings or {}),
        }
        return super().get(request, *args, **kwargs)


DOCS_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>scheduler_app API</title>
<link rel="stylesheet" href="%(css)s">
</head>
<body>
<div id="swagger-ui"><noscript>The schema is at <a href="%(url)s">%(url)s</a>.</noscript></div>
<script src="%(js)s"></script>
<script>
const csrfToken = (document.cookie.match(/(?:^|; )csrftoken=([^;]*)/) || [])[1];
SwaggerUIBundle({
  url: %(json_url)s,
  dom_id: "#swagger-ui",
  persistAuthorization: true,
  // Session users: Django's CSRF check wants the token on unsafe requests.
  requestInterceptor: (request) => {
    if (csrfToken) { request.headers["X-CSRFToken"] = decodeURIComponent(csrfToken); }
    return request;
  },
});
</script>
</body>
</html>
"""


class DocsView(View):
    """A Swagger UI page for the schema served next to it.

    Its assets are static files of ``drf_spectacular_sidecar`` (add it to
    INSTALLED_APPS; check scheduler_app.W090 says so), so the page loads
    nothing from the internet.
    """

    http_method_names = ["get", "head"]
    #: The schema's path relative to this page (see urls.py).
    schema_url = "../schema/?format=json"
    #: Swagger UI's files among the static files of drf_spectacular_sidecar.
    assets = "drf_spectacular_sidecar/swagger-ui-dist/"

    def get(self, request: HttpRequest) -> HttpResponse:
        json_url = json.dumps(self.schema_url).replace("<", "\\u003c")
        return HttpResponse(
            DOCS_PAGE
            % {
                "url": escape(self.schema_url),
                "json_url": json_url,
                "css": escape(static(self.assets + "swagger-ui.css")),
                "js": escape(static(self.assets + "swagger-ui-bundle.js")),
            }
        )
