"""A settings module without ROOT_URLCONF (a worker-only deployment) starts: the checks
that read URLs skip, so `manage.py migrate` (which runs every check first) works.

The test runs django-admin in a subprocess with a settings module that takes the test
settings, drops ROOT_URLCONF (and the API docs' sidecar app) and uses a SQLite file of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SETTINGS = """\
from tests.settings import *  # noqa: F403

del ROOT_URLCONF
# Without the sidecar, the API docs check would look for the docs page in the URLs.
INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "drf_spectacular_sidecar"]  # noqa: F405
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": %r}}
SCHEDULER_APP = {**SCHEDULER_APP, "PUBLIC_BASE_URL": None}  # noqa: F405
"""


def django_admin(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``django-admin *args`` with settings that have no ROOT_URLCONF."""
    (tmp_path / "worker_settings.py").write_text(SETTINGS % str(tmp_path / "db.sqlite3"))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "worker_settings",
    }
    env.pop("DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_migrate_runs_the_checks_and_migrates_without_root_urlconf(tmp_path):
    """migrate runs every system check first (as runworker does), URL checks included."""
    result = django_admin(tmp_path, "migrate", "--no-input")

    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    assert "Applying scheduler_app.0001_initial... OK" in result.stdout
