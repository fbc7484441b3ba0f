"""The API's pagination: newest first, by an opaque cursor that stays stable however many
objects are added meanwhile."""

from __future__ import annotations

import re
from typing import Any

from rest_framework import exceptions
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request

#: Largest primary key a BigAutoField holds; larger ids cannot exist.
MAX_ID = 2**63 - 1

#: What DRF's cursors are made of (base64); the schema states it, the server checks the rest.
CURSOR_PATTERN = "^[A-Za-z0-9+/]*={0,2}$"


class NewestFirstPagination(CursorPagination):
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
