"""Content negotiation for the API: JSON only, and a format it does not speak is a 406."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from rest_framework import exceptions
from rest_framework.negotiation import DefaultContentNegotiation


class JSONOnlyNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, except that ``?format=`` naming a format no renderer gives is
    406 Not Acceptable, as an Accept header would be, instead of DRF's 404 (which says
    that a route that exists does not)."""

    def filter_renderers(self, renderers: list[Any], format: str) -> list[Any]:
        try:
            return super().filter_renderers(renderers, format)
        except Http404:
            raise exceptions.NotAcceptable(
                "Unsupported format %r; this API answers in JSON only." % format
            ) from None
