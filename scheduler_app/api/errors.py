"""One error format for every API response that is not a success.

::

    {"error": {"code": "already_running", "message": "...", "fields": {}}}

``code`` is stable and machine-readable; ``message`` is for people;
``fields`` maps each invalid field (request body or query parameter) to
its messages, and is empty for errors that are not about a field. A
conflict may carry the object's current state next to ``error`` (e.g.
``"job": {...}``).

The API views use exception_handler() directly (see viewsets.SchedulerViewSet),
so a project's REST_FRAMEWORK['EXCEPTION_HANDLER'] is neither needed nor
affected.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler

from scheduler_app.exceptions import ValidationError as SchedulerValidationError


class Conflict(exceptions.APIException):
    """The request is valid but the object's state does not allow it (409).

    ``extra`` is added to the response next to ``error``, e.g. the object's
    current state: ``{"job": {...}}``.
    """

    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state of the object."
    default_code = "conflict"

    def __init__(self, message: str, *, code: str, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message, code=code)
        self.extra = extra or {}


class BodyTooLarge(exceptions.APIException):
    """The request body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE (413)."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE."
    default_code = "too_large"


def error_body(code: str, message: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return the body of an error response."""
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Turn an exception into an error response in the one format; None lets it propagate (500)."""
    if isinstance(exc, Http404):
        # Never echo Http404's text: it may name the model or the lookup.
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, SchedulerValidationError):
        exc = _validation_error_from(exc)
    elif isinstance(exc, RequestDataTooBig):
        exc = BodyTooLarge(
            "The body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE (%s bytes)."
            % settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        )
    if not isinstance(exc, exceptions.APIException):
        return None
    # DRF's handler sets WWW-Authenticate and Retry-After and marks an
    # ATOMIC_REQUESTS transaction for rollback; only the body is ours.
    response = drf_exception_handler(exc, context)
    assert response is not None
    response.data = {**_body_for(exc), **getattr(exc, "extra", {})}
    return response


def _validation_error_from(exc: SchedulerValidationError) -> exceptions.ValidationError:
    error = exceptions.ValidationError(exc.message, code=exc.code)
    error.scheduler_code = exc.code  # type: ignore[attr-defined]
    return error


def _body_for(exc: exceptions.APIException) -> dict[str, Any]:
    if isinstance(exc, exceptions.ValidationError):
        return _validation_body(exc)
    detail = exc.detail
    code = getattr(detail, "code", None) or exc.default_code
    return error_body(str(code), _text(detail))


def _validation_body(exc: exceptions.ValidationError) -> dict[str, Any]:
    detail = exc.detail
    code = getattr(exc, "scheduler_code", "invalid")
    if not isinstance(detail, dict):
        return error_body(code, _text(detail))
    fields = {name: _plain(errors) for name, errors in detail.items()}
    non_field = fields.pop(api_settings.NON_FIELD_ERRORS_KEY, None)
    parts = [_text(non_field)] if non_field else []
    parts.extend("%s: %s" % (name, _text(errors)) for name, errors in fields.items())
    return error_body(code, " ".join(_sentence(part) for part in parts) or "Invalid input.", fields)


def _plain(detail: Any) -> Any:
    """Return ``detail`` with ErrorDetail strings turned into plain ones."""
    if isinstance(detail, dict):
        return {str(key): _plain(value) for key, value in detail.items()}
    if isinstance(detail, list):
        return [_plain(item) for item in detail]
    return str(detail)


def _text(detail: Any) -> str:
    """Return the first message found in ``detail`` (a string, list or dict of them)."""
    if isinstance(detail, dict):
        detail = next(iter(detail.values()), "")
    if isinstance(detail, list):
        return _text(detail[0]) if detail else ""
    return str(detail)


def _sentence(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else text + "."
