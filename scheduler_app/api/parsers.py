"""The API's request body parser."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, parsers


class JSONParser(parsers.JSONParser):
    """DRF's JSONParser; JSON nested deeper than Python's recursion limit is a 400, not a 500."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            # json recurses once per level of nesting; DRF catches only ValueError.
            raise exceptions.ParseError("JSON parse error - it is nested too deeply.") from exc
