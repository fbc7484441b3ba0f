"""A batch's content: the fields an operator types into a draft, its templates compiled,
and its fingerprint (what a dry-run or a seed send checked, which the checklist compares)."""

from __future__ import annotations

import hashlib
import json

from scheduler_app.exceptions import ValidationError
from scheduler_app.models import SendBatch
from scheduler_app.sends.rendering import MessageTemplate, RenderError

#: What an operator types into a draft; a duplicate copies these and nothing of the send.
DRAFT_FIELDS = (
    "name",
    "subject_template",
    "text_template",
    "html_template",
    "audience",
    "audience_params",
    "expected_max_audience",
    "seed_list",
    "seed_context",
    "scheduled_at",
    "timezone",
    "local_delivery_time",
    "undo_window",
    "provider",
    "rate_limit_key",
    "breaker_window",
    "breaker_threshold",
)


def normalise_newlines(text: str) -> str:
    """Return ``text`` with CRLF and CR line endings as LF (a browser's text box sends CRLF)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def fingerprint(batch: SendBatch) -> str:
    """Return a hash of what a dry-run or seed send checked: templates and audience.

    Line endings do not count (the sent message's are the email package's), so a
    template saved back from a browser keeps its dry-run and seed send.
    """
    data = json.dumps(
        [
            normalise_newlines(batch.subject_template),
            normalise_newlines(batch.text_template),
            normalise_newlines(batch.html_template),
            batch.audience,
            batch.audience_params,
        ],
        sort_keys=True,
    )
    return hashlib.sha256(data.encode()).hexdigest()


def compile_template(batch: SendBatch) -> MessageTemplate:
    """Compile the batch's templates; raise ValidationError on a syntax error."""
    try:
        return MessageTemplate.compile(
            batch.subject_template, batch.text_template, batch.html_template
        )
    except RenderError as exc:
        raise ValidationError(exc.message) from exc
