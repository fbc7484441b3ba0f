"""A provider over Django's email backends: any EMAIL_BACKEND works (anymail too)."""

from __future__ import annotations

import hashlib
import smtplib
from typing import Any

from django.core.mail import EmailMultiAlternatives, get_connection
from django.core.mail.utils import DNS_NAME

from scheduler_app.sends.providers import PermanentSendError, TransientSendError
from scheduler_app.sends.rendering import Message


def default_mail_connection() -> Any:
    """Return a connection to the project's default mailer (MAILERS on Django 6.1+)."""
    try:
        from django.core.mail import mailers  # Django 6.1+, where get_connection() is deprecated
    except ImportError:
        return get_connection()
    return mailers.default


def message_id_for(idempotency_key: str, domain: str | None = None) -> str:
    """Return a Message-ID derived from the idempotency key: a re-send carries the same one."""
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:40]
    return "<%s@%s>" % (digest, domain or DNS_NAME)


class DjangoEmailProvider:
    """Send through django.core.mail with a deterministic Message-ID.

    The Idempotency-Key header carries the key too, for ESPs that honour it.
    SMTP 4xx and connection errors are transient; 5xx refusals are permanent.
    """

    def __init__(self) -> None:
        self.connection = default_mail_connection()

    def send(self, message: Message, idempotency_key: str) -> str:
        message_id = message_id_for(idempotency_key)
        email = EmailMultiAlternatives(
            subject=message.subject,
            body=message.text,
            to=[message.to],
            headers={"Message-ID": message_id, "Idempotency-Key": idempotency_key},
            connection=self.connection,
        )
        if message.html:
            email.attach_alternative(message.html, "text/html")
        try:
            email.send()
        except smtplib.SMTPRecipientsRefused as exc:
            codes = [code for code, _ in exc.recipients.values()]
            error = PermanentSendError if all(c >= 500 for c in codes) else TransientSendError
            raise error("Recipient refused: %s" % exc.recipients) from exc
        except smtplib.SMTPResponseException as exc:
            error = PermanentSendError if exc.smtp_code >= 500 else TransientSendError
            raise error("SMTP %s: %s" % (exc.smtp_code, exc.smtp_error)) from exc
        except (smtplib.SMTPException, OSError) as exc:
            raise TransientSendError("%s: %s" % (type(exc).__name__, exc)) from exc
        return message_id
