"""A bad SCHEDULER_APP value must not crash Django's start: `manage.py check` reports it.

Each test runs `django check` in a subprocess with a settings module that takes the
test settings and changes SCHEDULER_APP, as a project's would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_check(tmp_path: Path, scheduler_app: str) -> subprocess.CompletedProcess[str]:
    """Run `django check` with SCHEDULER_APP set to the Python expression ``scheduler_app``."""
    (tmp_path / "fuzzed_settings.py").write_text(
        "from tests.settings import *  # noqa: F403\n\nSCHEDULER_APP = %s\n" % scheduler_app
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "fuzzed_settings",
    }
    return subprocess.run(
        [sys.executable, "-m", "django", "check"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("value", ["'QUEUES'", "5", "True", "[('QUEUES', ['default'])]"])
def test_a_scheduler_app_that_is_not_a_dict_is_reported_not_a_crash(tmp_path, value):
    result = run_check(tmp_path, value)

    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1
    assert "scheduler_app.E001" in result.stderr
    assert "SCHEDULER_APP must be a dict" in result.stderr


@pytest.mark.parametrize(
    ("key", "value", "check_id"),
    [
        ("DEFAULT_TIMEOUT", "'abc'", "scheduler_app.E008"),
        ("DEFAULT_TIMEOUT", "float('nan')", "scheduler_app.E008"),
        ("DEFAULT_TIMEOUT", "1e300", "scheduler_app.E008"),
        ("DEFAULT_TIMEOUT", "-1", "scheduler_app.E008"),
        ("DEFAULT_MAX_ATTEMPTS", "'abc'", "scheduler_app.E004"),
        ("DEFAULT_MAX_ATTEMPTS", "None", "scheduler_app.E004"),
        ("DEFAULT_MAX_ATTEMPTS", "0", "scheduler_app.E004"),
    ],
)
def test_a_bad_task_default_is_reported_not_a_crash_at_import(tmp_path, key, value, check_id):
    """The built-in tasks are registered at import with these defaults."""
    result = run_check(tmp_path, "{**SCHEDULER_APP, %r: %s}" % (key, value))

    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1
    assert "%s) SCHEDULER_APP[%r]" % (check_id, key) in result.stderr
