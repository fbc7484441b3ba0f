"""The example project takes its SMTP settings from the environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import django
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(django.VERSION >= (6, 1), reason="Django 6.1 reads MAILERS")
def test_the_example_project_reads_its_smtp_settings_from_the_environment():
    environment = {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "smtp.example.com",
        "EMAIL_PORT": "587",
        "EMAIL_HOST_USER": "sender",
        "EMAIL_HOST_PASSWORD": "secret",
        "EMAIL_USE_TLS": "true",
        "EMAIL_USE_SSL": "false",
        "EMAIL_TIMEOUT": "12.5",
    }
    script = (
        "import json; from example_project import settings as s; print(json.dumps(["
        + ", ".join("s.%s" % name for name in environment)
        + "]))"
    )
    env = {**os.environ, **environment, "PYTHONPATH": str(ROOT)}
    env.pop("DATABASE_URL", None)

    output = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, check=True
    ).stdout

    assert json.loads(output) == [
        "django.core.mail.backends.smtp.EmailBackend",
        "smtp.example.com",
        587,
        "sender",
        "secret",
        True,
        False,
        12.5,
    ]
