"""A batch's fingerprint (what its dry-run and seed send checked) covers what the send uses."""

from __future__ import annotations

from scheduler_app.models import SendBatch
from scheduler_app.sends.content import fingerprint


def batch(**fields) -> SendBatch:
    values = {
        "subject_template": "News",
        "text_template": "Hi {{ first_name }},\n\nthe news.\n",
        "html_template": "<p>Hi</p>\n<p>news</p>",
        "audience": "tests.customers",
        "audience_params": {"plan": "pro"},
        **fields,
    }
    return SendBatch(**values)


def test_line_endings_do_not_change_the_fingerprint():
    crlf = batch(
        text_template="Hi {{ first_name }},\r\n\r\nthe news.\r\n",
        html_template="<p>Hi</p>\r<p>news</p>",
    )
    assert fingerprint(crlf) == fingerprint(batch())


def test_what_the_send_does_not_use_does_not_change_the_fingerprint():
    assert fingerprint(batch(name="Renamed", timezone="Asia/Tokyo")) == fingerprint(batch())


def test_a_changed_template_or_audience_changes_the_fingerprint():
    assert fingerprint(batch(text_template="Hi,\n\nother news.\n")) != fingerprint(batch())
    assert fingerprint(batch(audience_params={"plan": "free"})) != fingerprint(batch())
