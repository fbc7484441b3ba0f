"""Public endpoints: one-click unsubscribe (RFC 8058) and the signed feedback webhook.

Neither needs a login. The unsubscribe URL is rate-limited per client IP
(UNSUBSCRIBE_RATE_LIMIT a minute); the webhook is authenticated by an HMAC of its body.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import logging
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.cache import cache
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation, ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import render
from django.utils.dateparse import parse_datetime
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from scheduler_app import clock
from scheduler_app.conf import app_settings
from scheduler_app.exceptions import (
    BadUnsubscribeToken,
    UnknownUnsubscribeToken,
    UnmatchedFeedback,
)
from scheduler_app.feedback import unsubscribe
from scheduler_app.feedback.suppressions import (
    Feedback,
    Kind,
    is_storable_text,
    normalise,
    record_event,
    source_event_id,
    storable_address,
    suppress,
)
from scheduler_app.models import Suppression

logger = logging.getLogger("scheduler_app.feedback")

#: The earliest occurred_at the webhook accepts.
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

#: The header that carries the webhook body's HMAC-SHA256, as "sha256=<hex>".
SIGNATURE_HEADER = "X-Scheduler-Signature"


def _over_rate_limit(request: HttpRequest) -> bool:
    """Count this request against its IP's budget for the current minute."""
    minute = int(clock.now().timestamp() // 60)
    key = "scheduler_app:unsubscribe:%s:%s" % (request.META.get("REMOTE_ADDR", ""), minute)
    cache.add(key, 0, timeout=120)
    try:
        count = cache.incr(key)
    except ValueError:  # evicted between add and incr
        count = 1
    return count > app_settings.UNSUBSCRIBE_RATE_LIMIT


def _how_posted(request: HttpRequest) -> str:
    """Return how an unsubscribe was posted, for its event's detail. The body never decides
    whether it happens: one Django cannot parse (a bad multipart boundary, too many fields)
    unsubscribes all the same."""
    try:
        one_click = "List-Unsubscribe" in request.POST
    except (SuspiciousOperation, MultiPartParserError, ValueError):
        return "a POST whose body could not be read"
    return "one-click" if one_click else "confirmation page"


@method_decorator(csrf_exempt, name="dispatch")
@method_decorator(login_not_required, name="dispatch")  # public: LoginRequiredMiddleware
class UnsubscribeView(View):
    """GET shows a confirmation page with a button; POST unsubscribes at once.

    GET never unsubscribes: link scanners follow links. Mail clients that honour
    List-Unsubscribe-Post send ``List-Unsubscribe=One-Click`` in a POST without cookies.
    """

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            self.subscriber = unsubscribe.subscriber(kwargs["token"])
        except (BadUnsubscribeToken, UnknownUnsubscribeToken) as exc:
            # Only tokens that are no good count against the client's budget: one-click
            # POSTs come from the mailbox providers' servers, many users behind one address.
            if _over_rate_limit(request):
                logger.warning(
                    "unsubscribe requests over the rate limit ip=%s",
                    request.META.get("REMOTE_ADDR", ""),
                )
                response = self._page(
                    request,
                    "Too many requests",
                    "Too many requests from your address; try again in a minute.",
                    status=429,
                )
                response["Retry-After"] = "60"
                return response
            return self._page(request, "Link not valid", exc.message, status=400)
        return super().dispatch(request, *args, **kwargs)

    def get(self, request: HttpRequest, token: str) -> HttpResponse:
        done = Suppression.objects.filter(
            address=normalise(self.subscriber.address),
            scope__in={"", self.subscriber.scope},
        ).exists()
        return render(
            request,
            "scheduler_app/unsubscribe.html",
            {"subscriber": self.subscriber, "done": done, "title": "Unsubscribe"},
        )

    def post(self, request: HttpRequest, token: str) -> HttpResponse:
        who = self.subscriber
        event = Feedback(
            event_id="link:r%s" % who.recipient_id if who.recipient_id else "link:m%s" % who.job_id,
            kind=Kind.UNSUBSCRIBE,
            source=Suppression.Source.LINK,
            address=who.address,
            recipient_id=who.recipient_id,
            scope=who.scope,
            detail=_how_posted(request),
        )
        if record_event(event) is None:
            # Clicked before: the event counts once, but the address is suppressed again
            # in case an operator lifted it since.
            suppress(
                who.address,
                reason=Suppression.Reason.UNSUBSCRIBED,
                source=Suppression.Source.LINK,
                scope=who.scope,
            )
        return render(
            request,
            "scheduler_app/unsubscribe.html",
            {"subscriber": who, "done": True, "title": "Unsubscribed"},
        )

    def _page(self, request: HttpRequest, title: str, message: str, *, status: int) -> HttpResponse:
        return render(
            request,
            "scheduler_app/unsubscribe.html",
            {"title": title, "error": message},
            status=status,
        )


@method_decorator(csrf_exempt, name="dispatch")
@method_decorator(login_not_required, name="dispatch")  # public: LoginRequiredMiddleware
class FeedbackWebhookView(View):
    """Bounces, complaints and unsubscribes from any source, as signed JSON.

    POST ``{"events": [{"id", "type", "address"?, "message_id"?, "key"?, "occurred_at"?,
    "detail"?}]}`` with ``X-Scheduler-Signature: sha256=<HMAC-SHA256 of the body with
    FEEDBACK_WEBHOOK_SECRET>``. ``type`` is unsubscribe, hard_bounce, soft_bounce or
    complaint; ``key`` is the idempotency key ``<batch>:<recipient key>`` and ``message_id``
    the provider's message id (either ties the event to its recipient). Events already
    recorded (by ``id``) are counted as duplicates and change nothing; an event without an
    address that ties back to no recipient is listed under ``unmatched``.
    """

    http_method_names = ["post"]

    def post(self, request: HttpRequest) -> HttpResponse:
        secret = app_settings.FEEDBACK_WEBHOOK_SECRET
        if not secret:
            return _problem(403, "The feedback webhook is off: FEEDBACK_WEBHOOK_SECRET is not set.")
        try:
            body = request.body
        except RequestDataTooBig:
            return _problem(
                413,
                "The body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE (%s bytes): send fewer "
                "events per request." % settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
            )
        given = request.headers.get(SIGNATURE_HEADER, "")
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(given.encode(), expected.encode()):
            return _problem(
                403, "The %s header is missing or does not match the body." % SIGNATURE_HEADER
            )
        try:
            events = [_feedback(item) for item in _items(body)]
        except ValueError as exc:
            return _problem(400, str(exc))
        outcome = {"recorded": 0, "duplicates": 0, "unmatched": []}
        for event in events:
            try:
                recorded = record_event(event)
            except UnmatchedFeedback as exc:
                logger.warning("feedback event unmatched event=%s", event.event_id)
                outcome["unmatched"].append({"id": event.event_id, "message": exc.message})
                continue
            outcome["recorded" if recorded is not None else "duplicates"] += 1
        return JsonResponse(outcome)


#: The error code of each status the webhook answers with.
_CODES = {400: "invalid", 403: "forbidden", 413: "too_large"}


def _problem(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": _CODES[status], "message": message}}, status=status)


def _items(body: bytes) -> list[dict[str, Any]]:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError("The body is not JSON: %s." % exc) from exc
    except RecursionError as exc:
        raise ValueError("The body is not JSON: it is nested too deeply.") from exc
    items = data.get("events") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise ValueError('The body must be {"events": [...]} with at least one event.')
    if len(items) > 1000:
        raise ValueError("At most 1000 events per request.")
    return items


def _feedback(item: Any) -> Feedback:
    if not isinstance(item, dict):
        raise ValueError("Each event must be a JSON object.")
    text = {}
    for name in ("id", "type", "address", "message_id", "key", "occurred_at", "detail"):
        value = item.get(name, "")
        if not isinstance(value, str) or not is_storable_text(value):
            raise ValueError(
                "Event field %r must be a string without NUL characters or lone surrogates." % name
            )
        text[name] = value
    if not text["id"]:
        raise ValueError('Each event needs an "id": the source\'s own id of the event.')
    if text["type"] not in Kind.values:
        raise ValueError(
            "Event %r has type %r; expected one of %s."
            % (text["id"], text["type"], ", ".join(Kind.values))
        )
    if not (text["address"] or text["message_id"] or text["key"]):
        raise ValueError("Event %r needs an address, a message_id or a key." % text["id"])
    if text["address"]:
        try:
            storable_address(text["address"])
        except ValidationError as exc:
            raise ValueError("Event %r: %s" % (text["id"], exc.messages[0])) from exc
    if len(text["message_id"]) > 255 or len(text["key"]) > 600:
        raise ValueError("Event %r: message_id or key is too long." % text["id"])
    occurred = None
    if text["occurred_at"]:
        try:
            occurred = parse_datetime(text["occurred_at"])
        except ValueError:  # well formed but impossible, e.g. month 13
            occurred = None
        if occurred is None or occurred.tzinfo is None:
            raise ValueError("Event %r: occurred_at must be ISO 8601 with an offset." % text["id"])
        # A day of slack for the source's clock; outside it a date is a mistake (and year 1
        # or 9999 overflows in UTC or in the soft-bounce window).
        if not EPOCH <= occurred <= clock.now() + dt.timedelta(days=1):
            raise ValueError(
                "Event %r: occurred_at must lie between 1970 and a day from now." % text["id"]
            )
    return Feedback(
        event_id=source_event_id("webhook", text["id"]),
        kind=text["type"],
        source=Suppression.Source.WEBHOOK,
        address=text["address"],
        message_id=text["message_id"],
        idempotency_key=text["key"],
        occurred_at=occurred,
        detail=text["detail"],
    )
