"""The send batches endpoints: list the caller's batches and their progress, pause,
resume, cancel, and undo one before any lane starts sending.

Each change is one guarded UPDATE (scheduler_app.sends.batches) on a batch the caller
may see, so the status code always says what happened in the database, whoever raced
the request.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from scheduler_app.api.errors import Conflict
from scheduler_app.api.permissions import RESUME_BATCHES, visible_batches
from scheduler_app.api.serializers import (
    BatchConflictSerializer,
    BatchPauseSerializer,
    BatchResultSerializer,
    BatchSerializer,
    BatchUndoConflictSerializer,
)
from scheduler_app.api.viewsets import (
    NOT_AUTHENTICATED,
    VisibleObjectsViewSet,
    action_responses,
    conflict_example,
    document,
    error_response,
)
from scheduler_app.models import SendBatch
from scheduler_app.sends import batches

BatchStatus = SendBatch.Status

BATCH_NOT_FOUND = error_response("No such batch, or not one of yours.")
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
        conflict_example(
            "already_sending",
            "Too late to undo: batch 7 is already being sent (120 of 5000 sent).",
            sent=120,
            total=5000,
            batch={"id": 7, "status": "sending"},
        )
    ],
)


class BatchViewSet(VisibleObjectsViewSet[SendBatch]):
    """The caller's send batches (all for staff with scheduler_app.change_sendbatch)."""

    serializer_class = BatchSerializer
    queryset = SendBatch.objects.none()  # the real one depends on the user
    visible = staticmethod(visible_batches)

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
            400: error_response("Invalid page parameter; `fields` names it."),
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
        return Response(BatchSerializer(self.visible_object()).data)

    @document(
        summary="Pause a send batch",
        description="Pause a scheduled or sending batch; its lanes stop before their next "
        "chunk. `reason` is required. Pausing a paused batch again changes nothing and "
        'returns 200 with `"outcome": "already_paused"`.',
        request=BatchPauseSerializer,
        responses=action_responses(
            BatchResultSerializer,
            not_found=BATCH_NOT_FOUND,
            conflict=BATCH_CONFLICT,
            invalid=error_response(
                "Invalid body; `fields` names the field (e.g. a missing `reason`)."
            ),
        ),
    )
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        batch = self.visible_object()
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
        responses=action_responses(
            BatchResultSerializer,
            not_found=BATCH_NOT_FOUND,
            conflict=BATCH_CONFLICT,
            forbidden=error_response("No permission to resume sends, or the CSRF check failed."),
        ),
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        batch = self.visible_object()  # 404 before 403: nothing leaks about others' batches
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
        responses=action_responses(
            BatchResultSerializer,
            not_found=BATCH_NOT_FOUND,
            conflict=BATCH_CONFLICT,
        ),
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        batch = self.visible_object()
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
        responses=action_responses(
            BatchResultSerializer,
            not_found=BATCH_NOT_FOUND,
            conflict=BATCH_UNDO_CONFLICT,
        ),
    )
    @action(detail=True, methods=["post"])
    def undo(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        batch = self.visible_object()
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
