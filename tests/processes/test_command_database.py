"""Management commands facing a database they cannot use: one line saying why, exit 1.

An operator (or a deploy script) runs these before the database is up or before
`migrate`; a traceback there reads like a bug in scheduler_app.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO

UNREACHABLE = "postgres://postgres@127.0.0.1:1/x"

pytestmark = pytest.mark.django_db


def run(command, *args, database_url):
    return subprocess.run(
        [sys.executable, "-m", "django", command, "--settings=tests.settings", *args],
        cwd=REPO,
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def unmigrated(tmp_path):
    """The URL of an empty database: it exists and answers, nothing was migrated."""
    return "sqlite:///%s" % (tmp_path / "empty.sqlite3")


@pytest.mark.parametrize(
    "args",
    [["scheduler_prune"], ["scheduler_prune", "--dry-run"], ["sync_schedules", "--prune"]],
    ids=" ".join,
)
def test_a_command_on_an_unreachable_database_says_so_in_one_line(args):
    result = run(*args, database_url=UNREACHABLE)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("CommandError: The database cannot be reached: "), result.stderr


@pytest.mark.parametrize(
    "args",
    [["scheduler_prune"], ["sync_schedules"], ["runworker", "--no-alerts"]],
    ids=" ".join,
)
def test_a_command_on_an_unmigrated_database_asks_for_migrate(args, unmigrated):
    result = run(*args, database_url=unmigrated)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert re.fullmatch(
        r"CommandError: The database has not been migrated: \d+ of scheduler_app's migrations "
        r"are not applied \(the first: 0001_initial\)\. Run manage\.py migrate first\.",
        result.stderr.splitlines()[-1],
    ), result.stderr
