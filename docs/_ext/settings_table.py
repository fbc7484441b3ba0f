"""The ``scheduler-settings`` directive: the settings reference, generated from the code.

Each row is a key of ``scheduler_app.conf.DEFAULTS``, its default (``repr``), its
description from ``DESCRIPTIONS`` (Markdown) and the system check ids that refuse an
invalid value, found by running the checks with invalid values. The table cannot
drift from the code, because it is the code.
"""

from __future__ import annotations

from typing import Any

import django
from django.conf import settings
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

# Values no setting accepts, each tried alone; a check that fires for one names the key.
# 10**30 is above every numeric setting's bound (check E007, scheduler_app.bounds).
INVALID_VALUES: tuple[Any, ...] = (
    object(),
    -1,
    10**30,
    "not a valid value",
    [object()],
    {"x": object()},
)


def _setup_django() -> None:
    if not settings.configured:
        settings.configure(
            INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "scheduler_app"],
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
            USE_TZ=True,
        )
        django.setup()


def _check_ids(key: str) -> list[str]:
    """Return the scheduler_app check ids that refuse some invalid value of ``key``."""
    from django.core.checks import run_checks
    from django.test import override_settings

    def ids(scheduler_app: dict[str, Any]) -> set[str]:
        with override_settings(SCHEDULER_APP=scheduler_app):
            try:
                messages = run_checks()
            except Exception:
                return set()  # a check that cannot cope with this value says nothing here
        return {m.id for m in messages if m.id and m.id.startswith("scheduler_app.")}

    baseline = ids({})
    found: set[str] = set()
    for value in INVALID_VALUES:
        found |= ids({key: value}) - baseline
    return sorted(found)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _code(value: Any) -> str:
    text = repr(value)
    fence = "``" if "`" in text else "`"
    return "%s%s%s" % (fence, text, fence)


class SettingsTable(SphinxDirective):
    """Render DEFAULTS and DESCRIPTIONS as a Markdown table, parsed like the page around it."""

    has_content = False

    def run(self) -> list[Any]:
        _setup_django()
        from scheduler_app.conf import DEFAULTS, DESCRIPTIONS

        lines = ["| Key | Default | Meaning | Checks |", "| --- | --- | --- | --- |"]
        for key, default in DEFAULTS.items():
            description = DESCRIPTIONS.get(key)
            if description is None:
                raise self.error("scheduler_app.conf.DESCRIPTIONS has no entry for %r." % key)
            checks = ", ".join("`%s`" % check.split(".", 1)[1] for check in _check_ids(key))
            lines.append(
                "| `%s` | %s | %s | %s |"
                % (key, _cell(_code(default)), _cell(description), checks or "—")
            )
        table = nodes.container(classes=["scheduler-settings"])
        self.state.nested_parse(StringList(lines, source="scheduler_app/conf.py"), 0, table)
        return [table]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("scheduler-settings", SettingsTable)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
