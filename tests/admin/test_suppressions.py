"""The suppression list in the admin: search, filter, add, lift with a reason, CSV in and out."""

from __future__ import annotations

import csv
import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from scheduler_app.feedback.suppressions import lift
from scheduler_app.models import FeedbackEvent, SendBatch, Suppression, SuppressionRemoval
from tests.admin.conftest import ACTION_CHECKBOX, client_for, get, messages_of

CHANGELIST = reverse("admin:scheduler_app_suppression_changelist")
IMPORT = reverse("admin:scheduler_app_suppression_import")


def suppressed(address: str, **fields) -> Suppression:
    values = {"reason": "unsubscribed", "source": "link", **fields}
    return Suppression.objects.create(address=address, **values)


def shown(response) -> list[str]:
    return [row.address for row in response.context["cl"].result_list]


@pytest.mark.django_db
def test_search_by_address_in_any_case_and_filter_by_reason(admin):
    suppressed("ann@example.com")
    suppressed("bob@example.com", reason="complaint", source="webhook")

    assert shown(get(admin, CHANGELIST, {"q": "ANN@Example.com"})) == ["ann@example.com"]
    assert shown(get(admin, CHANGELIST, {"reason__exact": "complaint"})) == ["bob@example.com"]
    assert shown(get(admin, CHANGELIST, {"source__exact": "link"})) == ["ann@example.com"]


@pytest.mark.django_db
def test_an_operator_adds_an_address_by_hand_normalised(admin, superuser):
    response = admin.post(
        reverse("admin:scheduler_app_suppression_add"),
        {"address": " Ann@Example.COM ", "scope": "", "reason": "manual", "detail": "phone call"},
    )

    assert response.status_code == 302
    row = Suppression.objects.get()
    assert (row.address, row.scope, row.reason, row.source, row.created_by) == (
        "ann@example.com",
        "",
        "manual",
        "admin",
        superuser,
    )


@pytest.mark.django_db
def test_an_invalid_address_is_refused_with_a_message(admin):
    response = admin.post(
        reverse("admin:scheduler_app_suppression_add"),
        {"address": "not an address", "scope": "", "reason": "manual"},
    )
    assert response.status_code == 200
    assert "Enter a valid email address." in str(response.context["adminform"].form.errors)
    assert not Suppression.objects.exists()


@pytest.mark.django_db
def test_lifting_asks_why_and_leaves_an_audit_row(admin, superuser):
    row = suppressed("ann@example.com")
    action = {"action": "lift_action", ACTION_CHECKBOX: [row.pk]}

    asked = admin.post(CHANGELIST, action)
    assert asked.status_code == 200
    assert b"Why may these addresses be mailed again?" in asked.content
    blank = admin.post(CHANGELIST, {**action, "apply": "yes", "why": "  "})
    assert blank.status_code == 200
    assert Suppression.objects.exists()

    done = admin.post(CHANGELIST, {**action, "apply": "yes", "why": "re-subscribed by form"})

    assert messages_of(done) == [("success", "Lifted 1 suppression.")]
    assert not Suppression.objects.exists()
    audit = SuppressionRemoval.objects.get()
    assert (audit.address, audit.was_reason, audit.why, audit.removed_by) == (
        "ann@example.com",
        "unsubscribed",
        "re-subscribed by form",
        superuser,
    )


@pytest.mark.django_db
def test_a_suppression_another_operator_already_lifted_is_not_recorded_lifted_again(superuser):
    """Two operators lift the same row: one lift and one audit row; the second learns so."""
    row = suppressed("ann@example.com")
    stale = Suppression.objects.get(pk=row.pk)  # what the second operator's request loaded

    assert lift(row, why="asked to be mailed again", by=superuser) is True
    assert lift(stale, why="me too", by=superuser) is False

    assert list(SuppressionRemoval.objects.values_list("why", flat=True)) == [
        "asked to be mailed again"
    ]


@pytest.mark.django_db
def test_lifting_suppressions_already_lifted_warns_how_many_and_reports_no_empty_success(admin):
    """Back and submit again, or a second operator first: never a green "Lifted 0"."""
    ann, bob = suppressed("ann@example.com"), suppressed("bob@example.com")
    action = {"action": "lift_action", "apply": "yes", "why": "asked to be mailed again"}
    first = admin.post(CHANGELIST, {**action, ACTION_CHECKBOX: [bob.pk]})
    assert messages_of(first) == [("success", "Lifted 1 suppression.")]

    again = admin.post(CHANGELIST, {**action, ACTION_CHECKBOX: [bob.pk]})
    assert messages_of(again) == [("warning", "1 suppression was already lifted.")]

    both = admin.post(CHANGELIST, {**action, ACTION_CHECKBOX: [ann.pk, bob.pk]})
    assert messages_of(both) == [
        ("success", "Lifted 1 suppression."),
        ("warning", "1 suppression was already lifted."),
    ]
    assert not Suppression.objects.exists()
    assert SuppressionRemoval.objects.count() == 2


@pytest.mark.django_db
def test_nobody_deletes_a_suppression_without_saying_why(admin, staff):
    row = suppressed("ann@example.com")
    actions = dict(get(admin, CHANGELIST).context["action_form"].fields["action"].choices)
    assert "delete_selected" not in actions
    assert "lift_action" in actions
    delete_url = reverse("admin:scheduler_app_suppression_delete", args=[row.pk])
    assert admin.post(delete_url, {"post": "yes"}).status_code == 403
    viewer = client_for(staff("viewer", "view_suppression"))
    lift = {"action": "lift_action", ACTION_CHECKBOX: [row.pk], "apply": "yes", "why": "x"}
    assert "lift_action" not in dict(
        get(viewer, CHANGELIST).context["action_form"].fields["action"].choices
    )
    viewer.post(CHANGELIST, lift)
    assert Suppression.objects.exists()


@pytest.mark.django_db
def test_export_writes_csv_that_a_spreadsheet_will_not_run(admin):
    good = suppressed("ann@example.com", scope="newsletter")
    evil = suppressed("bob@example.com", detail='=HYPERLINK("http://x")')

    response = admin.post(
        CHANGELIST, {"action": "export_action", ACTION_CHECKBOX: [good.pk, evil.pk]}
    )

    assert response["Content-Type"] == "text/csv; charset=utf-8"
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(r["address"], r["scope"], r["reason"]) for r in rows] == [
        ("ann@example.com", "newsletter", "unsubscribed"),
        ("bob@example.com", "", "unsubscribed"),
    ]
    assert rows[1]["detail"].startswith("'=")


@pytest.mark.django_db
def test_import_adds_every_line_or_none_and_names_the_bad_lines(admin):
    suppressed("cy@example.com", reason="complaint")
    good = (
        "address,scope,reason\n"
        "Ann@example.com,newsletter,\n"
        "bob@example.com,,hard_bounce\n"
        "cy@example.com,,\n"
    )
    bad = "address,reason\nann@example.com,\nnot-an-address,\nbob@example.com,angry\n"

    refused = admin.post(IMPORT, {"file": SimpleUploadedFile("s.csv", bad.encode())})
    assert refused.status_code == 200
    errors = str(refused.context["form"].errors)
    assert "Line 3: &#x27;not-an-address&#x27; is not an email address." in errors
    assert "Line 4: unknown reason &#x27;angry&#x27;." in errors
    assert Suppression.objects.count() == 1

    done = admin.post(IMPORT, {"file": SimpleUploadedFile("s.csv", good.encode())})

    assert messages_of(done) == [("success", "Imported 2 address(es); 1 were already suppressed.")]
    rows = set(Suppression.objects.values_list("address", "scope", "reason", "source"))
    assert rows == {
        ("ann@example.com", "newsletter", "manual", "import"),
        ("bob@example.com", "", "hard_bounce", "import"),
        ("cy@example.com", "", "complaint", "link"),
    }


@pytest.mark.django_db
def test_a_file_without_an_address_header_is_refused(admin):
    response = admin.post(
        IMPORT, {"file": SimpleUploadedFile("s.csv", b"email\nann@example.com\n")}
    )
    assert "The first line must be a header naming an" in str(response.context["form"].errors)
    assert not Suppression.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (
            "address,detail\nann@example.com,ok\nbob@example.com,%s\n" % ("x" * 200_000),
            "Line 3 is not valid CSV: field larger than field limit (131072).",
        ),
        (
            "address,%s\nann@example.com,ok\n" % ("x" * 200_000),
            "Line 1 is not valid CSV: field larger than field limit (131072).",
        ),
        (
            "address,scope,detail\nann@example.com,news,ok\nbob@example.com,ne\x00ws,ok\n",
            "Line 3: NUL characters are not allowed.",
        ),
        (
            "address,detail\nann@example.com,ok\nbob@example.com,bad\x00detail\n",
            "Line 3: NUL characters are not allowed.",
        ),
    ],
    ids=["field-over-csv-limit", "header-over-csv-limit", "nul-in-scope", "nul-in-detail"],
)
def test_a_malformed_file_is_refused_with_a_message_and_nothing_imported(admin, content, problem):
    response = admin.post(IMPORT, {"file": SimpleUploadedFile("s.csv", content.encode())})

    assert response.status_code == 200
    assert response.context["form"].errors["file"] == [problem]
    assert not Suppression.objects.exists()


@pytest.mark.django_db
def test_the_batch_page_shows_its_unsubscribes_bounces_and_complaints(admin):
    batch = SendBatch.objects.create(
        name="News",
        subject_template="s",
        text_template="t",
        audience="tests.customers",
        expected_max_audience=10,
        status=SendBatch.Status.COMPLETED,
    )
    for n, kind in enumerate(["unsubscribe", "unsubscribe", "hard_bounce", "complaint"]):
        FeedbackEvent.objects.create(
            event_id="e%s" % n,
            kind=kind,
            source="webhook",
            address="a%s@example.com" % n,
            batch=batch,
        )

    page = get(admin, reverse("admin:scheduler_app_sendbatch_change", args=[batch.pk]))

    assert (
        "unsubscribes 2 · hard bounces 1 · soft bounces 0 · complaints 1" in page.content.decode()
    )


@pytest.mark.django_db
@pytest.mark.parametrize("address", ["-ann@example.com", "=bo@example.com", "'cy@example.com"])
def test_an_exported_list_imported_again_suppresses_the_same_addresses(admin, address):
    """The export quotes a cell a spreadsheet would run (and one starting with the quote),
    the import takes the quote off again."""
    row = suppressed(address)
    exported = admin.post(CHANGELIST, {"action": "export_action", ACTION_CHECKBOX: [row.pk]})
    Suppression.objects.all().delete()  # another environment, or restoring the list

    admin.post(IMPORT, {"file": SimpleUploadedFile("s.csv", exported.content)})

    assert list(Suppression.objects.values_list("address", flat=True)) == [address]
