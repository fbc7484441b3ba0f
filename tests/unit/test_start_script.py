"""example_project/start.sh refuses a port that is taken before it sets anything up, instead of
announcing the demo at an address another program serves."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

from tests.helpers import REPO


def test_start_script_refuses_a_port_in_use_and_says_how_to_pick_another(tmp_path):
    # A copy: the script works in the directory above its own, which here holds nothing.
    script = tmp_path / "example_project" / "start.sh"
    script.parent.mkdir()
    shutil.copy(REPO / "example_project" / "start.sh", script)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = subprocess.run(
            ["bash", str(script)],
            env={**os.environ, "PORT": str(port), "PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert result.returncode == 1
    assert result.stderr == (
        "Port %s on 127.0.0.1 is in use (is the demo already running?). "
        "Pick another: PORT=8001 bash example_project/start.sh\n" % port
    )
    assert result.stdout == ""  # nothing set up
    assert not (tmp_path / ".venv").exists()
