"""What every viewset of the API shares: its policy (SchedulerViewSet), the listing and
retrieving of what the caller may see (VisibleObjectsViewSet), and the pieces of their
OpenAPI documentation that repeat from one operation to the next."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from django.apps import apps
from django.db.models import Model, QuerySet
from django.urls import reverse
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import authentication, exceptions, mixins, viewsets
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer

from scheduler_app.api.authentication import TokenAuthentication
from scheduler_app.api.errors import error_body, exception_handler
from scheduler_app.api.negotiation import JSONOnlyNegotiation
from scheduler_app.api.pagination import MAX_ID, NewestFirstPagination
from scheduler_app.api.parsers import JSONParser
from scheduler_app.api.serializers import ErrorSerializer
from scheduler_app.api.throttling import WriteRateThrottle


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


def error_response(description: str) -> OpenApiResponse:
    """Return the documentation of an error response (the one error format) for ``description``."""
    return OpenApiResponse(ErrorSerializer, description=description)


NOT_AUTHENTICATED = error_response("Not authenticated (no or invalid credentials).")
FORBIDDEN = error_response("CSRF check failed (session authentication only).")
THROTTLED = error_response(
    "Too many write requests; the Retry-After header says when to try again."
)


def action_responses(
    ok: Any,
    *,
    not_found: OpenApiResponse,
    conflict: OpenApiResponse,
    forbidden: OpenApiResponse = FORBIDDEN,
    invalid: OpenApiResponse | None = None,
) -> dict[int, Any]:
    """Return the documented responses of a POST action on one object: ``ok`` (200), and
    the errors every such action may answer (``invalid``, 400, where it takes a body)."""
    responses = {
        200: ok,
        400: invalid,
        401: NOT_AUTHENTICATED,
        403: forbidden,
        404: not_found,
        409: conflict,
        429: THROTTLED,
    }
    return {status: response for status, response in responses.items() if response is not None}


def conflict_example(code: str, message: str, **state: Any) -> OpenApiExample:
    """Return the documented example of a 409 with ``code``, ``message`` and the object's
    ``state`` next to the error."""
    return OpenApiExample(
        code,
        value={**error_body(code, message), **state},
        response_only=True,
        status_codes=["409"],
    )


def utc_text(value: dt.datetime) -> str:
    """Return ``value`` in UTC, ISO 8601 with a ``Z``, as the API's responses write times."""
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


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


M = TypeVar("M", bound=Model)


class VisibleObjectsViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, SchedulerViewSet, Generic[M]
):
    """List and retrieve the objects ``visible(user)`` returns, newest first.

    A subclass sets ``queryset`` to its model's ``objects.none()`` (the real one depends
    on the user) and ``visible``.
    """

    pagination_class = NewestFirstPagination
    # Any one path segment reaches the view, which answers 404 in the API's
    # format for what cannot be an id (DRF's default also stops at dots).
    lookup_value_regex = "[^/]+"
    #: The objects a user may see: ``visible(user)``.
    visible: Callable[[Any], QuerySet]

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return self.queryset.none()
        return self.visible(self.request.user)

    def visible_object(self) -> M:
        """Return the URL's object if the caller may see it; 404 otherwise."""
        found = self.get_queryset().filter(pk=self.object_id()).first()
        if found is None:
            raise exceptions.NotFound()
        return found
