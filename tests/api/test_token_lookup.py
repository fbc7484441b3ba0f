"""The API's token look-up gives what DRF's ``select_related("user").get(key=...)`` gives."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scheduler_app.api.authentication import TokenAuthentication
from scheduler_app.db.tokens import token_with_user

pytestmark = pytest.mark.django_db


def values(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}


@pytest.fixture
def grace():
    """A user whose columns hold a bit of everything: booleans, a date-time, text."""
    return get_user_model().objects.create_user(
        "grace",
        email="grace@example.com",
        password="pw-grace",
        first_name="Grace",
        is_staff=True,
        last_login=dt.datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC),
    )


def test_the_token_and_its_user_have_the_values_the_orm_reads(grace, django_assert_num_queries):
    key = Token.objects.create(user=grace).key
    expected = Token.objects.select_related("user").get(key=key)

    with django_assert_num_queries(1):
        token = token_with_user(Token, key)
        user = token.user  # loaded with the token: no second query

    assert values(token) == values(expected)
    assert values(user) == values(expected.user)
    assert (type(token), type(user)) == (Token, type(grace))
    assert user.is_staff is True and user.is_superuser is False
    assert user.check_password("pw-grace")


def test_an_unknown_key_finds_nothing(grace):
    key = Token.objects.create(user=grace).key

    assert token_with_user(Token, "0" * 40) is None
    assert token_with_user(Token, key.upper()) is None  # an exact match, as the ORM's
    assert token_with_user(Token, key[:-1]) is None


def test_a_request_is_authenticated_as_the_tokens_user_with_the_token_as_auth(grace, rf):
    key = Token.objects.create(user=grace).key
    request = rf.get("/", HTTP_AUTHORIZATION="Token %s" % key)

    user, auth = TokenAuthentication().authenticate(request)

    assert (user.pk, auth.key, auth.user_id) == (grace.pk, key, grace.pk)


def test_a_key_differing_in_case_is_401_invalid_token(grace):
    key = Token.objects.create(user=grace).key
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token %s" % key.upper())

    response = client.get("/api/jobs/")

    assert response.status_code == 401
    assert response.json()["error"]["message"] == "Invalid token."
