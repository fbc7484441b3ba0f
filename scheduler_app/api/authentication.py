"""Token authentication for the API: DRF's, with the token look-up compiled once."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions

from scheduler_app.db.tokens import token_with_user


class TokenAuthentication(authentication.TokenAuthentication):
    """DRF's TokenAuthentication: same header, same checks, same messages.

    Only the look-up differs: DRF's ``select_related("user").get(key=...)``
    is rebuilt by the ORM on every request, which cost about a third of an
    undo's CPU; scheduler_app.db.tokens runs the same SQL, compiled once.
    A ``model`` other than DRF's Token, and a user model with parents, are
    looked up as DRF does.
    """

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        model = self.get_model()
        from rest_framework.authtoken.models import Token

        user_model = model._meta.get_field("user").related_model
        if model is not Token or user_model._meta.parents:
            # Another token model, or a user model whose columns live in more than
            # one table (inheritance) or that is a proxy: the ORM's own look-up.
            return super().authenticate_credentials(key)
        # A NUL is in no key, and PostgreSQL refuses it in text: not a 500.
        token = None if "\x00" in key else token_with_user(model, key)
        if token is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        return (token.user, token)
