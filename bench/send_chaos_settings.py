"""Settings for bench/send_chaos.py: tests.settings, with mail going to the bench's SMTP server.

Django's real SMTP backend, pointed at the local server the bench starts on
127.0.0.1:BENCH_SMTP_PORT. SEND_CLAIM_SECONDS, SEND_LANES and SEND_CHUNK_SIZE
come from the SCHEDULER_SEND_* environment variables tests.settings reads.
"""

from __future__ import annotations

import os

import django

from tests.settings import *  # noqa: F403

SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
EMAIL_HOST = "127.0.0.1"
EMAIL_PORT = int(os.environ.get("BENCH_SMTP_PORT", "2525"))
EMAIL_TIMEOUT = 10  # seconds: a stuck SMTP call fails (transient) instead of hanging a lane
DEFAULT_FROM_EMAIL = "news@bench.example.com"
if django.VERSION >= (6, 1):
    MAILERS = {"default": {"BACKEND": SMTP_BACKEND}}
else:
    EMAIL_BACKEND = SMTP_BACKEND
