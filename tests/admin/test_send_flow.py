"""The operator's send flow on the batch page (#38): an edit that changes nothing the send
uses keeps the dry-run and the seed send; an undone batch is duplicated as a new draft."""

from __future__ import annotations

import pytest

from scheduler_app.models import SendBatch
from scheduler_app.sends.checklist import run_checklist
from tests.admin.conftest import change, form_data, post_action

pytestmark = pytest.mark.django_db

Status = SendBatch.Status


def crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


def test_saving_a_new_send_time_from_the_browser_keeps_the_dry_run_and_the_seed_send(
    admin, make_batch, customers
):
    """The browser sends textareas back with CRLF line endings: that is not a new template."""
    batch = make_batch(
        text_template="Hi {{ first_name|default:'there' }},\n\nthe spring news.\n",
        seed_list=["seed@example.com"],
        seed_context={"first_name": "Seed"},
    )
    post_action(admin, "sendbatch", "dry_run_action", [batch])
    post_action(admin, "sendbatch", "seed_send_action", [batch])
    batch.refresh_from_db()
    assert [item.name for item in run_checklist(batch) if not item.ok] == []
    data = form_data(admin.get(change("sendbatch", batch.pk)))
    data["text_template"] = crlf(data["text_template"])
    data["scheduled_at_1"] = "06:30:00"
    response = admin.post(change("sendbatch", batch.pk), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    stored = SendBatch.objects.get(pk=batch.pk)
    assert stored.text_template == "Hi {{ first_name|default:'there' }},\n\nthe spring news.\n"
    assert [item.name for item in run_checklist(stored) if not item.ok] == []
