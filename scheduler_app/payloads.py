"""JSON values as the database stores them: what a payload, a seed list or a cursor may hold.

Below the models and the registry, so that whatever takes such a value (schedule(), a
handler's ``cursor.advance()``) refuses it where it is given, not when it is written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from scheduler_app.exceptions import InvalidPayload


def check_payload(payload: Any, *, name: str = "payload") -> Any:
    """Return the payload as it will read back from the database, or raise InvalidPayload.

    ``name`` is what the messages call it (another JSON column: "seed list").
    """
    try:
        text = json.dumps(payload, allow_nan=False)
    except ValueError as exc:
        raise InvalidPayload(
            "The %s contains NaN or Infinity, which JSON cannot represent." % name
        ) from exc
    except TypeError as exc:
        # The first line only: newer Pythons add notes on where the value sits.
        raise InvalidPayload(
            "The %s is not JSON-serialisable: %s." % (name, str(exc).splitlines()[0])
        ) from exc
    stored = json.loads(text)
    # PostgreSQL's jsonb refuses \u0000; SQLite would store it. The walk runs
    # only when the text has the escape (it may also be an escaped backslash).
    if "\\u0000" in text and _contains(stored, _has_nul):
        raise InvalidPayload(
            "The %s contains a NUL character (\\x00), which the database cannot store." % name
        )
    # PostgreSQL's json refuses lone surrogates (json.dumps escapes every surrogate as \udXXX).
    if "\\ud" in text and _contains(stored, has_lone_surrogate):
        raise InvalidPayload(
            "The %s contains text that is not valid Unicode (a surrogate code point), "
            "which the database cannot store." % name
        )
    return stored


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate code point, which UTF-8 cannot encode, so
    no database's text can hold it (JSON's ``\\ud800`` escape gives one)."""
    return any("\ud800" <= char <= "\udfff" for char in text)


def _has_nul(text: str) -> bool:
    return "\x00" in text


def _contains(value: Any, found: Callable[[str], bool]) -> bool:
    """Return whether ``found`` is true of any string in ``value``, its keys included."""
    if isinstance(value, str):
        return found(value)
    if isinstance(value, dict):
        return any(_contains(key, found) or _contains(item, found) for key, item in value.items())
    if isinstance(value, list):
        return any(_contains(item, found) for item in value)
    return False
