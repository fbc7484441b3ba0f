"""One-click unsubscribe (RFC 8058): signed headers on batch mail; POST suppresses, GET never."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from django.conf import settings
from django.core import mail, signing
from django.test import Client, override_settings

from scheduler_app.feedback.unsubscribe import SALT, recipient_token
from scheduler_app.models import FeedbackEvent, Job, Recipient, Suppression
from scheduler_app.sends.batches import send_message
from tests.helpers import running_worker, wait_for_status
from tests.sends.helpers import recipient, run_lane_now
from tests.sends.test_feedback_events import DOTTED_CAPITAL_I, post_webhook
from tests.settings import SCHEDULER_APP
from tests.testapp.models import ProviderCall

LINK = re.compile(r"^<https://mail\.example\.com/mail/unsubscribe/(?P<token>[^/>]+)/>$")

#: Django's middleware that sends anonymous requests to the login page, which projects
#: on Django 5.1+ turn on; the app's public endpoints must answer for themselves.
LOGIN_REQUIRED = [*settings.MIDDLEWARE, "django.contrib.auth.middleware.LoginRequiredMiddleware"]


def one_click_token(message) -> str:
    """Return the token of the message's List-Unsubscribe URL, checking both headers' shape."""
    headers = message.extra_headers
    assert headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    match = LINK.match(headers["List-Unsubscribe"])
    assert match, headers["List-Unsubscribe"]
    return match["token"]


def unsubscribe_url(recipient_id: int) -> str:
    return "/mail/unsubscribe/%s/" % recipient_token(recipient_id)


@pytest.mark.django_db
def test_every_batch_message_carries_a_signed_link_for_its_own_recipient(customer, make_batch):
    for name in ("ann", "bob", "cy"):
        customer("%s@example.com" % name, name.title())
    batch = make_batch(provider="email")

    run_lane_now(batch)

    assert len(mail.outbox) == 3
    for message in mail.outbox:
        token = one_click_token(message)
        value = signing.Signer(salt=SALT).unsign(token)
        assert value.startswith("r")
        assert Recipient.objects.get(pk=int(value[1:])).address == message.to[0]


@pytest.mark.django_db
@override_settings(
    SCHEDULER_APP={
        "PUBLIC_BASE_URL": "https://mail.example.com",
        "UNSUBSCRIBE_MAILTO": "leave@example.com",
    }
)
def test_a_mailto_target_is_offered_beside_the_https_link(customer, make_batch):
    customer("ann@example.com", "Ann")
    batch = make_batch(provider="email")

    run_lane_now(batch)

    https, mailto = mail.outbox[0].extra_headers["List-Unsubscribe"].split(", ")
    token = LINK.match(https)["token"]
    assert mailto == "<mailto:leave@example.com?subject=unsubscribe%%20%s>" % quote(token)


@pytest.mark.django_db
@override_settings(FORCE_SCRIPT_NAME="/app")
def test_under_a_sub_path_a_batch_links_to_the_site_s_prefix_and_the_link_works(
    client, customer, make_batch
):
    """A lane builds links on a thread whose script prefix is '/': FORCE_SCRIPT_NAME counts."""
    customer("ann@example.com", "Ann")
    batch = make_batch(provider="email")

    run_lane_now(batch)

    link = mail.outbox[0].extra_headers["List-Unsubscribe"]
    match = re.match(r"^<https://mail\.example\.com/app(?P<path>/mail/unsubscribe/[^/>]+/)>$", link)
    assert match, link
    assert client.post(match["path"]).status_code == 200  # the server strips /app
    assert Suppression.objects.filter(address="ann@example.com").exists()


@pytest.mark.django_db(transaction=True)
def test_a_transactional_message_has_no_unsubscribe_header_unless_asked_for(client):
    receipt = send_message("ann@example.com", "Your receipt", "Thanks, Ann.")
    digest = send_message(
        "bob@example.com", "Weekly digest", "Hi Bob", unsubscribe_scope="weekly-digest"
    )

    with running_worker():
        wait_for_status(receipt, Job.Status.SUCCEEDED)
        wait_for_status(digest, Job.Status.SUCCEEDED)

    by_address = {m.to[0]: m for m in mail.outbox}
    assert "List-Unsubscribe" not in by_address["ann@example.com"].extra_headers
    token = one_click_token(by_address["bob@example.com"])
    assert client.post("/mail/unsubscribe/%s/" % token).status_code == 200
    assert Suppression.objects.filter(
        address="bob@example.com", scope="weekly-digest", reason="unsubscribed"
    ).exists()


@pytest.mark.django_db(transaction=True)
def test_a_single_message_link_still_unsubscribes_after_its_job_is_pruned(client):
    """The token signs the address and scope: the link outlives job retention."""
    digest = send_message("bob@example.com", "Digest", "Hi Bob", unsubscribe_scope="digest")
    with running_worker():
        wait_for_status(digest, Job.Status.SUCCEEDED)
    token = one_click_token(mail.outbox[0])
    Job.objects.filter(pk=digest.pk).delete()  # pruned by retention

    assert client.post("/mail/unsubscribe/%s/" % token).status_code == 200
    assert Suppression.objects.filter(
        address="bob@example.com", scope="digest", reason="unsubscribed"
    ).exists()
    assert FeedbackEvent.objects.get().event_id == "link:m%s" % digest.pk


@pytest.mark.django_db
def test_a_single_message_link_sent_before_tokens_carried_the_address_still_works(client):
    """Tokens already in inboxes (``m<job id>``) keep working while their job is kept."""
    digest = send_message("bob@example.com", "Digest", "Hi Bob", unsubscribe_scope="digest")
    old_token = signing.Signer(salt=SALT).sign("m%d" % digest.pk)

    assert client.post("/mail/unsubscribe/%s/" % old_token).status_code == 200
    assert Suppression.objects.filter(address="bob@example.com", scope="digest").exists()


@pytest.mark.django_db(transaction=True)
def test_a_single_message_to_a_suppressed_address_is_skipped_not_sent():
    Suppression.objects.create(address="ann@example.com", reason="complaint", source="admin")

    job = send_message("Ann@Example.com", "Your receipt", "Thanks, Ann.")
    with running_worker():
        job = wait_for_status(job, Job.Status.SUCCEEDED)

    assert mail.outbox == []
    assert job.result == {"skipped": "suppressed: complaint (all mail)"}


@pytest.mark.django_db
def test_a_one_click_post_suppresses_at_once_and_the_next_batch_skips_the_address(
    client, customer, make_batch
):
    customer("ann@example.com", "Ann")
    customer("bob@example.com", "Bob")
    first = make_batch()
    run_lane_now(first)
    ann = recipient(first, "ann@example.com")

    # What a mail client sends for List-Unsubscribe-Post: no cookie, no CSRF token.
    response = client.post(
        unsubscribe_url(ann.pk), {"List-Unsubscribe": "One-Click"}, enforce_csrf_checks=True
    )

    assert response.status_code == 200
    row = Suppression.objects.get(address="ann@example.com")
    assert (row.scope, row.reason, row.source, row.batch_id) == (
        "tests.customers",
        "unsubscribed",
        "link",
        first.pk,
    )
    second = make_batch(name="Summer news")
    ProviderCall.objects.all().delete()
    run_lane_now(second)
    assert list(ProviderCall.objects.values_list("address", flat=True)) == ["bob@example.com"]
    skipped = recipient(second, "ann@example.com")
    assert (skipped.status, skipped.last_error) == (
        "skipped",
        "suppressed: unsubscribed (tests.customers)",
    )
    second.refresh_from_db()
    assert (second.sent, second.skipped) == (1, 1)


@pytest.mark.django_db
def test_the_page_the_one_click_post_and_the_webhook_need_no_login(client, customer, make_batch):
    customer("ann@example.com", "Ann")
    batch = make_batch()
    run_lane_now(batch)
    url = unsubscribe_url(recipient(batch, "ann@example.com").pk)

    with override_settings(MIDDLEWARE=LOGIN_REQUIRED):
        page = client.get(url)
        one_click = client.post(url, {"List-Unsubscribe": "One-Click"})
        webhook = post_webhook(client, [{"id": "w1", "type": "complaint", "address": "b@x.com"}])

    assert (page.status_code, one_click.status_code, webhook.status_code) == (200, 200, 200)
    assert set(Suppression.objects.values_list("address", flat=True)) == {
        "ann@example.com",
        "b@x.com",
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        pytest.param("multipart/form-data", b"List-Unsubscribe=One-Click", id="no-boundary"),
        pytest.param(
            "application/x-www-form-urlencoded",
            b"List-Unsubscribe=One-Click" + b"&x=1" * 1001,
            id="too-many-fields",
        ),
    ],
)
def test_a_one_click_post_whose_body_django_cannot_parse_still_unsubscribes(
    customer, make_batch, content_type, body
):
    customer("ann@example.com", "Ann")
    batch = make_batch()
    run_lane_now(batch)
    client = Client(raise_request_exception=False)

    response = client.generic(
        "POST", unsubscribe_url(recipient(batch, "ann@example.com").pk), body, content_type
    )

    assert response.status_code == 200
    assert Suppression.objects.filter(address="ann@example.com").exists()
    assert FeedbackEvent.objects.get().detail == "a POST whose body could not be read"


@pytest.mark.django_db
def test_a_get_shows_a_button_and_never_unsubscribes(client, customer, make_batch):
    customer("ann@example.com", "Ann")
    batch = make_batch()
    run_lane_now(batch)
    url = unsubscribe_url(recipient(batch, "ann@example.com").pk)

    for _ in range(3):  # link scanners follow links, sometimes more than once
        response = client.get(url)
        assert response.status_code == 200
        assert b'<form method="post">' in response.content
        assert b"ann@example.com" in response.content

    assert not Suppression.objects.exists()
    assert not FeedbackEvent.objects.exists()


@pytest.mark.django_db
def test_after_unsubscribing_an_idn_address_the_page_says_it_is_done(client, customer, make_batch):
    customer("Ann@Bücher.example", "Ann")
    batch = make_batch()
    run_lane_now(batch)
    url = unsubscribe_url(recipient(batch, "Ann@Bücher.example").pk)

    client.post(url, {"List-Unsubscribe": "One-Click"})
    response = client.get(url)

    assert "will no longer receive" in response.content.decode()
    assert b'<form method="post">' not in response.content


@pytest.mark.django_db
@pytest.mark.parametrize(
    "token",
    [
        pytest.param("tampered", id="not-signed"),
        pytest.param(signing.Signer(salt="another salt").sign("r1"), id="other-salt"),
        pytest.param(signing.Signer(salt=SALT).sign("x1"), id="unknown-kind"),
        pytest.param(signing.Signer(salt=SALT).sign_object(["m1"]), id="object-not-a-message"),
        pytest.param(signing.Signer(salt=SALT).sign_object({"m": 1}), id="message-without-address"),
        pytest.param(signing.Signer(salt=SALT).sign("r1e9"), id="not-a-number"),
        pytest.param(signing.Signer(salt=SALT).sign("r" + "9" * 30), id="too-long"),
    ],
)
def test_a_tampered_token_gets_a_clear_400_and_changes_nothing(client, token):
    for method in (client.get, client.post):
        response = method("/mail/unsubscribe/%s/" % token)
        assert response.status_code == 400
        assert b"This unsubscribe link is not valid" in response.content
    assert not Suppression.objects.exists()


@pytest.mark.django_db
def test_a_link_whose_recipient_is_no_longer_on_record_says_it_expired(
    client, customer, make_batch
):
    customer("ann@example.com", "Ann")
    batch = make_batch()
    run_lane_now(batch)
    ann = recipient(batch, "ann@example.com")
    url = unsubscribe_url(ann.pk)
    Recipient.objects.filter(pk=ann.pk).delete()  # pruned by retention

    response = client.post(url)

    assert response.status_code == 400
    assert b"This unsubscribe link has expired" in response.content
    assert not Suppression.objects.exists()


@pytest.mark.django_db
def test_an_address_too_long_once_lower_cased_gets_a_page_saying_it_cannot_be_unsubscribed(
    client, customer, make_batch, caplog
):
    """Its lower-case form does not fit the list's column: a 400 that says so, not a 500."""
    from django.core.cache import cache

    cache.clear()  # the refusals count against the client's budget of bad links
    customer(DOTTED_CAPITAL_I, "Ann")
    batch = make_batch()
    run_lane_now(batch)
    row = recipient(batch, DOTTED_CAPITAL_I)

    for method in (client.get, client.post):
        response = method(unsubscribe_url(row.pk))
        assert response.status_code == 400
        assert (
            b"This address cannot be unsubscribed automatically: in lower case it is too long "
            b"to list." in response.content
        )
    assert not FeedbackEvent.objects.exists()
    assert not Suppression.objects.exists()
    assert [r.getMessage() for r in caplog.records if r.name == "scheduler_app.feedback"] == [
        "unsubscribe refused recipient=%s job=None: its address is longer than 320 characters "
        "once lower-cased" % row.pk
    ] * 2


@pytest.mark.django_db
def test_clicking_twice_counts_once_and_suppresses_again_after_a_lift(client, customer, make_batch):
    from scheduler_app.feedback.suppressions import lift

    customer("ann@example.com", "Ann")
    batch = make_batch()
    run_lane_now(batch)
    url = unsubscribe_url(recipient(batch, "ann@example.com").pk)

    client.post(url)
    client.post(url)
    assert FeedbackEvent.objects.filter(kind="unsubscribe").count() == 1
    lift(Suppression.objects.get(), why="asked by phone to be mailed again")
    assert not Suppression.objects.exists()

    client.post(url)  # changed their mind again

    assert Suppression.objects.filter(address="ann@example.com").exists()
    assert FeedbackEvent.objects.filter(kind="unsubscribe").count() == 1


@pytest.mark.django_db
@override_settings(SCHEDULER_APP={**SCHEDULER_APP, "UNSUBSCRIBE_RATE_LIMIT": 3})
def test_bad_tokens_are_rate_limited_per_ip_but_real_unsubscribes_never_are(
    client, customer, make_batch
):
    from django.core.cache import cache

    cache.clear()
    answers = [client.get("/mail/unsubscribe/x/").status_code for _ in range(4)]
    other_ip = client.get("/mail/unsubscribe/x/", REMOTE_ADDR="10.0.0.9").status_code
    assert answers == [400, 400, 400, 429]
    assert other_ip == 400

    # One-click POSTs come from a mailbox provider's few servers: all of them count.
    for n in range(5):
        customer("c%s@example.com" % n)
    batch = make_batch()
    run_lane_now(batch)
    for row in Recipient.objects.filter(batch=batch):
        assert client.post(unsubscribe_url(row.pk)).status_code == 200
    assert Suppression.objects.count() == 5


@pytest.mark.django_db
@override_settings(SCHEDULER_APP={**SCHEDULER_APP, "PUBLIC_BASE_URL": "http://127.0.0.1:8000"})
def test_an_http_origin_gets_no_one_click_header(customer, make_batch):
    customer("ann@example.com", "Ann")
    batch = make_batch(provider="email")

    run_lane_now(batch)

    headers = mail.outbox[0].extra_headers
    assert headers["List-Unsubscribe"].startswith("<http://127.0.0.1:8000/mail/unsubscribe/")
    assert "List-Unsubscribe-Post" not in headers  # RFC 8058: HTTPS only


def test_a_scope_longer_than_a_list_name_is_refused():
    from scheduler_app.exceptions import ValidationError

    with pytest.raises(ValidationError, match="at most 100 characters"):
        send_message("ann@example.com", "Hi", "Hi", unsubscribe_scope="x" * 101)


@override_settings(ROOT_URLCONF="tests.api.urls_elsewhere")
def test_a_base_url_without_the_unsubscribe_route_is_a_check_error():
    from django.urls import clear_url_caches

    from scheduler_app.checks.urls import check_unsubscribe_route

    clear_url_caches()
    try:
        ids = [problem.id for problem in check_unsubscribe_route()]
    finally:
        clear_url_caches()
    assert ids == ["scheduler_app.E106"]


@override_settings()
def test_a_base_url_without_any_urlconf_is_a_check_error_not_a_crash():
    """A worker-only settings module may have no ROOT_URLCONF: no link could be made."""
    from django.conf import settings

    from scheduler_app.checks.urls import check_unsubscribe_route

    del settings.ROOT_URLCONF
    assert [problem.id for problem in check_unsubscribe_route()] == ["scheduler_app.E106"]


def test_a_routed_unsubscribe_view_passes_the_check():
    from scheduler_app.checks.urls import check_unsubscribe_route

    assert check_unsubscribe_route() == []
