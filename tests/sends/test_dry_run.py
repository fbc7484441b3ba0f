"""Dry-run: the real audience query and every render, a readable report, zero provider calls."""

from __future__ import annotations

import pytest
from django.core.files.storage import default_storage

from scheduler_app.models import Recipient, SendBatch
from scheduler_app.sends.content import fingerprint
from scheduler_app.sends.dry_run import dry_run
from scheduler_app.sends.providers import get_provider
from tests.testapp.models import ProviderCall

LONG_NAME = "Annabel Featherstonehaugh"  # long enough not to be a "very short" body


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path)
    return tmp_path


@pytest.fixture
def troubled_audience(customer):
    """One clean customer, an injected ``{{``, an empty render and a duplicate address."""
    return {
        "ok": customer("ann@example.com", LONG_NAME),
        "injected": customer("oops@example.com", "{{ oops }}"),
        "empty": customer("empty@example.com", ""),
        "dup1": customer("dup@example.com", "Bartholomew Dupont-Smith"),
        "dup2": customer("dup@example.com", "Bartholomew Dupont-Jones"),
    }


def read_report(path: str) -> str:
    with default_storage.open(path) as handle:
        return handle.read().decode()


@pytest.mark.django_db
@pytest.mark.parametrize("provider", ["fake", "report"])
def test_dry_run_finds_injected_syntax_an_empty_render_and_a_duplicate_address(
    troubled_audience, make_batch, provider
):
    batch = make_batch(
        status=SendBatch.Status.DRAFT,
        subject_template="News for {{ first_name|default:'you' }}",
        text_template="{{ first_name|default:'' }}",
        provider=provider,
    )

    report_provider = get_provider("report")
    kept_before = list(report_provider.messages)

    report = dry_run(batch)

    assert report.summary == {
        "rows": 5,
        "recipients": 5,
        "rendered": 3,
        "failed": 2,
        "empty": 1,
        "very_short": 0,
        "leftover_syntax": 1,
        "invalid_addresses": 0,
        "duplicate_addresses": 1,
        "duplicate_keys": 0,
        "suppressed": 0,
        "problems": 3,
    }
    assert report.problems == 3
    # Nothing reached a provider: no fake call, no message kept by the report provider.
    assert ProviderCall.objects.count() == 0
    assert report_provider.messages == kept_before
    assert not Recipient.objects.filter(batch=batch).exists()

    text = read_report(report.path)
    ids = {name: c.pk for name, c in troubled_audience.items()}
    lines = text.splitlines()
    assert lines[0].startswith("Dry-run of batch %s (Spring news) at " % batch.pk)
    assert lines[1] == "Audience 'tests.customers' with {}"
    for summary_line in (
        "rows                 5",
        "recipients           5",
        "rendered             3",
        "failed               2",
        "empty                1",
        "very short           0",
        "leftover syntax      1",
        "invalid addresses    0",
        "duplicate addresses  1",
        "duplicate keys       0",
        "problems             3",
    ):
        assert summary_line in lines
    assert "key\taddress\tsubject\tbody length\tproblems" in lines
    assert lines[-5:] == [
        "%s\tann@example.com\tNews for %s\t25\tok" % (ids["ok"], LONG_NAME),
        "%s\toops@example.com\t\t0\tThe subject still contains template syntax '{{'."
        % ids["injected"],
        "%s\tempty@example.com\t\t0\tThe text body renders empty." % ids["empty"],
        "%s\tdup@example.com\tNews for Bartholomew Dupont-Smith\t24\tok" % ids["dup1"],
        "%s\tdup@example.com\tNews for Bartholomew Dupont-Jones\t24\t"
        "same address as recipient %s (both are sent)" % (ids["dup2"], ids["dup1"]),
    ]


@pytest.mark.django_db
def test_dry_run_is_recorded_on_the_batch_for_the_checklist(troubled_audience, make_batch):
    batch = make_batch(status=SendBatch.Status.DRAFT, text_template="{{ first_name|default:'' }}")

    report = dry_run(batch)

    batch.refresh_from_db()
    assert batch.dry_run_report == report.path
    assert report.path.startswith("scheduler_app/dry-runs/batch-%s-" % batch.pk)
    assert batch.dry_run_summary == report.summary
    assert (batch.dry_run_audience, batch.dry_run_problems) == (5, 3)
    assert batch.dry_run_fingerprint == fingerprint(batch)
    assert batch.dry_run_at is not None
    # A dry-run changes nothing else: the batch is still a draft, nothing frozen.
    assert (batch.status, batch.total, batch.frozen_at, batch.sent) == ("draft", None, None, 0)


@pytest.mark.django_db
def test_a_clean_dry_run_reports_no_problems(customer, make_batch):
    customer("ann@example.com", "Ann")
    bob = customer("bob@example.com", "")
    batch = make_batch(status=SendBatch.Status.DRAFT)

    report = dry_run(batch)

    assert (report.summary["problems"], report.summary["rendered"]) == (0, 2)
    # "Hi there, here is the spring news." (the template's default for an empty name)
    assert read_report(report.path).endswith("%s\tbob@example.com\tNews for you\t34\tok\n" % bob.pk)


@pytest.mark.django_db
def test_a_very_short_body_is_a_problem(customer, make_batch):
    customer("ann@example.com", "Ann")
    batch = make_batch(status=SendBatch.Status.DRAFT, text_template="Hi {{ first_name }}")

    report = dry_run(batch)

    assert (report.summary["very_short"], report.summary["problems"]) == (1, 1)
    assert read_report(report.path).endswith(
        "\tann@example.com\tNews for you\t6\tbody is very short (6 characters)\n"
    )


@pytest.mark.django_db
def test_dry_run_runs_the_real_audience_query_with_its_parameters(customer, make_batch):
    customer("free@example.com", "Fred")
    customer("pro@example.com", "Pru", plan="pro")
    batch = make_batch(status=SendBatch.Status.DRAFT, audience_params={"plan": "pro"})

    report = dry_run(batch)

    assert report.summary["rows"] == 1
    text = read_report(report.path)
    assert "pro@example.com" in text
    assert "free@example.com" not in text
    assert "Audience 'tests.customers' with {'plan': 'pro'}" in text


@pytest.mark.django_db
def test_the_dry_run_flags_the_addresses_a_send_refuses(customer, make_batch):
    """One rule (sends.addresses): a host without a dot, no dot in the domain, two dots."""
    refused = ("user@localhost", "user@nodot", "a..b@x.com")
    flagged = [customer(address, LONG_NAME) for address in refused]
    ok = customer("user@mail.example.com", LONG_NAME)
    batch = make_batch(
        status=SendBatch.Status.DRAFT, subject_template="News", text_template="{{ first_name }}"
    )

    report = dry_run(batch)

    assert report.summary["invalid_addresses"] == 3
    assert read_report(report.path).splitlines()[-4:] == [
        "%s\t%s\tNews\t%s\t%s" % (c.pk, c.email, 25, problem)
        for c, problem in [
            *((c, "address cannot be valid: not an email address a send accepts") for c in flagged),
            (ok, "ok"),
        ]
    ]


@pytest.mark.django_db
def test_addresses_that_cannot_be_valid_and_case_only_duplicates_are_flagged_on_their_line(
    customer, make_batch
):
    ok = customer("ann@example.com", LONG_NAME)
    no_at = customer("ann.example.com", LONG_NAME)
    two_at = customer("ann@home@example.com", LONG_NAME)
    space = customer("ann smith@example.com", LONG_NAME)
    nothing_after = customer("ann@", LONG_NAME)
    upper = customer("Ann@Example.COM", LONG_NAME)
    again = customer("ann@example.com", LONG_NAME)
    batch = make_batch(
        status=SendBatch.Status.DRAFT, subject_template="News", text_template="{{ first_name }}"
    )

    report = dry_run(batch)

    assert (
        report.summary["invalid_addresses"],
        report.summary["duplicate_addresses"],
        report.summary["rendered"],
        report.summary["problems"],
    ) == (4, 2, 7, 6)
    lines = read_report(report.path).splitlines()
    assert "invalid addresses    4" in lines
    assert lines[-7:] == [
        "%s\t%s\tNews\t%s\t%s" % (c.pk, c.email, 25, problem)
        for c, problem in [
            (ok, "ok"),
            (no_at, "address cannot be valid: no '@'"),
            (two_at, "address cannot be valid: more than one '@'"),
            (space, "address cannot be valid: it contains a space"),
            (nothing_after, "address cannot be valid: nothing after '@'"),
            (upper, "same address as recipient %s except for case (both are sent)" % ok.pk),
            (again, "same address as recipient %s (both are sent)" % ok.pk),
        ]
    ]
