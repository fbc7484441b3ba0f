"""Test helpers: polling with a timeout, and real runworker subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.db import connection

REPO = Path(__file__).resolve().parent.parent


def wait_until(
    predicate: Callable[[], Any],
    *,
    timeout: float = 20.0,
    interval: float = 0.02,
    message: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %ss waiting for %s" % (timeout, message))
        time.sleep(interval)


def database_url() -> str:
    """Return a DATABASE_URL for the test database this process is using."""
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return "sqlite:///%s" % settings["NAME"]
    return "postgres://%s@%s:%s/%s" % (
        settings["USER"] or "postgres",
        settings["HOST"] or "127.0.0.1",
        settings["PORT"] or 5432,
        settings["NAME"],
    )


def spawn_worker(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``manage.py runworker`` against the test database, its output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "django", "runworker", "--settings=tests.settings", *args],
        cwd=REPO,
        env={**os.environ, "DATABASE_URL": database_url(), "PYTHONUNBUFFERED": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
