"""The example project's links (unsubscribe, alerts) use the port it was started on (#38)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = (
    "import json; from example_project import settings as s; "
    "print(json.dumps([s.SCHEDULER_APP['PUBLIC_BASE_URL'], s.SCHEDULER_APP['ADMIN_BASE_URL']]))"
)


def base_urls(**environment: str) -> list[str]:
    env = {**os.environ, **environment, "PYTHONPATH": str(ROOT)}
    for name in ("DATABASE_URL", "PUBLIC_BASE_URL", "ADMIN_BASE_URL", "PORT"):
        if name not in environment:
            env.pop(name, None)
    output = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, capture_output=True, check=True
    ).stdout
    return json.loads(output)


def test_the_base_urls_follow_the_port_the_example_was_started_on():
    assert base_urls() == ["http://127.0.0.1:8000"] * 2
    assert base_urls(PORT="8123") == ["http://127.0.0.1:8123"] * 2


def test_a_base_url_given_outright_wins():
    assert base_urls(PORT="8123", PUBLIC_BASE_URL="https://mail.example.com") == [
        "https://mail.example.com",
        "http://127.0.0.1:8123",
    ]
