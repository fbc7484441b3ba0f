#!/usr/bin/env python
"""Latency of the undo endpoint (POST /api/jobs/{id}/undo/) over real HTTP on PostgreSQL.

Run from the repository root::

    python bench/api.py

It drops and re-creates its own PostgreSQL database (``bench_api`` unless
BENCH_DATABASE_URL names another), migrates it, creates a user with a token
and BENCH_JOBS jobs with an undo window (one in five with its window
already closed, so both the 200 and the 409 path are measured), then starts
gunicorn (gthread workers, keep-alive) on 127.0.0.1 and sends one undo per
job from BENCH_CLIENTS client threads, each with its own keep-alive
connection (http.client). After a warm-up, every request's latency is
measured from sending the request to reading the whole response.

The server runs with ``tests.settings`` plus two production-like lines:
persistent database connections (CONN_MAX_AGE=BENCH_CONN_MAX_AGE) and the
write throttle raised out of the way (one user sends every request here; the
throttle still reads and writes its count in the cache on each request, which
here is the in-process LocMemCache: with Redis or Memcached that is two
network round trips more per request, not measured here).

Environment: BENCH_JOBS (400), BENCH_CLIENTS (1), BENCH_SERVER_WORKERS (2),
BENCH_SERVER_THREADS (4), BENCH_CONN_MAX_AGE (60), BENCH_DATABASE_URL,
BENCH_RESULTS (results file, default bench/results-api.md).

Besides latency it reports CPU per request of the gunicorn workers, of their
PostgreSQL backends and of this process (the client threads), and how busy
the machine was: all share its cores, so a figure far above the workers'
CPU per request means the run queued for CPU.

A dated section is appended to the results file; the last stdout line is
``undo_p50_ms=<n> undo_p99_ms=<n> requests=<n> errors=<n>``.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import platform
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from harness import (
    REPO,
    append_results,
    cpu_model,
    env_int,
    git_head,
    machine_cpu,
    memory_gib,
    migrate,
    pg_setting,
    process_cpu,
    recreate_database,
    setup_django,
    stop_process,
)

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_api"
WARMUP = 40
CLOSED_EVERY = 5  # every fifth job has its undo window closed already
TARGET_P99_MS = 20.0
FLOOR_REQUESTS = 400

SETTINGS = """\
from tests.settings import *  # noqa: F403

DATABASES["default"]["CONN_MAX_AGE"] = %(conn_max_age)s  # noqa: F405
REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"scheduler_app_write": "1000000/min"}}
LOGGING = {"version": 1, "disable_existing_loggers": False}
"""


def write_settings(directory: Path, conn_max_age: int) -> str:
    (directory / "bench_api_settings.py").write_text(SETTINGS % {"conn_max_age": conn_max_age})
    return "bench_api_settings"


def setup_django_with(url: str, settings_dir: Path, settings_module: str) -> None:
    """Set Django up with ``settings_module`` from ``settings_dir`` (gunicorn's too); migrate."""
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(settings_dir), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    if str(settings_dir) not in sys.path:
        sys.path.insert(0, str(settings_dir))
    setup_django(url, settings_module, log_level=None)
    migrate()


def create_data(jobs: int) -> tuple[str, list[int], set[int]]:
    """Create the user, its token and the jobs; return (token, job ids, ids whose window closed)."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from rest_framework.authtoken.models import Token

    from scheduler_app import clock, schedule
    from scheduler_app.models import Job

    user = get_user_model().objects.create_user("bench")
    token = Token.objects.create(user=user).key
    with transaction.atomic():
        ids = [
            schedule("tests.noop", {"n": n}, owner=user, undo_window=3600).pk
            for n in range(jobs + WARMUP)
        ]
    closed = set(ids[WARMUP::CLOSED_EVERY])
    Job.objects.filter(pk__in=closed).update(undo_deadline=clock.now() - dt.timedelta(seconds=1))
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE %s" % Job._meta.db_table)
    return token, ids, closed


# -- the server --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """gunicorn serving the Django app on 127.0.0.1, gthread workers (keep-alive)."""

    def __init__(self, port: int, workers: int, threads: int) -> None:
        self.port = port
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by stop())
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "django.core.wsgi:get_wsgi_application()",
                "--bind",
                "127.0.0.1:%s" % port,
                "--worker-class",
                "gthread",
                "--workers",
                str(workers),
                "--threads",
                str(threads),
                "--keep-alive",
                "30",
                "--log-level",
                "warning",
            ],
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, token: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(
                    "gunicorn exited with %s:\n%s" % (self.proc.returncode, self.output())
                )
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/api/jobs/?page_size=1", headers=auth(token))
                if conn.getresponse().status == 200:
                    conn.close()
                    return
                conn.close()
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(
                    "gunicorn did not answer within %ss:\n%s" % (timeout, self.output())
                )
            time.sleep(0.1)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        stop_process(self.proc, signal.SIGTERM, 20, kill_timeout=10)
        self.log.close()

    def worker_pids(self) -> list[int]:
        """Return the pids of gunicorn's worker processes."""
        pids = []
        for task in Path("/proc/%d/task" % self.proc.pid).iterdir():
            pids += [int(pid) for pid in (task / "children").read_text().split()]
        return pids


def backend_pids() -> list[int]:
    """Return the pids of the PostgreSQL backends on the bench database (the server's)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
        pids = [row[0] for row in cursor.fetchall()]
    connection.close()
    return pids


class CpuMeter:
    """CPU of the server's workers, their backends and this process, and the machine's."""

    def __init__(self, workers: list[int], backends: list[int]) -> None:
        self.workers, self.backends = workers, backends

    def read(self) -> tuple[float, float, float, tuple[float, float]]:
        return (
            sum(process_cpu(pid) for pid in self.workers),
            sum(process_cpu(pid) for pid in self.backends),
            time.process_time(),
            machine_cpu(),
        )

    def __enter__(self) -> CpuMeter:
        self.start = self.read()
        return self

    def __exit__(self, *exc: object) -> None:
        # Threads that first served a request during the run connected then: count
        # their backends too (from their start, a connection's set-up included).
        opened = [pid for pid in backend_pids() if pid not in self.backends]
        self.opened = len(opened)
        self.backends += opened
        end = self.read()
        self.workers_s, self.backends_s, self.client_s = (end[i] - self.start[i] for i in range(3))
        busy, total = (end[3][i] - self.start[3][i] for i in range(2))
        self.machine_busy = busy / max(total, 1)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": "Token %s" % token}


# -- the load ------------------------------------------------------------------------


def run_clients(port: int, token: str, ids: list[int], clients: int) -> list[tuple]:
    """POST undo for each id from ``clients`` threads; return (id, status, body, seconds) rows."""
    work: queue.Queue[int | None] = queue.Queue()
    for job_id in ids:
        work.put(job_id)
    for _ in range(clients):
        work.put(None)
    rows: list[tuple] = []
    start = threading.Barrier(clients)
    headers = {**auth(token), "Content-Length": "0"}

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.connect()
        start.wait()
        try:
            while (job_id := work.get()) is not None:
                began = time.perf_counter()
                try:
                    conn.request("POST", "/api/jobs/%s/undo/" % job_id, headers=headers)
                    response = conn.getresponse()
                    body = response.read()
                    rows.append((job_id, response.status, body, time.perf_counter() - began))
                except (OSError, http.client.HTTPException) as exc:
                    rows.append((job_id, None, repr(exc).encode(), time.perf_counter() - began))
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return rows


def http_floor(port: int, requests: int = 100) -> list[float]:
    """Return latencies (ms) of GET docs/ (no authentication, no database) on one connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    latencies = []
    try:
        for _ in range(requests):
            began = time.perf_counter()
            conn.request("GET", "/api/docs/")
            response = conn.getresponse()
            response.read()
            latencies.append((time.perf_counter() - began) * 1000)
            assert response.status == 200, response.status
    finally:
        conn.close()
    return latencies


def percentile(values: list[float], q: float) -> float:
    """Return the q-th percentile (0-100) by the nearest-rank method."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil
    return ordered[int(rank) - 1]


def check(rows: list[tuple], closed: set[int]) -> list[str]:
    """Return a description of each response that is not what its job's state calls for."""
    errors = []
    for job_id, status, body, _ in rows:
        expected = (409, "already_sending") if job_id in closed else (200, "cancelled")
        try:
            data = json.loads(body)
            got = (status, data["error"]["code"] if status == 409 else data["outcome"])
        except (ValueError, KeyError, TypeError):
            got = (status, body[:200])
        if got != expected:
            errors.append("job %s: expected %s, got %s" % (job_id, expected, got))
    return errors


def database_agrees(rows: list[tuple], closed: set[int]) -> list[str]:
    """Return mismatches between the responses and the jobs' stored status."""
    from scheduler_app.models import Job

    status = dict(Job.objects.filter(pk__in=[r[0] for r in rows]).values_list("pk", "status"))
    wrong = []
    for job_id, *_ in rows:
        expected = "pending" if job_id in closed else "cancelled"
        if status.get(job_id) != expected:
            wrong.append("job %s is %s, expected %s" % (job_id, status.get(job_id), expected))
    return wrong


# -- reporting -------------------------------------------------------------------------


def machine_description(url: str) -> dict[str, str]:
    import django
    import gunicorn
    import psycopg
    import rest_framework

    pg = pg_setting("server_version")
    commit = git_head()
    return {
        "cpu": cpu_model(),
        "cores": str(os.cpu_count()),
        "memory": memory_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "django": django.get_version(),
        "djangorestframework": rest_framework.VERSION,
        "gunicorn": gunicorn.__version__,
        "psycopg": psycopg.__version__,
        "postgresql": pg,
        "database": "%s:%s%s"
        % (urlsplit(url).hostname, urlsplit(url).port or 5432, urlsplit(url).path),
        "commit": commit or "unknown",
        "load at start": "%.2f %.2f %.2f" % os.getloadavg(),
    }


def write_results(path: Path, machine: dict, params: dict, figures: dict) -> None:
    section = ["\n## %s\n\n" % dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")]
    section.append("| machine | |\n|---|---|\n")
    for key, value in machine.items():
        section.append("| %s | %s |\n" % (key, value))
    section.append("\n| parameter | value |\n|---|---|\n")
    for key, value in params.items():
        section.append("| %s | %s |\n" % (key, value))
    section.append("\n| figure | value |\n|---|---|\n")
    for key, value in figures.items():
        section.append("| %s | %s |\n" % (key, value))
    append_results(
        path,
        "# Undo endpoint latency (`python bench/api.py`)\n\n"
        "Each section is one run, newest last. Latency is measured in the client,\n"
        "from sending the request to reading the whole response, over a kept-alive\n"
        "connection to gunicorn on 127.0.0.1; see bench/api.py for the set-up.\n",
        "".join(section),
    )


def main() -> int:
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    jobs = env_int("BENCH_JOBS", 400)
    clients = env_int("BENCH_CLIENTS", 1)
    server_workers = env_int("BENCH_SERVER_WORKERS", 2)
    server_threads = env_int("BENCH_SERVER_THREADS", 4)
    conn_max_age = env_int("BENCH_CONN_MAX_AGE", 60, minimum=0)
    results = Path(os.environ.get("BENCH_RESULTS", REPO / "bench" / "results-api.md"))

    recreate_database(url)
    with tempfile.TemporaryDirectory() as settings_dir:
        module = write_settings(Path(settings_dir), conn_max_age)
        setup_django_with(url, Path(settings_dir), module)
        token, ids, closed = create_data(jobs)
        machine = machine_description(url)
        from django.db import connection

        connection.close()  # the server has the database to itself while measuring

        server = Server(free_port(), server_workers, server_threads)
        try:
            server.wait_ready(token)
            warmup = run_clients(server.port, token, ids[:WARMUP], clients)
            # After the warm-up every server thread has its (persistent) connection.
            meter = CpuMeter(server.worker_pids(), backend_pids())
            with meter:
                began = time.perf_counter()
                rows = run_clients(server.port, token, ids[WARMUP:], clients)
                elapsed = time.perf_counter() - began
            floor_meter = CpuMeter(server.worker_pids(), [])
            with floor_meter:
                floor = http_floor(server.port, FLOOR_REQUESTS)
        finally:
            server.stop()

    errors = check(warmup, set()) + check(rows, closed)
    errors += database_agrees(rows, closed)
    latencies = [row[3] * 1000 for row in rows]
    by_status: dict[int | None, list[float]] = {}
    for row in rows:
        by_status.setdefault(row[1], []).append(row[3] * 1000)
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    figures = {
        "load at end": "%.2f %.2f %.2f" % os.getloadavg(),
        "requests": len(rows),
        "errors": len(errors),
        "undo p50 / p90 / p99 / max (ms)": "%.2f / %.2f / %.2f / %.2f"
        % (p50, percentile(latencies, 90), p99, max(latencies)),
        "requests per second": "%.0f" % (len(rows) / elapsed),
        "CPU per request (ms): gunicorn workers / their PostgreSQL backends / client": (
            "%.2f / %.2f / %.2f"
            % tuple(
                1000 * s / len(rows) for s in (meter.workers_s, meter.backends_s, meter.client_s)
            )
        ),
        "server connections: measured / opened during the run (each pays a connection set-up)": (
            "%s / %s" % (len(meter.backends), meter.opened)
        ),
        "machine busy during the run (all cores)": "%.0f %%" % (100 * meter.machine_busy),
        "HTTP floor: GET docs/ (no auth, no database) p50 / p99 (ms)": "%.2f / %.2f"
        % (percentile(floor, 50), percentile(floor, 99)),
        "HTTP floor: gunicorn workers' CPU per GET docs/ (ms)": "%.2f"
        % (1000 * floor_meter.workers_s / len(floor)),
        "target p99 < %s ms" % TARGET_P99_MS: "met" if p99 < TARGET_P99_MS else "NOT met",
    }
    for status, values in sorted(by_status.items(), key=lambda item: str(item[0])):
        figures["status %s: count, p50 / p99 (ms)" % status] = "%s, %.2f / %.2f" % (
            len(values),
            percentile(values, 50),
            percentile(values, 99),
        )
    params = {
        "jobs (undo requests measured)": jobs,
        "of which window already closed (409)": len(closed),
        "warm-up requests (not measured)": WARMUP,
        "client threads (keep-alive connection each)": clients,
        "gunicorn": "gthread, %s workers x %s threads" % (server_workers, server_threads),
        "CONN_MAX_AGE": conn_max_age,
    }
    write_results(results, machine, params, figures)
    for error in errors[:20]:
        print("error: %s" % error)
    for key, value in figures.items():
        print("%s: %s" % (key, value))
    print(
        "undo_p50_ms=%.2f undo_p99_ms=%.2f requests=%s errors=%s"
        % (p50, p99, len(rows), len(errors))
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
