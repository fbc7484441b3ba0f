"""Form fields that let people type lists and small objects one line at a time, not JSON."""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms

from scheduler_app.sends.dry_run import address_problem

#: A context name a template can read as ``{{ name }}``.
TEMPLATE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
#: How a value that is JSON, not text, starts.
JSON_OPENERS = ('"', "[", "{")


class AddressListField(forms.CharField):
    """A list of email addresses, typed one a line; blank lines are ignored."""

    widget = forms.Textarea(attrs={"rows": 3})

    def prepare_value(self, value: Any) -> Any:
        return "\n".join(value) if isinstance(value, list) else value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        text = super().to_python(value)
        return [line.strip() for line in text.splitlines() if line.strip()]

    def validate(self, value: list[str]) -> None:
        super().validate(value)
        for number, address in enumerate(value, 1):
            if "\x00" in address:
                continue  # no text column stores it: the form's clean_seed_list says so
            problem = address_problem(address)
            if problem:
                raise forms.ValidationError("Line %s, %s: %s" % (number, address, problem))


def _exact_json(text: str) -> tuple[bool, Any]:
    """Return (True, value) if ``text`` is a JSON number, true, false or null written the way
    JSON writes it back (``3.50`` and ``007`` are not: they stay text); else (False, None)."""
    try:
        value = json.loads(text)
    except ValueError:
        return False, None
    return json.dumps(value) == text, value


def format_value(value: Any) -> str:
    """Return ``value`` as NamedValuesField reads it back: text bare where it reads back as
    the same text, anything else as JSON."""
    if isinstance(value, str):
        bare = (
            value == value.strip()
            and "\n" not in value
            and "\r" not in value
            and not value.startswith(JSON_OPENERS)
            and not _exact_json(value)[0]
        )
        if bare:
            return value
    return json.dumps(value, ensure_ascii=False)


class NamedValuesField(forms.CharField):
    """A JSON object typed one ``name = value`` a line; blank lines are ignored.

    A value is text (spaces around it dropped), unless it is a JSON number, true, false
    or null as JSON writes it, or starts with ``"``, ``[`` or ``{``: then it is read as
    JSON (quote text that would read otherwise: ``zip = "75001"``).
    """

    widget = forms.Textarea(attrs={"rows": 3})

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, dict):
            return "\n".join("%s = %s" % (name, format_value(v)) for name, v in value.items())
        return value

    def to_python(self, value: Any) -> dict[str, Any]:  # type: ignore[override]
        text = super().to_python(value)
        parsed: dict[str, Any] = {}
        lines: dict[str, int] = {}
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            shown = line.strip()
            name, equals, typed = line.partition("=")
            name, typed = name.strip(), typed.strip()
            if not equals or not name:
                raise forms.ValidationError(
                    'Line %s, %s: write it as "name = value".' % (number, shown)
                )
            if not TEMPLATE_NAME.match(name):
                raise forms.ValidationError(
                    "Line %s, %s: '%s' is not a name a template can use (letters, digits and "
                    "underscores, starting with a letter)." % (number, shown, name)
                )
            if name in lines:
                raise forms.ValidationError(
                    "Line %s, %s: %s is already set on line %s."
                    % (number, shown, name, lines[name])
                )
            lines[name] = number
            parsed[name] = self._value(number, shown, typed)
        return parsed

    def _value(self, number: int, shown: str, typed: str) -> Any:
        if typed.startswith(JSON_OPENERS):
            try:
                return json.loads(typed)
            except json.JSONDecodeError as exc:
                raise forms.ValidationError(
                    "Line %s, %s: the value starts like JSON but is not valid JSON (put it in "
                    "double quotes to mean the text): %s." % (number, shown, exc.msg)
                ) from exc
        exact, value = _exact_json(typed)
        return value if exact else typed
