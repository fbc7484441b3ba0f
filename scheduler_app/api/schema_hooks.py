"""drf-spectacular postprocessing hooks for scheduler_app's OpenAPI schema."""

from __future__ import annotations

from typing import Any

#: The branch drf-spectacular (0.30 and later) adds for a blank value of a text field
#: that has a pattern, a format or a minimum length.
BLANK = {"type": "string", "maxLength": 0}


def blank_text_any_of(result: dict, generator: Any, request: Any, public: bool) -> dict:
    """State "this text, or blank" as ``anyOf``, not ``oneOf``.

    drf-spectacular writes an optional text field that allows blank as ``oneOf: [<the
    text's schema>, <an empty string>]``. When the text's own schema admits the empty
    string too (scheduler_app's text fields only refuse NUL), an empty string matches
    both branches, which ``oneOf`` forbids: the schema would call a blank ``html``
    invalid although the API accepts it.
    """
    _rewrite(result.get("components", {}))
    return result


def _rewrite(node: Any) -> None:
    if isinstance(node, dict):
        branches = node.get("oneOf")
        if isinstance(branches, list) and len(branches) == 2 and branches[1] == BLANK:
            node["anyOf"] = node.pop("oneOf")
        for value in node.values():
            _rewrite(value)
    elif isinstance(node, list):
        for value in node:
            _rewrite(value)
