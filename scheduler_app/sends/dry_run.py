"""Dry-run: everything a send does except sending.

Runs the real audience query, renders every message through the same
MessageTemplate as the send, and writes a report through Django's storage
API (DRY_RUN_STORAGE): a summary, then one line per recipient (key, address, subject, body
length, problems). No provider is touched.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages

from scheduler_app import clock
from scheduler_app.conf import app_settings
from scheduler_app.feedback.suppressions import skip_reasons
from scheduler_app.models import SendBatch
from scheduler_app.sends.addresses import address_problem
from scheduler_app.sends.audience import get_audience
from scheduler_app.sends.content import compile_template, fingerprint
from scheduler_app.sends.rendering import LEFTOVER_SYNTAX, RenderError

#: The reports' folder in the storage.
REPORT_DIR = "scheduler_app/dry-runs"


def report_storage() -> Storage:
    """Return the storage dry-run reports are written to and read from (DRY_RUN_STORAGE)."""
    return storages[app_settings.DRY_RUN_STORAGE]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DryRunReport:
    """Where the report was stored, and its summary."""

    path: str
    summary: dict[str, int]

    @property
    def problems(self) -> int:
        return self.summary["problems"]


def dry_run(batch: SendBatch) -> DryRunReport:
    """Render the whole audience for ``batch``, store the report, record it on the batch."""
    template = compile_template(batch)
    query = get_audience(batch.audience, batch.audience_params)
    counts: collections.Counter[str] = collections.Counter()
    keys: set[str] = set()
    first_with: dict[str, tuple[str, str]] = {}  # lower-cased address -> (key, address)
    lines = []
    short = app_settings.DRY_RUN_SHORT_BODY
    for row, suppressed in _with_suppression(query.rows(), batch):
        counts["rows"] += 1
        problems = []
        if suppressed:
            counts["suppressed"] += 1
            problems.append("%s: skipped at send time" % suppressed)
        if row["key"] in keys:
            counts["duplicate_keys"] += 1
            problems.append("duplicate recipient key (sent once)")
        keys.add(row["key"])
        if row["address"]:
            invalid = address_problem(row["address"])
            if invalid:
                counts["invalid_addresses"] += 1
                problems.append(invalid)
            duplicate = _duplicate_of(row, first_with)
            if duplicate:
                counts["duplicate_addresses"] += 1
                problems.append(duplicate)
        subject, length = "", 0
        try:
            message = template.render(row["address"], row["context"])
        except RenderError as exc:
            counts["failed"] += 1
            if any(syntax in exc.message for syntax in LEFTOVER_SYNTAX):
                counts["leftover_syntax"] += 1
            if "empty" in exc.message:
                counts["empty"] += 1
            problems.append(exc.message)
        else:
            counts["rendered"] += 1
            subject, length = message.subject, len(message.text)
            if len(message.text.strip()) < short:
                counts["very_short"] += 1
                problems.append("body is very short (%s characters)" % length)
        lines.append(
            "\t".join(
                [row["key"], row["address"], subject, str(length), "; ".join(problems) or "ok"]
            )
        )
    counts["recipients"] = len(keys)
    counts["problems"] = (
        counts["failed"]
        + counts["very_short"]
        + counts["invalid_addresses"]
        + counts["duplicate_addresses"]
        + counts["duplicate_keys"]
    )
    summary = {
        name: counts[name]
        for name in (
            "rows",
            "recipients",
            "rendered",
            "failed",
            "empty",
            "very_short",
            "leftover_syntax",
            "invalid_addresses",
            "duplicate_addresses",
            "duplicate_keys",
            "suppressed",
            "problems",
        )
    }
    now = clock.now()
    path = report_storage().save(
        "%s/batch-%s-%s.txt" % (REPORT_DIR, batch.pk, now.strftime("%Y%m%dT%H%M%SZ")),
        ContentFile(_report_text(batch, summary, lines).encode()),
    )
    SendBatch.objects.filter(pk=batch.pk).update(
        dry_run_at=now,
        dry_run_fingerprint=fingerprint(batch),
        dry_run_audience=len(keys),
        dry_run_problems=summary["problems"],
        dry_run_report=path,
        dry_run_summary=summary,
    )
    batch.refresh_from_db()
    return DryRunReport(path=path, summary=summary)


def _with_suppression(
    rows: Iterable[dict[str, Any]], batch: SendBatch, chunk: int = 1000
) -> Iterator[tuple[dict[str, Any], str]]:
    """Yield (row, why it would be skipped or '') for each audience row, one lookup per chunk."""
    rows = iter(rows)
    while part := list(itertools.islice(rows, chunk)):
        reasons = skip_reasons([row["address"] for row in part if row["address"]], batch)
        for row in part:
            yield row, reasons.get(row["address"], "")


def _duplicate_of(row: dict, first_with: dict[str, tuple[str, str]]) -> str:
    """Return which earlier recipient has the same address (case aside), or ''; remember it."""
    key, address = first_with.setdefault(row["address"].lower(), (row["key"], row["address"]))
    if key == row["key"]:
        return ""
    if address == row["address"]:
        return "same address as recipient %s (both are sent)" % key
    return "same address as recipient %s except for case (both are sent)" % key


def _report_text(batch: SendBatch, summary: dict[str, int], lines: list[str]) -> str:
    out = io.StringIO()
    out.write(
        "Dry-run of batch %s (%s) at %s UTC\n" % (batch.pk, batch.name, clock.now().isoformat())
    )
    out.write("Audience %r with %s\n\n" % (batch.audience, batch.audience_params))
    for name, value in summary.items():
        out.write("%-20s %s\n" % (name.replace("_", " "), value))
    out.write("\nkey\taddress\tsubject\tbody length\tproblems\n")
    out.writelines(line + "\n" for line in lines)
    return out.getvalue()
