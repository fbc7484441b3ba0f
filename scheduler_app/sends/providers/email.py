"""A provider over Django's email backends: any EMAIL_BACKEND works (anymail too)."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import select
import smtplib
import threading
import time
from typing import Any

from django.core.exceptions import ValidationError
from django.core.mail import EmailMultiAlternatives, get_connection
from django.utils.encoding import punycode

from scheduler_app.conf import app_settings, message_id_domain
from scheduler_app.sends.addresses import validate_address
from scheduler_app.sends.providers import (
    PermanentSendError,
    RecipientRefused,
    RefusedAtRcpt,
    SenderRefused,
    SendError,
    SlowDown,
    TransientSendError,
)
from scheduler_app.sends.providers.esp import THROTTLED_DELAY, esp_error, unsupported_metadata
from scheduler_app.sends.rendering import Message

#: How long a lane waits when the mail server cannot be reached (nothing was sent).
UNREACHABLE_DELAY = dt.timedelta(seconds=30)
#: A session idle this long (seconds) is asked with a NOOP whether it is still there before
#: the next message: a connection a NAT or a firewall forgot ends without a word.
ASK_AFTER_IDLE = 10.0


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
    An IDN domain is written in punycode: a msg-id is ASCII (RFC 5322).
    """
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:40]
    return "<%s@%s>" % (digest, punycode(domain or message_id_domain()))


class DjangoEmailProvider:
    """Send through django.core.mail with a deterministic Message-ID.

    The Idempotency-Key header carries the key too, for ESPs that honour it.
    Each thread (a lane) has its own connection, kept open from one recipient
    to the next, so no lane waits for another's call; without EMAIL_TIMEOUT
    each SMTP operation may take a third of SEND_CLAIM_SECONDS, then the call
    fails as transient (it may have been sent).
    Whose fault a refusal is decides what happens next: an address Django
    cannot build a message for, or 5xx on RCPT, is permanent for that
    recipient (RecipientRefused, which the breaker does not count, when the
    address is invalid or the enhanced code names the address or mailbox);
    5xx on AUTH, MAIL FROM or DATA is SenderRefused (ours, not the
    recipient's); 421, and 4xx X.7.x (policy, e.g. a rate), at RCPT, MAIL
    FROM or DATA, are SlowDown (the server paces us: the lane's window shrinks,
    nobody is charged); other 4xx, timeouts and dropped connections are
    transient; a server that cannot be reached (nothing was sent) is SlowDown.
    An RFC 3463 enhanced code overrides the stage (one recipient per
    transaction): X.1/X.2 (address, mailbox) at RCPT or DATA is the
    recipient's, 5xx X.3/X.5/X.7 (system, protocol, policy) and X.1.7/X.1.8
    (our sender's address) at RCPT is ours.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        #: The backend refused metadata once (see _send): send without from then on.
        self.without_metadata = False

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

    def _open(self) -> Any:
        """Return this thread's connection, open: SlowDown if the server cannot be
        reached or greets with 4xx, SenderRefused if it refuses us (e.g. 535 on AUTH)."""
        connection = self.connection
        if not _alive(connection, idle=time.monotonic() - getattr(self._local, "used_at", 0.0)):
            connection.close()
        try:
            connection.open()
        except (smtplib.SMTPException, OSError) as exc:  # refused, timed out, unknown host
            connection.close()
            if isinstance(exc, smtplib.SMTPResponseException) and exc.smtp_code >= 500:
                raise _refused(exc, "") from exc
            raise _unreachable(exc) from exc
        return connection

    def close(self) -> None:
        """Close this thread's connection (its lane is done)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()

    def send(self, message: Message, idempotency_key: str) -> str:
        try:
            # Checked here, not left to the message's headers: how Python's email
            # package refuses a bad address differs between versions (even IndexError).
            validate_address(message.to)  # the dry-run's rule too (sends.addresses)
        except ValidationError as exc:
            raise RecipientRefused(
                "The address %r is not a valid email address." % message.to
            ) from exc
        connection = self._open()
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
            connection=connection,
        )
        if message.html:
            email.attach_alternative(message.html, "text/html")
        try:
            self._send(email, idempotency_key)
        except Exception as exc:
            error = _send_error(exc, message.to, connection)
            if error is exc:
                raise
            raise error from exc
        finally:
            self._local.used_at = time.monotonic()
        # With django-anymail, the ESP's own id: what its tracking events name.
        esp_id = getattr(getattr(email, "anymail_status", None), "message_id", None)
        return message_id if esp_id is None else str(esp_id)

    def _send(self, email: EmailMultiAlternatives, idempotency_key: str) -> None:
        """Send ``email``, with metadata where the backend can carry it.

        django-anymail passes metadata to the ESP and back in tracking events, which
        ties a bounce or complaint to its recipient; other backends ignore it. A backend
        that cannot carry it (anymail's Postal) refuses it before any call: the message
        goes without, as do the next ones, and feedback finds the recipient by the ESP's
        message id.
        """
        if not self.without_metadata:
            email.metadata = {"scheduler_key": idempotency_key}
        try:
            email.send()
        except Exception as exc:
            if not unsupported_metadata(exc):
                raise
            self.without_metadata = True
            del email.metadata
            email.send()


def _send_error(exc: Exception, address: str, connection: Any) -> Exception:
    """Return the SendError that what the backend raised means (``exc`` itself if nothing
    we know of): an ESP's answer through django-anymail first, then an SMTP server's."""
    refusal = esp_error(exc, address)
    if refusal is not None:
        return refusal
    if isinstance(exc, ValueError):  # Django: 'Invalid address "..."', before any network call
        return PermanentSendError("The message to %r could not be built: %s" % (address, exc))
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return _recipients_refused(exc)
    if isinstance(exc, smtplib.SMTPResponseException):
        return _refused(exc, address)
    if isinstance(exc, smtplib.SMTPException | OSError):
        # The session is in an unknown state (a reply may still come): start afresh.
        connection.close()
        return TransientSendError("%s: %s" % (type(exc).__name__, exc))
    return exc


#: An RFC 3463 enhanced status code opening a reply: class.subject.detail.
ENHANCED_CODE = re.compile(r"[245]\.(\d{1,3}\.\d{1,3})(?!\S)")
#: Subjects about the recipient: addressing (X.1.x), mailbox (X.2.x).
RECIPIENT_SUBJECTS = frozenset({"1", "2"})
#: Subjects about us: mail system (X.3.x), protocol (X.5.x), security or policy (X.7.x).
OUR_SUBJECTS = frozenset({"3", "5", "7"})
#: Addressing codes about our sender, not the recipient: bad sender's mailbox syntax (X.1.7),
#: bad sender's system address (X.1.8). Postfix answers its sender checks at RCPT.
SENDER_CODES = frozenset({"1.7", "1.8"})


def _alive(connection: Any, *, idle: float) -> bool:
    """Return False if the server ended the connection's SMTP session (idle, or enough).

    A server that hangs up closes the connection, often after a 421: either leaves
    something to read, seen without a round trip. A session idle for ASK_AFTER_IDLE
    seconds is asked with a NOOP as well (a NOOP before every message cost a round trip
    and a command at the server per message).
    """
    session = getattr(connection, "connection", None)
    if not isinstance(session, smtplib.SMTP):
        return True
    sock = session.sock
    if sock is None:
        return False
    try:
        if getattr(sock, "pending", int)() or select.select([sock], [], [], 0)[0]:
            return False
        return idle < ASK_AFTER_IDLE or session.noop()[0] == 250
    except (smtplib.SMTPException, OSError, ValueError):
        return False


def _unreachable(exc: Exception) -> SlowDown:
    """Return the error for a failure to open a session: nothing was sent, the lane waits."""
    if isinstance(exc, smtplib.SMTPResponseException):
        reason = "%s %s" % (exc.smtp_code, _text(exc.smtp_error))
    else:
        reason = "%s: %s" % (type(exc).__name__, exc)
    return SlowDown(UNREACHABLE_DELAY, "The SMTP server cannot be reached: %s" % reason)


def _code(reply: str) -> str:
    """Return the subject and detail of the reply's enhanced status code ("1.1"), '' if it
    has none."""
    match = ENHANCED_CODE.match(reply)
    return match.group(1) if match else ""


def _subject(reply: str) -> str:
    """Return the subject of the reply's enhanced status code, '' if it has none."""
    return _code(reply).partition(".")[0]


def _names_recipient(reply: str) -> bool:
    """Return True if the reply's enhanced code is about the recipient's address or mailbox."""
    return _subject(reply) in RECIPIENT_SUBJECTS and _code(reply) not in SENDER_CODES


def _names_us(reply: str) -> bool:
    """Return True if the reply's enhanced code is about us: our system, protocol, policy
    standing or sender address."""
    return _subject(reply) in OUR_SUBJECTS or _code(reply) in SENDER_CODES


def _throttles(code: int, reply: str) -> bool:
    """Return True if the reply is the server pacing us: 421 (it closes the session), or 4xx
    X.7.x (a policy such as a rate), whatever command it answered."""
    return code == 421 or (400 <= code < 500 and _subject(reply) == "7")


def _slow_down(code: int, reply: str) -> SlowDown:
    """Return the error for a throttling answer: nobody's fault, nothing was sent."""
    return SlowDown(THROTTLED_DELAY, "The SMTP server asks us to slow down: %s %s" % (code, reply))


def _recipients_refused(exc: smtplib.SMTPRecipientsRefused) -> SendError:
    """Return the error for a refused RCPT: the recipient's, unless a 5xx says it is ours or
    the server paces us."""
    address, (code, text) = next(iter(exc.recipients.items()))
    reply = _text(text)
    if _throttles(code, reply):
        return _slow_down(code, reply)
    if code >= 500 and _names_us(reply):  # e.g. 554 5.7.1 Relay access denied
        return RefusedAtRcpt(
            "The SMTP server refused us (not the recipient %s): %s %s" % (address, code, reply)
        )
    return _recipient_refused(address, code, reply)


def _recipient_refused(address: str, code: int, reply: str) -> SendError:
    """Return the error for a refusal of the recipient: 5xx permanent (RecipientRefused when
    its enhanced code names the address or mailbox), 4xx transient."""
    if code >= 500:
        error = RecipientRefused if _names_recipient(reply) else PermanentSendError
        return error("The SMTP server refused the recipient %s: %s %s" % (address, code, reply))
    return TransientSendError(
        "The SMTP server refused the recipient %s for now: %s %s" % (address, code, reply)
    )


def _refused(exc: smtplib.SMTPResponseException, address: str) -> SendError:
    """Return the error for a refusal of AUTH, MAIL FROM or DATA: ours, unless the reply
    to DATA is about the recipient's address or mailbox (e.g. 552 5.2.2 Mailbox full)."""
    reply = _text(exc.smtp_error)
    if _throttles(exc.smtp_code, reply):
        return _slow_down(exc.smtp_code, reply)
    if isinstance(exc, smtplib.SMTPDataError) and _names_recipient(reply):
        return _recipient_refused(address, exc.smtp_code, reply)
    if isinstance(exc, smtplib.SMTPAuthenticationError):
        what = "our credentials"
    elif isinstance(exc, smtplib.SMTPSenderRefused):
        what = "the sender %s" % exc.sender
    elif isinstance(exc, smtplib.SMTPDataError):
        what = "the message"
    else:
        what = "the session"
    if exc.smtp_code >= 500:
        return SenderRefused("The SMTP server refused %s: %s %s" % (what, exc.smtp_code, reply))
    return TransientSendError(
        "The SMTP server refused %s for now: %s %s" % (what, exc.smtp_code, reply)
    )


def _text(reply: bytes | str) -> str:
    return reply.decode(errors="replace") if isinstance(reply, bytes) else reply
