"""suppressions/: owners list and add suppressions for their own audiences, and only those."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from scheduler_app.models import Suppression
from tests.api.conftest import client_for
from tests.api.helpers import grant, make_batch

URL = "/api/suppressions/"


@pytest.fixture
def bea(db):
    return get_user_model().objects.create_user("bea", password="pw-bea")


@pytest.fixture
def rows(ada, bea):
    make_batch(ada, audience="newsletter")
    make_batch(bea, audience="offers")
    Suppression.objects.create(
        address="a@x.com", scope="newsletter", reason="unsubscribed", source="link"
    )
    Suppression.objects.create(
        address="b@x.com", scope="offers", reason="unsubscribed", source="link"
    )
    Suppression.objects.create(address="c@x.com", scope="", reason="complaint", source="webhook")


def addresses(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["address"] for row in response.json()["results"]]


@pytest.mark.django_db
def test_an_owner_sees_only_the_suppressions_of_their_own_audiences(ada, bea, rows):
    assert addresses(client_for(ada).get(URL)) == ["a@x.com"]
    assert addresses(client_for(bea).get(URL)) == ["b@x.com"]
    assert addresses(client_for(ada).get(URL, {"address": "A@X.com"})) == ["a@x.com"]
    assert addresses(client_for(ada).get(URL, {"address": "b@x.com"})) == []


@pytest.mark.django_db
def test_staff_with_the_add_permission_see_every_scope(ada, rows):
    staff = grant(ada, "add_suppression")
    staff.is_staff = True
    staff.save()
    assert sorted(addresses(client_for(staff).get(URL))) == ["a@x.com", "b@x.com", "c@x.com"]


@pytest.mark.django_db
def test_an_owner_adds_a_suppression_to_their_audience_once(ada):
    make_batch(ada, audience="newsletter")
    client = client_for(ada)

    first = client.post(URL, {"address": "Dan@X.com", "scope": "newsletter"}, format="json")
    again = client.post(
        URL, {"address": "dan@x.com", "scope": "newsletter", "reason": "complaint"}, format="json"
    )

    assert first.status_code == 201
    assert first.json() == {
        "address": "dan@x.com",
        "scope": "newsletter",
        "reason": "manual",
        "source": "api",
        "created_at": first.json()["created_at"],
    }
    assert (again.status_code, again.json()["reason"]) == (200, "manual")
    row = Suppression.objects.get()
    assert row.created_by == ada


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"address": "d@x.com", "scope": "offers"}, "scope", "not 'offers'"),
        ({"address": "d@x.com", "scope": ""}, "scope", "not ''"),
        ({"address": "not-an-address", "scope": "newsletter"}, "address", "valid email"),
        (
            {"address": "d@x.com", "scope": "newsletter", "reason": "angry"},
            "reason",
            "valid choice",
        ),
        ({"address": 7, "scope": "newsletter"}, "address", "valid email"),
        ({"address": "d@x.com", "scope": "news\x00letter"}, "scope", "Null characters"),
    ],
)
def test_bad_input_gets_a_400_naming_the_field(ada, bea, body, field, message):
    make_batch(ada, audience="newsletter")
    make_batch(bea, audience="offers")

    response = client_for(ada).post(URL, body, format="json")

    assert response.status_code == 400
    error = response.json()["error"]
    assert message in " ".join(error["fields"][field])
    assert not Suppression.objects.exists()


@pytest.mark.django_db
def test_a_body_nested_too_deeply_to_read_is_a_400_parse_error(ada):
    make_batch(ada, audience="newsletter")
    body = b'{"address": "d@x.com", "scope": ' + b"[" * 5000 + b"]" * 5000 + b"}"

    response = client_for(ada).post(URL, body, content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "code": "parse_error",
            "message": "JSON parse error - it is nested too deeply.",
            "fields": {},
        }
    }
    assert not Suppression.objects.exists()


@pytest.mark.django_db
def test_anonymous_callers_get_401(db):
    assert client_for(None).get(URL).status_code == 401
    assert client_for(None).post(URL, {}, format="json").status_code == 401


@pytest.mark.django_db
def test_an_idn_address_is_stored_in_ascii_form_unless_that_would_not_fit(ada):
    """Punycode makes a domain longer: an address whose ASCII form passes the 320 characters
    the list stores (it could never be mailed) is kept as given, never a server error."""
    make_batch(ada, audience="newsletter")
    client = client_for(ada)
    label = "üäößéè" * 2
    long_idn = "a@%s.com" % ".".join([label] * 24)  # 317 characters; 605 in ASCII

    short = client.post(
        URL, {"address": "Ann@Bücher.example", "scope": "newsletter"}, format="json"
    )
    long = client.post(URL, {"address": long_idn, "scope": "newsletter"}, format="json")

    assert (short.status_code, short.json()["address"]) == (201, "ann@xn--bcher-kva.example")
    assert (long.status_code, long.json()["address"]) == (201, long_idn)


@pytest.mark.django_db
def test_an_address_longer_than_the_list_holds_once_lower_cased_is_a_400(ada):
    """310 characters, valid; lower-cased, each U+0130 becomes two: 610."""
    make_batch(ada, audience="newsletter")
    address = "a@" + ".".join(["\u0130" * 60] * 5) + ".com"

    response = client_for(ada).post(URL, {"address": address, "scope": "newsletter"}, format="json")

    assert response.status_code == 400, response.content
    assert "longer than 320 characters once lower-cased" in response.json()["error"]["message"]
    assert not Suppression.objects.exists()


@pytest.mark.django_db
def test_a_token_with_a_nul_is_refused_with_401():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token abc\x00def")

    assert client.get(URL).status_code == 401
