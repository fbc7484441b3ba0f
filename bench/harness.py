"""Helpers shared by bench/worker.py, bench/sends.py and bench/api.py.

Not a benchmark itself: the scripts import it as a sibling module (they are
run as ``python bench/<name>.py``, so bench/ is on sys.path).
"""

from __future__ import annotations

import collections
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent

#: Appended to a results heading when py-spy was attached.
PROFILED_NOTE = " (PROFILED: py-spy attached, figures perturbed)"


def env_int(name: str, default: int, minimum: int = 1) -> int:
    """Return the integer environment variable ``name`` (or ``default``), at least ``minimum``."""
    value = int(os.environ.get(name, default))
    if value < minimum:
        raise SystemExit("%s must be at least %s" % (name, minimum))
    return value


def stop_process(
    proc: subprocess.Popen, sig: int, timeout: float, kill_timeout: float | None = None
) -> None:
    """Send ``sig`` to a running ``proc``, wait ``timeout`` s, then kill it if still alive."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(kill_timeout)


# -- database and Django set-up ----------------------------------------------------------


def recreate_database(url: str) -> None:
    """DROP and CREATE the database ``url`` names, through the ``postgres`` database."""
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    if not name or name in ("postgres", "template0", "template1"):
        raise SystemExit("refusing to drop database %r" % name)
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def setup_django(
    url: str, settings_module: str = "tests.settings", log_level: str | None = "WARNING"
) -> None:
    """Point Django at ``url`` with ``settings_module`` and run django.setup() (no migrate).

    ``log_level`` is the default LOG_LEVEL for this process's own scheduler_app logs
    (None: leave LOG_LEVEL alone).
    """
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    if log_level is not None:
        os.environ.setdefault("LOG_LEVEL", log_level)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import django

    django.setup()


def migrate(run_syncdb: bool = False) -> None:
    """Apply the migrations (``run_syncdb``: also create tables of apps without any)."""
    from django.core.management import call_command

    if run_syncdb:
        call_command("migrate", run_syncdb=True, verbosity=0, interactive=False)
    else:
        call_command("migrate", verbosity=0, interactive=False)


# -- runworker subprocesses ----------------------------------------------------------------


class WorkerProcess:
    """A ``runworker`` subprocess whose merged stdout/stderr a thread reads.

    ``on_line`` (override it) sees every line as it arrives.
    """

    stop_timeout = 20.0

    def __init__(self, command: list[str], env: dict[str, str], keep_lines: int) -> None:
        env = {
            **os.environ,
            **env,
            "PYTHONUNBUFFERED": "1",
            # INFO, not WARNING: the "worker started" line waited for is logged at INFO.
            # A worker logs nothing per job at INFO, only start, stop and summaries.
            "LOG_LEVEL": "INFO",
        }
        self.proc = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.pid = self.proc.pid
        self.started = threading.Event()
        self.lines: collections.deque[str] = collections.deque(maxlen=keep_lines)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if "worker started" in line:
                self.started.set()
            self.on_line(line)

    def on_line(self, line: str) -> None:
        """Called by the reader thread for each output line."""

    def output(self) -> str:
        return "\n".join(self.lines)

    def stop(self) -> None:
        stop_process(self.proc, signal.SIGTERM, self.stop_timeout)
        self._reader.join(2)


def wait_ready(workers: list[WorkerProcess], timeout: float = 60.0) -> None:
    """Wait for every worker's "worker started" line and its LISTEN connection."""
    from django.db import connection

    deadline = time.monotonic() + timeout
    for worker in workers:
        while not worker.started.wait(0.05):
            if worker.proc.poll() is not None:
                raise RuntimeError("worker %s exited early:\n%s" % (worker.pid, worker.output()))
            if time.monotonic() > deadline:
                raise RuntimeError("worker %s never started:\n%s" % (worker.pid, worker.output()))
    # The listener thread starts just before the log line; wait for its LISTEN.
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query ILIKE 'LISTEN %%'"
            )
            if cursor.fetchone()[0] >= len(workers):
                return
        if time.monotonic() > deadline:
            raise RuntimeError("workers never LISTENed")
        time.sleep(0.02)


# -- CPU and transaction accounting ------------------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """Return user+system CPU seconds of process ``pid`` (all threads), 0 if gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


class CpuTally:
    """CPU seconds spent by groups of processes over a trial, processes coming and going.

    ``sample()`` as often as the trial polls: a process that exits between two samples
    keeps what it had spent at the last one (PostgreSQL backends end with their
    connections, killed workers with their kill). Processes alive at the first sample
    count from there.
    """

    def __init__(self) -> None:
        self.first: dict[int, float] = {}
        self.last: dict[tuple[str, int], float] = {}
        self.started = False

    def sample(self, groups: dict[str, list[int]]) -> None:
        for name, pids in groups.items():
            for pid in pids:
                spent = process_cpu(pid)
                if not self.started:
                    self.first[pid] = spent
                self.last[name, pid] = max(spent, self.last.get((name, pid), 0.0))
        self.started = True

    def spent(self) -> dict[str, float]:
        """Return {group: CPU seconds since the first sample}."""
        totals: dict[str, float] = {}
        for (name, pid), spent in self.last.items():
            totals[name] = totals.get(name, 0.0) + spent - self.first.get(pid, 0.0)
        return totals


def postgres_pids() -> list[int]:
    """Return the pids of the PostgreSQL server's processes on this machine (user postgres)."""
    import pwd

    try:
        uid = pwd.getpwnam("postgres").pw_uid
    except KeyError:
        return []
    return [
        int(entry.name)
        for entry in os.scandir("/proc")
        if entry.name.isdigit() and _owner(entry.path) == uid
    ]


def _owner(path: str) -> int | None:
    try:
        return os.stat(path).st_uid
    except OSError:
        return None


def machine_cpu() -> tuple[float, float]:
    """Return (busy, total) jiffies of the whole machine."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    total = sum(values[:8])
    return total - idle, total


def transactions() -> int:
    """Return the transactions committed or rolled back on this database so far."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        )
        return cursor.fetchone()[0]


# -- py-spy profiles (BENCH_PROFILE) -----------------------------------------------------------


class Profiler:
    """py-spy attached to process ``pid``, writing collapsed stacks (raw format) to ``path``."""

    def __init__(self, pid: int, path: Path, *, rate: int, idle: bool, threads: bool) -> None:
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        args = [py_spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw"]
        if threads:
            args.append("--threads")
        args += ["--nonblocking", "--output", str(path)]
        if idle:
            args.append("--idle")
        self.path = path
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def stop(self) -> None:
        stop_process(self.proc, signal.SIGINT, 30)


def frame_name(frame: str) -> str:
    """Return a py-spy frame without its line number and with shorter paths."""
    frame = re.sub(r":\d+\)$", ")", frame)  # drop line numbers
    return frame.replace(str(REPO) + "/", "").replace(sys.prefix + "/", "")


def collapsed_stacks(text: str) -> Iterator[tuple[list[str], int]]:
    """Yield (raw frames, sample count) for each stack line of a py-spy raw profile."""
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if stack and count_text.isdigit():
            yield stack.split(";"), int(count_text)


# -- reporting ---------------------------------------------------------------------------------


def cpu_model() -> str:
    """Return the CPU's model name from /proc/cpuinfo ("unknown" if absent)."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def memory_gib() -> str:
    """Return the machine's total memory, e.g. "15.6 GiB"."""
    with open("/proc/meminfo") as f:
        mem_kb = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
    return "%.1f GiB" % (mem_kb / 2**20)


def pg_setting(name: str) -> str:
    """Return ``SHOW name`` from the PostgreSQL server Django is connected to."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW %s" % name)
        return cursor.fetchone()[0]


def git_head() -> str:
    """Return the repository's short HEAD commit ("" outside a git checkout)."""
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()


def machine_description(pg_settings: tuple[str, ...], revision: str = "") -> dict[str, str]:
    """Describe the machine and versions for a results section (worker.py, sends.py).

    ``pg_settings`` are shown next to the PostgreSQL version; ``revision`` names the
    code measured instead of git's HEAD.
    """
    import django
    import psycopg

    server_version = pg_setting("server_version")
    shown = ", ".join("%s=%s" % (name, pg_setting(name)) for name in pg_settings)
    head = revision or git_head()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "scheduler_app"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    return {
        "cpu": cpu_model(),
        "cores": str(os.cpu_count()),
        "ram": memory_gib(),
        "postgresql": "%s (%s, same machine)" % (server_version, shown),
        "python": platform.python_version(),
        "django": django.get_version(),
        "psycopg": psycopg.__version__,
        "git": (head or "not a git checkout")
        + (" (scheduler_app has uncommitted changes)" if dirty else ""),
        "load": "%.2f %.2f %.2f" % os.getloadavg(),
    }


def machine_line(machine: dict[str, str]) -> str:
    """Return the "Machine: ..." sentence of a results section from machine_description()."""
    return (
        "Machine: %s, %s cores, %s RAM; PostgreSQL %s; Python %s, Django %s, psycopg %s; "
        "git %s; load average at start %s."
        % (
            machine["cpu"],
            machine["cores"],
            machine["ram"],
            machine["postgresql"],
            machine["python"],
            machine["django"],
            machine["psycopg"],
            machine["git"],
            machine["load"],
        )
    )


def append_results(path: Path, header: str, section: str) -> None:
    """Append ``section`` to the results file ``path``, starting it with ``header`` if new."""
    if not path.exists():
        path.write_text(header)
    with path.open("a") as f:
        f.write(section)
