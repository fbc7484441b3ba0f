"""A provider over Django's email backends: any EMAIL_BACKEND works (anymail too)."""

from __future__ import annotations

import hashlib
import smtplib
import threading
from typing import Any

from django.core.exceptions import ValidationError
from django.core.mail import EmailMultiAlternatives, get_connection
from django.core.validators import validate_email

from scheduler_app.conf import app_settings, message_id_domain
from scheduler_app.sends.providers import (
    PermanentSendError,
    SenderRefused,
    SendError,
    TransientSendError,
)
from scheduler_app.sends.rendering import Message


def default_mail_connection() -> Any:
    """Return a connection to the project's default mailer (MAILERS on Django 6.1+)."""
    try:
        from django.core.mail import mailers  # Django 6.1+, where get_connection() is deprecated
    except ImportError:
        return get_connection()
    return mailers.default


def message_id_for(idempotency_key: str, domain: str | None = None) -> str:
    """Return a Message-ID derived from the idempotency key and MESSAGE_ID_DOMAIN.

    Never from the host's name: a re-send from another worker carries the same one.
    """
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:40]
    return "<%s@%s>" % (digest, domain or message_id_domain())


class DjangoEmailProvider:
    """Send through django.core.mail with a deterministic Message-ID.

    The Idempotency-Key header carries the key too, for ESPs that honour it.
    Each thread (a lane) has its own connection, so no lane waits for another's
    call; without EMAIL_TIMEOUT each SMTP operation may take a third of
    SEND_CLAIM_SECONDS, then the call fails as transient (it may have been sent).
    Whose fault a refusal is decides what happens next: an address Django
    cannot build a message for, or 5xx on RCPT, is permanent for that
    recipient; 5xx on AUTH, MAIL FROM or DATA is SenderRefused (ours, not
    the recipient's); 4xx and connection errors are transient.
    """

    def __init__(self) -> None:
        self._local = threading.local()

    @property
    def connection(self) -> Any:
        """Return this thread's connection to the mailer."""
        try:
            return self._local.connection
        except AttributeError:
            connection = self._local.connection = default_mail_connection()
            # A server that stops answering must not hold a lane for ever.
            if getattr(connection, "timeout", False) is None:
                connection.timeout = app_settings.SEND_CLAIM_SECONDS / 3
            return connection

    def send(self, message: Message, idempotency_key: str) -> str:
        try:
            # Checked here, not left to the message's headers: how Python's email
            # package refuses a bad address differs between versions (even IndexError).
            validate_email(message.to)
        except ValidationError as exc:
            raise PermanentSendError(
                "The address %r is not a valid email address." % message.to
            ) from exc
        message_id = message_id_for(idempotency_key)
        email = EmailMultiAlternatives(
            subject=message.subject,
            body=message.text,
            to=[message.to],
            headers={
                **message.headers,
                "Message-ID": message_id,
                "Idempotency-Key": idempotency_key,
            },
            connection=self.connection,
        )
        # django-anymail passes metadata to the ESP and back in tracking events, which
        # ties a bounce or complaint to its recipient; other backends ignore it.
        email.metadata = {"scheduler_key": idempotency_key}
        if message.html:
            email.attach_alternative(message.html, "text/html")
        try:
            email.send()
        except ValueError as exc:  # Django: 'Invalid address "..."', before any network call
            raise PermanentSendError(
                "The message to %r could not be built: %s" % (message.to, exc)
            ) from exc
        except smtplib.SMTPRecipientsRefused as exc:
            raise _recipients_refused(exc) from exc
        except smtplib.SMTPResponseException as exc:
            raise _refused(exc) from exc
        except (smtplib.SMTPException, OSError) as exc:
            raise TransientSendError("%s: %s" % (type(exc).__name__, exc)) from exc
        # With django-anymail, the ESP's own id: what its tracking events name.
        esp_id = getattr(getattr(email, "anymail_status", None), "message_id", None)
        return message_id if esp_id is None else str(esp_id)


def _recipients_refused(exc: smtplib.SMTPRecipientsRefused) -> SendError:
    """Return the error for a refused RCPT: 5xx is permanent for that address, 4xx transient."""
    address, (code, text) = next(iter(exc.recipients.items()))
    if code >= 500:
        return PermanentSendError(
            "The SMTP server refused the recipient %s: %s %s" % (address, code, _text(text))
        )
    return TransientSendError(
        "The SMTP server refused the recipient %s for now: %s %s" % (address, code, _text(text))
    )


def _refused(exc: smtplib.SMTPResponseException) -> SendError:
    """Return the error for a refusal of AUTH, MAIL FROM or DATA: never the recipient's fault."""
    if isinstance(exc, smtplib.SMTPAuthenticationError):
        what = "our credentials"
    elif isinstance(exc, smtplib.SMTPSenderRefused):
        what = "the sender %s" % exc.sender
    elif isinstance(exc, smtplib.SMTPDataError):
        what = "the message"
    else:
        what = "the session"
    reply = "%s %s" % (exc.smtp_code, _text(exc.smtp_error))
    if exc.smtp_code >= 500:
        return SenderRefused("The SMTP server refused %s: %s" % (what, reply))
    return TransientSendError("The SMTP server refused %s for now: %s" % (what, reply))


def _text(reply: bytes | str) -> str:
    return reply.decode(errors="replace") if isinstance(reply, bytes) else reply
