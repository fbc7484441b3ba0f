"""runworker without --executor celery never loads Celery (only scheduler_app.celery imports it)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import REPO, database_url

pytestmark = pytest.mark.django_db(transaction=True)

#: Runs runworker for a moment in a fresh interpreter, then prints the Celery modules it loaded.
SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, threading

    import django

    django.setup()
    from django.core.management import call_command

    threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
    call_command("runworker", "--poll-interval", "0.2")
    print("loaded:", sorted(m for m in sys.modules if m.split(".")[0] in ("celery", "kombu")
                            or m.startswith("scheduler_app.celery")))
    """
)


def test_runworker_without_the_celery_executor_never_imports_celery():
    """A whole runworker run, start to graceful stop, leaves celery and kombu unimported."""
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO,
        env={
            **os.environ,
            "DATABASE_URL": database_url(),
            "DJANGO_SETTINGS_MODULE": "tests.settings",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "worker stopped" in result.stdout + result.stderr
    assert "loaded: []" in result.stdout, result.stdout
