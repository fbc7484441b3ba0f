"""Real runworker subprocesses: start them, read their output, signal them, always kill them."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection

from tests.helpers import spawn_worker, wait_until


class WorkerProcess:
    """A ``runworker`` subprocess whose merged stdout/stderr is collected by a reader thread."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.proc: subprocess.Popen = spawn_worker(*args, env=env)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_for_output(self, text: str, *, timeout: float = 20.0) -> None:
        """Wait until ``text`` appears in the output; fail (showing the output) otherwise."""
        try:
            wait_until(lambda: text in self.output, timeout=timeout, message=repr(text))
        except AssertionError as exc:
            raise AssertionError("%s\n--- worker output ---\n%s" % (exc, self.output)) from None

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait_exit(self, timeout: float = 20.0) -> int:
        """Wait for the process to exit and its output to be read; return the exit status."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                "worker did not exit within %ss\n--- worker output ---\n%s" % (timeout, self.output)
            ) from None
        self._reader.join(5)
        return code

    def pause(self) -> None:
        """SIGSTOP the worker, at a moment it holds no SQLite write lock.

        A process stopped inside a SQLite write transaction would lock every
        other writer out; PostgreSQL locks of a stopped client do not block
        anything these tests do, but the same retry is harmless there.
        """
        for _ in range(100):
            self.signal(signal.SIGSTOP)
            wait_until(lambda: _process_state(self.pid) == "T", timeout=5, message="SIGSTOP")
            if connection.vendor != "sqlite" or _sqlite_writable(connection.settings_dict["NAME"]):
                return
            self.signal(signal.SIGCONT)
            time.sleep(0.01)  # let it finish its write before trying again
        raise AssertionError("could not stop the worker outside a SQLite write transaction")

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the process (stopped or not) if it still runs, and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _process_state(pid: int) -> str:
    """Return the one-letter state of ``pid`` from /proc (R, S, T, Z, ...)."""
    stat = Path("/proc/%s/stat" % pid).read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def _sqlite_writable(path: str) -> bool:
    """Return True if a write transaction can start on the SQLite file right now."""
    probe = sqlite3.connect(path, timeout=0.5, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()


@pytest.fixture
def start_worker() -> Iterator[Callable[..., WorkerProcess]]:
    """Return a function that starts a runworker subprocess; every one is killed afterwards."""
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        worker = WorkerProcess(*args, env=env)
        started.append(worker)
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.kill()
