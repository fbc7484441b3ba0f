"""One-click unsubscribe (RFC 8058): signed per-recipient links and the headers that carry them.

A batch recipient's token signs ``r<recipient id>``: it carries no address, so the link
works while that row is kept (see the retention settings) and says so afterwards. A single
message's token signs its job id, address and scope: the message can sit in an inbox long
after its job is pruned, and the link must still work. Tokens of single messages sent before
(``m<job id>``) are still read, while their job is kept. Tokens are signed with Django's
signing (SECRET_KEY, and SECRET_KEY_FALLBACKS while you rotate it).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import zlib
from collections.abc import Mapping
from urllib.parse import quote

from django.conf import settings
from django.core import signing
from django.urls import get_script_prefix, get_urlconf, reverse

from scheduler_app.conf import app_settings
from scheduler_app.exceptions import (
    BadUnsubscribeToken,
    UnknownUnsubscribeToken,
    UnsuppressibleAddress,
)
from scheduler_app.feedback.suppressions import (
    MAX_ADDRESS_LENGTH,
    list_address,
    unsubscribe_scope,
)
from scheduler_app.models import Job, Recipient
from scheduler_app.sends.rendering import Message

logger = logging.getLogger("scheduler_app.feedback")

SALT = "scheduler_app.unsubscribe"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Subscriber:
    """Who a token stands for: the address, the list scope, and the batch if any."""

    address: str
    scope: str
    batch_id: int | None = None
    recipient_id: int | None = None
    job_id: int | None = None


def subscriber(token: str) -> Subscriber:
    """Return who ``token`` stands for; raise BadUnsubscribeToken or UnknownUnsubscribeToken,
    or UnsuppressibleAddress (one of the latter) if the list cannot hold its address."""
    found = _subscriber(token)
    try:
        list_address(found.address)
    except UnsuppressibleAddress:
        logger.warning(
            "unsubscribe refused recipient=%s job=%s: its address is longer than %s characters "
            "once lower-cased",
            found.recipient_id,
            found.job_id,
            MAX_ADDRESS_LENGTH,
        )
        raise
    return found


def _subscriber(token: str) -> Subscriber:
    signer = signing.Signer(salt=SALT)
    try:
        value = signer.unsign(token)
    except signing.BadSignature as exc:
        raise BadUnsubscribeToken() from exc
    if value[:1] not in ("r", "m"):
        try:
            return _message_subscriber(signer.unsign_object(token))
        except (ValueError, zlib.error) as exc:  # signed by us, but not a token we make
            raise BadUnsubscribeToken() from exc
    kind, digits = value[:1], value[1:]
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 19):
        raise BadUnsubscribeToken()
    pk = int(digits)
    if kind == "r":
        row = Recipient.objects.filter(pk=pk).values("address", "batch_id").first()
        if row is None:
            raise UnknownUnsubscribeToken()
        return Subscriber(
            address=row["address"],
            scope=unsubscribe_scope(row["batch_id"]),
            batch_id=row["batch_id"],
            recipient_id=pk,
        )
    if kind == "m":
        payload = Job.objects.filter(pk=pk).values_list("payload", flat=True).first()
        if not payload or "unsubscribe_scope" not in payload:
            raise UnknownUnsubscribeToken()
        return Subscriber(address=payload["to"], scope=payload["unsubscribe_scope"], job_id=pk)
    raise BadUnsubscribeToken()


def _message_subscriber(value: object) -> Subscriber:
    """Return who a single message's token stands for, from what the token signs."""
    if not isinstance(value, dict):
        raise BadUnsubscribeToken()
    job_id, address, scope = value.get("m"), value.get("to"), value.get("s")
    if not (isinstance(job_id, int) and isinstance(address, str) and isinstance(scope, str)):
        raise BadUnsubscribeToken()
    return Subscriber(address=address, scope=scope, job_id=job_id)


@functools.lru_cache(maxsize=16)
def _link_parts(base: str, urlconf: str, thread_prefix: str, site_prefix: str) -> tuple[str, str]:
    """Return the one-click endpoint's absolute URL around the token, reversed once per
    URLconf and script prefixes.

    The site's prefix replaces the thread's: a lane builds links on a worker thread, whose
    script prefix is '/' whatever path the site lives under.
    """
    path = reverse("scheduler_app_feedback:unsubscribe", args=[_MARKER], urlconf=urlconf)
    before, after = (site_prefix + path[len(thread_prefix) :]).split(_MARKER)
    return base.rstrip("/") + before, after


def _site_prefix() -> str:
    """Return the path the site lives under, as FORCE_SCRIPT_NAME says ('/' if unset)."""
    return (settings.FORCE_SCRIPT_NAME or "").rstrip("/") + "/"


#: Stands for the token while the URL is reversed; tokens never contain it.
_MARKER = "SCHEDULERTOKEN"


class UnsubscribeLinks:
    """Signs tokens and makes the List-Unsubscribe headers that carry them.

    The signer and the settings are read when it is made and the URL at its first use,
    not per message: a send lane makes one and adds headers to thousands of messages
    with it.
    """

    def __init__(self) -> None:
        self.signer = signing.Signer(salt=SALT)
        self.base = app_settings.PUBLIC_BASE_URL or ""
        self.mailto = app_settings.UNSUBSCRIBE_MAILTO

    def recipient_token(self, recipient_id: int) -> str:
        """Return the signed token of a batch recipient's link."""
        return self.signer.sign("r%d" % recipient_id)

    def message_token(self, job_id: int) -> str:
        """Return the signed token of a single message's link: its job id, address and
        scope, so the link outlives the job."""
        payload = Job.objects.values_list("payload", flat=True).get(pk=job_id)
        return self.signer.sign_object(
            {"m": job_id, "to": payload["to"], "s": payload["unsubscribe_scope"]}
        )

    @functools.cached_property
    def _around_token(self) -> tuple[str, str]:
        return _link_parts(
            self.base,
            get_urlconf() or settings.ROOT_URLCONF,
            get_script_prefix(),
            _site_prefix(),
        )

    def headers(self, token: str) -> dict[str, str]:
        """Return the List-Unsubscribe headers for ``token`` ({} when PUBLIC_BASE_URL is
        unset)."""
        if not self.base:
            return {}
        before, after = self._around_token
        targets = "<%s%s%s>" % (before, token, after)
        if self.mailto:
            targets += ", <mailto:%s?subject=%s>" % (self.mailto, quote("unsubscribe %s" % token))
        found = {"List-Unsubscribe": targets}
        if self.base.startswith("https://"):
            # RFC 8058: one-click only with an HTTPS URI (an http:// origin is for development).
            found["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
        return found

    def add(self, message: Message, token: str) -> Message:
        """Return ``message`` with the List-Unsubscribe headers of ``token`` added."""
        return dataclasses.replace(message, headers={**message.headers, **self.headers(token)})


def recipient_token(recipient_id: int) -> str:
    """Return the signed token of a batch recipient's link."""
    return UnsubscribeLinks().recipient_token(recipient_id)


def message_token(job_id: int) -> str:
    """Return the signed token of a single message's link."""
    return UnsubscribeLinks().message_token(job_id)


def headers(token: str) -> Mapping[str, str]:
    """Return the List-Unsubscribe headers for ``token`` ({} when PUBLIC_BASE_URL is unset)."""
    return UnsubscribeLinks().headers(token)


def with_unsubscribe(message: Message, token: str) -> Message:
    """Return ``message`` with the List-Unsubscribe headers of ``token`` added."""
    return UnsubscribeLinks().add(message, token)
