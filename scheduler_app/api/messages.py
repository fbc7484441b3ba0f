"""The messages endpoint: schedule one email, sent by a worker after an undo window
unless undone (POST jobs/{id}/undo/)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response

from scheduler_app.api.permissions import SEND_MESSAGES
from scheduler_app.api.serializers import MessageScheduledSerializer, MessageSerializer
from scheduler_app.api.viewsets import (
    NOT_AUTHENTICATED,
    THROTTLED,
    SchedulerViewSet,
    document,
    error_response,
    utc_text,
)
from scheduler_app.sends import batches


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
            400: error_response("Invalid body; `fields` names each invalid field."),
            401: NOT_AUTHENTICATED,
            403: error_response("No permission to send messages, or the CSRF check failed."),
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
            outbox=False,  # the answer gives the job's id: never wait for a business commit
        )
        return Response(
            {
                "job": job.pk,
                "undo_deadline": utc_text(job.undo_deadline),
                "undo_url": self.absolute_url("job-undo", job.pk),
            },
            status=201,
        )
