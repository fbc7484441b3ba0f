"""The API of the suppression list: owners list and add suppressions for their own audiences.

A user's audiences are those of the send batches they own; staff holding
``scheduler_app.add_suppression`` see every scope and may suppress for all mail.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions, mixins
from rest_framework.request import Request
from rest_framework.response import Response

from scheduler_app.api.pagination import NewestFirstPagination
from scheduler_app.api.permissions import (
    ADD_ANY_SUPPRESSION,
    acts_on_all,
    own_audiences,
    visible_suppressions,
)
from scheduler_app.api.serializers import SuppressionCreateSerializer, SuppressionSerializer
from scheduler_app.api.viewsets import (
    FORBIDDEN,
    NOT_AUTHENTICATED,
    THROTTLED,
    SchedulerViewSet,
    document,
    error_response,
)
from scheduler_app.feedback.suppressions import normalise, suppress
from scheduler_app.models import Suppression


class SuppressionViewSet(mixins.ListModelMixin, SchedulerViewSet):
    """Suppressions in the caller's audiences: list them, add one."""

    serializer_class = SuppressionSerializer
    pagination_class = NewestFirstPagination

    def get_queryset(self) -> Any:
        queryset = visible_suppressions(self.request.user)
        address = self.request.query_params.get("address")
        if address is not None:
            queryset = queryset.filter(address=normalise(address.replace("\x00", "")))
        return queryset

    @document(
        summary="List suppressions in your audiences",
        parameters=[
            OpenApiParameter(
                "address", str, description="Only this address (compared lower-cased)."
            )
        ],
        responses={
            200: SuppressionSerializer(many=True),
            400: error_response("Invalid cursor or page_size."),
            401: NOT_AUTHENTICATED,
        },
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @document(
        summary="Suppress an address in one of your audiences",
        description="Idempotent: an address already suppressed in that scope answers 200 "
        "with the existing row (its first reason kept); a new one 201.",
        request=SuppressionCreateSerializer,
        responses={
            200: SuppressionSerializer,
            201: SuppressionSerializer,
            400: error_response("Invalid body, or a scope that is not one of your audiences."),
            401: NOT_AUTHENTICATED,
            403: FORBIDDEN,
            429: THROTTLED,
        },
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = SuppressionCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        scope = data["scope"].strip()
        if not acts_on_all(request.user, ADD_ANY_SUPPRESSION):
            mine = own_audiences(request.user)
            if scope not in mine:
                raise exceptions.ValidationError(
                    {
                        "scope": [
                            "You can add suppressions only for the audiences of your send "
                            "batches (%s), not %r." % (", ".join(sorted(mine)) or "none", scope)
                        ]
                    }
                )
        row, created = suppress(
            data["address"],
            reason=data["reason"],
            source=Suppression.Source.API,
            scope=scope,
            by=request.user,
            detail=data["detail"],
        )
        return Response(SuppressionSerializer(row).data, status=201 if created else 200)
