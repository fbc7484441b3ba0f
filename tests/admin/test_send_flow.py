"""The operator's send flow on the batch page (#38): an edit that changes nothing the send
uses keeps the dry-run and the seed send; an undone batch is duplicated as a new draft."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from scheduler_app.models import Recipient, SendBatch
from scheduler_app.sends.batches import PREVIEW_CHOICES, schedule_batch
from scheduler_app.sends.checklist import run_checklist
from scheduler_app.sends.content import DRAFT_FIELDS
from scheduler_app.sends.start import start_sending
from tests.admin.conftest import (
    UNPREPARED,
    change,
    client_for,
    form_data,
    messages_of,
    post_action,
)
from tests.testapp.models import Customer

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


def duplicate_url(batch) -> str:
    return "/admin/scheduler_app/sendbatch/%s/duplicate/" % batch.pk


def test_an_undone_batch_is_duplicated_as_a_new_draft_to_fix_and_send_again(
    admin, superuser, make_batch, customers
):
    batch = make_batch(
        undo_window=dt.timedelta(seconds=600),
        scheduled_at=None,
        seed_list=["seed@example.com"],
        audience_params={"plan": "pro"},
    )
    batch = schedule_batch(batch, relax=(*UNPREPARED, "schedule_unambiguous"))
    response = admin.post("/admin/scheduler_app/sendbatch/%s/undo/" % batch.pk)
    assert messages_of(response) == [
        (
            "success",
            "Undone: Spring news will not be sent. To fix it and send it again, "
            "use Duplicate as draft.",
        )
    ]
    page = admin.get(change("sendbatch", batch.pk)).content.decode()
    assert 'action="%s"' % duplicate_url(batch) in page

    response = admin.post(duplicate_url(batch))
    copy = SendBatch.objects.exclude(pk=batch.pk).get()
    assert response.status_code == 302
    assert response["Location"] == change("sendbatch", copy.pk)
    assert messages_of(response) == [
        ("success", "Spring news (copy) is a new draft: edit it, then dry-run it.")
    ]
    assert (copy.name, copy.status, copy.owner) == ("Spring news (copy)", Status.DRAFT, superuser)
    for field in DRAFT_FIELDS[1:]:
        assert getattr(copy, field) == getattr(batch, field), field
    assert (copy.dry_run_at, copy.seed_sent_at, copy.undo_deadline, copy.total) == (
        None,
        None,
        None,
        None,
    )
    assert SendBatch.objects.get(pk=batch.pk).status == Status.CANCELLED


def test_duplicate_needs_the_add_permission_and_a_post(staff, make_batch):
    batch = make_batch()
    viewer = client_for(staff("viewer", "view_sendbatch", "change_sendbatch"))
    assert (
        'action="%s"' % duplicate_url(batch)
        not in viewer.get(change("sendbatch", batch.pk)).content.decode()
    )
    assert viewer.post(duplicate_url(batch)).status_code == 403
    adder = client_for(staff("adder", "view_sendbatch", "add_sendbatch"))
    assert adder.get(duplicate_url(batch)).status_code == 405
    assert SendBatch.objects.count() == 1


def test_the_audience_is_a_choice_of_registered_audiences(admin, make_batch):
    batch = make_batch()
    page = admin.get(change("sendbatch", batch.pk))
    field = page.context["adminform"].form.fields["audience"]
    assert ("tests.customers", "tests.customers") in list(field.choices)
    data = form_data(page)
    data["audience"] = "tests.nobody"
    response = admin.post(change("sendbatch", batch.pk), data)
    assert response.context["adminform"].form.errors == {
        "audience": ["Select a valid choice. tests.nobody is not one of the available choices."]
    }
    assert SendBatch.objects.get(pk=batch.pk).audience == "tests.customers"


def test_the_seed_list_is_typed_one_address_a_line(admin, make_batch):
    batch = make_batch(seed_list=["qa@example.com", "boss@example.com"])
    page = admin.get(change("sendbatch", batch.pk))
    assert ">\nqa@example.com\nboss@example.com</textarea>" in page.content.decode()
    data = form_data(page)
    data["seed_list"] = " qa@example.com\r\n\r\nnew@example.org \r\n"
    assert admin.post(change("sendbatch", batch.pk), data).status_code == 302
    assert SendBatch.objects.get(pk=batch.pk).seed_list == ["qa@example.com", "new@example.org"]

    data["seed_list"] = "qa@example.com\r\nnew@\r\n"
    response = admin.post(change("sendbatch", batch.pk), data)
    assert response.context["adminform"].form.errors == {
        "seed_list": ["Line 2, new@: address cannot be valid: nothing after '@'"]
    }


def test_the_checklist_reads_as_sentences_with_pass_and_fail_in_words(admin, make_batch):
    batch = make_batch()
    html = admin.get(change("sendbatch", batch.pk)).content.decode()
    assert "dry_run_clean" not in html
    assert (
        '<li class="failing"><span aria-hidden="true">✘</span> <b>Failing:</b> '
        "Clean dry-run of this template and audience. No dry-run of the current template "
        "and audience.</li>"
    ) in html
    assert (
        '<li class="ok"><span aria-hidden="true">✔</span> <b>Passed:</b> '
        "Send time and time zone set. Send time "
    ) in html


def test_the_schedule_confirmation_offers_no_yes_while_an_item_fails(staff, admin, make_batch):
    batch = make_batch()
    sender = client_for(staff("sender", "view_sendbatch", "change_sendbatch"))
    page = post_action(sender, "sendbatch", "schedule_action", [batch]).content.decode()
    assert "Yes, schedule" not in page
    assert "Fix the failing items first" in page
    # Who may relax items gets the button, disabled until every failing one is ticked.
    page = post_action(admin, "sendbatch", "schedule_action", [batch]).content.decode()
    assert 'class="button default confirm-action" data-relax-all disabled>Yes, schedule' in page


def test_the_schedule_confirmation_of_a_checked_batch_offers_yes(staff, make_batch, customers):
    batch = make_batch(seed_list=["seed@example.com"], seed_context={"first_name": "Seed"})
    sender = client_for(staff("sender", "view_sendbatch", "change_sendbatch"))
    post_action(sender, "sendbatch", "dry_run_action", [batch])
    post_action(sender, "sendbatch", "seed_send_action", [batch])
    page = post_action(sender, "sendbatch", "schedule_action", [batch]).content.decode()
    assert 'class="button default confirm-action">Yes, schedule</button>' in page
    assert "Failing" not in page


def page_url(batch, name: str) -> str:
    return "/admin/scheduler_app/sendbatch/%s/actions/%s/" % (batch.pk, name)


def enabled_buttons(client, batch) -> dict[str, bool]:
    """Return the flow's buttons on the batch page: name -> enabled."""
    html = client.get(change("sendbatch", batch.pk)).content.decode()
    found = dict.fromkeys(("dry_run", "seed_send", "schedule", "cancel"), False)
    for name in found:
        marker = 'data-action="%s"' % name
        if marker in html:
            form = html.split(marker, 1)[1].split("</form>", 1)[0]
            found[name] = " hidden" not in form.split(">", 1)[0] and "disabled" not in form
    return found


def test_a_draft_page_offers_the_flow_in_order_each_step_enabled_by_its_checklist_item(
    staff, make_batch, customers
):
    """For a user who may not relax checklist items (who may gets Schedule… at once)."""
    admin = client_for(staff("sender", "view_sendbatch", "change_sendbatch"))
    batch = make_batch(seed_list=["seed@example.com"], seed_context={"first_name": "Seed"})
    assert enabled_buttons(admin, batch) == {
        "dry_run": True,
        "seed_send": False,
        "schedule": False,
        "cancel": False,
    }
    response = admin.post(page_url(batch, "dry_run"))
    assert response["Location"] == change("sendbatch", batch.pk)
    assert messages_of(response) == [
        ("success", "Spring news: dry-run rendered 3 of 3 recipients, 0 problem(s).")
    ]
    assert enabled_buttons(admin, batch)["seed_send"] is True
    assert enabled_buttons(admin, batch)["schedule"] is False
    admin.post(page_url(batch, "seed_send"))
    assert enabled_buttons(admin, batch)["schedule"] is True
    confirm = admin.post(page_url(batch, "schedule"))
    assert confirm.templates[0].name == "admin/scheduler_app/batch_confirm.html"
    response = admin.post(
        page_url(batch, "schedule"),
        {"action": "schedule_action", "_selected_action": batch.pk, "confirm": "yes"},
    )
    assert response["Location"] == change("sendbatch", batch.pk)
    assert SendBatch.objects.get(pk=batch.pk).status == Status.SCHEDULED


def test_the_flow_buttons_are_for_drafts_only(admin, make_batch):
    batch = make_batch(status=Status.COMPLETED)
    assert enabled_buttons(admin, batch) == {
        "dry_run": False,
        "seed_send": False,
        "schedule": False,
        "cancel": False,
    }


def test_dry_run_reports_are_written_to_and_read_from_the_named_storage(
    admin, settings, tmp_path, make_batch, customers
):
    files = "django.core.files.storage.FileSystemStorage"
    settings.STORAGES = {
        **settings.STORAGES,
        "reports": {"BACKEND": files, "OPTIONS": {"location": str(tmp_path / "reports")}},
    }
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "DRY_RUN_STORAGE": "reports"}
    batch = make_batch()
    admin.post(page_url(batch, "dry_run"))
    batch.refresh_from_db()
    assert (tmp_path / "reports" / batch.dry_run_report).is_file()
    assert not (tmp_path / "media").exists()
    response = admin.get("/admin/scheduler_app/sendbatch/%s/report/" % batch.pk)
    assert response.status_code == 200
    assert b"".join(response.streaming_content).startswith(b"Dry-run of batch %d" % batch.pk)


def test_a_draft_previews_its_message_for_a_recipient_picked_from_the_audience(
    admin, make_batch, customers
):
    batch = make_batch()
    page = admin.get(change("sendbatch", batch.pk))
    assert page.context["preview"].frozen == []  # a draft has no frozen audience yet
    assert page.context["preview"].live == [
        ("live:%s" % c.pk, c.email) for c in customers
    ]  # the first recipients of the live audience; the first is shown
    html = page.content.decode()
    assert '<pre class="preview-subject">News for Ada</pre>' in html
    grace = customers[1]
    html = admin.get(change("sendbatch", batch.pk), {"preview": "live:%s" % grace.pk}).content
    html = html.decode()
    assert '<pre class="preview-subject">News for Grace</pre>' in html
    assert '<pre class="preview-text">Hi Grace, here is the spring news.</pre>' in html
    assert '<option value="live:%s" selected>grace@example.com</option>' % grace.pk in html


def preview_of(client, batch, **query) -> Any:
    return client.get(change("sendbatch", batch.pk), query).context["preview"]


def test_a_frozen_batch_previews_for_a_recipient_of_its_frozen_or_its_live_audience(
    admin, make_batch, customers
):
    """The frozen audience is what the send uses; the live one may have changed since."""
    batch = schedule_batch(make_batch(), relax=UNPREPARED)
    before_freeze = preview_of(admin, batch)
    assert (before_freeze.frozen, before_freeze.subject) == ([], "News for Ada")
    assert start_sending(batch.pk) is not None  # freezes the audience
    ada, grace, linus = customers
    Customer.objects.filter(pk=ada.pk).update(first_name="Adeline")
    Recipient.objects.filter(batch=batch, recipient_key=str(grace.pk)).update(status="sent")

    shown = preview_of(admin, batch)
    assert shown.frozen == [
        ("frozen:%s" % ada.pk, "ada@example.com (pending)"),
        ("frozen:%s" % grace.pk, "grace@example.com (sent)"),
        ("frozen:%s" % linus.pk, "linus@example.org (pending)"),
    ]
    assert shown.live == [("live:%s" % c.pk, c.email) for c in customers]
    assert (shown.picked, shown.subject) == ("frozen:%s" % ada.pk, "News for Ada")
    assert preview_of(admin, batch, preview="live:%s" % ada.pk).subject == "News for Adeline"
    assert preview_of(admin, batch, preview="frozen:%s" % grace.pk).text == (
        "Hi Grace, here is the spring news."
    )
    found = preview_of(admin, batch, find=" LINUS@example.org ")
    assert (found.picked, found.subject) == ("frozen:%s" % linus.pk, "News for Linus")
    assert preview_of(admin, batch, find=str(grace.pk)).subject == "News for Grace"

    html = admin.get(change("sendbatch", batch.pk), {"find": "nobody@example.com"}).content
    assert (
        '<p class="preview-error errornote">No recipient of the frozen audience has the '
        "address or key nobody@example.com.</p>"
    ) in html.decode()
    for bad in ({"find": "ada\x00@example.com"}, {"preview": "frozen:1\x00"}):
        assert admin.get(change("sendbatch", batch.pk), bad).status_code == 200


def test_a_frozen_recipient_is_found_beyond_the_first_choices(admin, make_batch, db):
    Customer.objects.bulk_create(
        Customer(email="c%s@example.com" % i, first_name="Name%s" % i, plan="pro")
        for i in range(PREVIEW_CHOICES + 5)
    )
    batch = schedule_batch(make_batch(), relax=UNPREPARED)
    assert start_sending(batch.pk) is not None
    last = Recipient.objects.filter(batch=batch).order_by("id").last()
    shown = preview_of(admin, batch, find=last.address)
    assert len(shown.frozen) == PREVIEW_CHOICES + 1  # the one found is offered too
    assert shown.frozen[0] == ("frozen:%s" % last.recipient_key, "%s (pending)" % last.address)
    assert shown.subject == "News for %s" % Customer.objects.get(email=last.address).first_name


def test_a_preview_that_cannot_render_says_why(admin, make_batch, customers):
    batch = make_batch(text_template="Hi {{ nickname }}, news.")
    html = admin.get(change("sendbatch", batch.pk)).content.decode()
    assert (
        '<p class="preview-error errornote">'
        "Variable &#x27;nickname&#x27; is missing from the recipient&#x27;s data.</p>"
    ) in html


def test_the_seed_context_is_typed_one_name_and_value_a_line(admin, make_batch):
    """Stored as the same JSON object as before; a value is text unless it reads as JSON."""
    batch = make_batch(
        seed_context={"first_name": "Seed", "orders": 3, "zip": "75001", "code": "007"}
    )
    page = admin.get(change("sendbatch", batch.pk))
    html = page.content.decode()
    typed = html.split('name="seed_context"', 1)[1].split(">", 1)[1].split("</textarea>")[0]
    # In the stored order (PostgreSQL's jsonb orders the keys its own way).
    assert sorted(typed.strip("\n").splitlines()) == [
        "code = 007",
        "first_name = Seed",
        "orders = 3",
        "zip = &quot;75001&quot;",
    ]
    data = form_data(page)
    assert admin.post(change("sendbatch", batch.pk), data).status_code == 302
    assert SendBatch.objects.get(pk=batch.pk).seed_context == {
        "first_name": "Seed",
        "orders": 3,
        "zip": "75001",
        "code": "007",
    }
    data["seed_context"] = (
        "first_name =  Ada Lovelace \r\n\r\nvip=true\r\ncity = \r\n"
        'tags = ["a", "b"]\r\nnote = "two\\nlines"\r\nprice = 3.50\r\nn = -2\r\n'
    )
    assert admin.post(change("sendbatch", batch.pk), data).status_code == 302
    assert SendBatch.objects.get(pk=batch.pk).seed_context == {
        "first_name": "Ada Lovelace",
        "vip": True,
        "city": "",
        "tags": ["a", "b"],
        "note": "two\nlines",
        "price": "3.50",
        "n": -2,
    }


@pytest.mark.parametrize(
    ("typed", "error"),
    [
        ("first_name = Ada\r\nAda Lovelace", 'Line 2, Ada Lovelace: write it as "name = value".'),
        (
            "first name = Ada",
            "Line 1, first name = Ada: 'first name' is not a name a template can use "
            "(letters, digits and underscores, starting with a letter).",
        ),
        (
            "first_name = Ada\r\nfirst_name = Grace",
            "Line 2, first_name = Grace: first_name is already set on line 1.",
        ),
        (
            'tags = ["a", "b"',
            'Line 1, tags = ["a", "b": the value starts like JSON but is not valid JSON '
            "(put it in double quotes to mean the text): Expecting ',' delimiter.",
        ),
    ],
)
def test_a_bad_seed_context_line_is_named_in_the_error(admin, make_batch, typed, error):
    batch = make_batch(seed_context={"first_name": "Seed"})
    data = form_data(admin.get(change("sendbatch", batch.pk)))
    data["seed_context"] = typed
    response = admin.post(change("sendbatch", batch.pk), data)
    assert response.context["adminform"].form.errors == {"seed_context": [error]}
    assert SendBatch.objects.get(pk=batch.pk).seed_context == {"first_name": "Seed"}
