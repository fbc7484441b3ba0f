#!/usr/bin/env python
"""Chaos trial of a bulk send: a real SMTP server, runworker processes SIGKILLed again and again.

Run from the repository root::

    python bench/send_chaos.py

The trial of issue #10, as a new user would run it, and too long for CI
(tests/sends_processes/test_sigkill_mid_send.py is the short version):

- a batch of BENCH_RECIPIENTS (20,000) customers, provider "email"
  (scheduler_app.sends.providers.email.DjangoEmailProvider) over Django's real
  SMTP backend (bench/send_chaos_settings.py), delivered to a real SMTP server
  (aiosmtpd) that this script starts on 127.0.0.1 on a free port, in its own
  process (``python bench/send_chaos.py smtpd ...``). The server writes one
  line per message it accepts (Message-ID, recipient, Idempotency-Key) and
  flushes it before answering 250, so deliveries are counted at the server;
- BENCH_WORKERS (3) ``runworker --lease BENCH_LEASE`` processes (runworker's
  default concurrency), SEND_CLAIM_SECONDS BENCH_CLAIM_SECONDS (6),
  SEND_LANES BENCH_SEND_LANES (3), SEND_CHUNK_SIZE BENCH_SEND_CHUNK (100),
  SEND_WINDOW BENCH_SEND_WINDOW (50); the server answers each message
  BENCH_SMTP_DELAY (0) seconds late, as an ESP does (0.08 for the #31 figure);
- every BENCH_KILL_EVERY (2; 0: never) seconds one worker is SIGKILLed (any
  of them, or with BENCH_KILL_TARGET=lane one running a lane of the batch if
  there is one) and a new one started at once. No
  operator action: the script only kills, replaces and waits, up to
  BENCH_TIMEOUT (900) seconds, for the batch to complete or stop with a
  reason (paused, failed, cancelled), or for BENCH_STALL (300) seconds
  without any progress.

The batch is scheduled with schedule_batch() (checklist relaxed: no dry-run
or seed send first), scheduled_at = now; that commit is t0.

Reported: the batch's final status and reason; recipients unreached (no
delivery at the server, split by their marker's status); extra copies
(deliveries beyond one per recipient), recipients with more than one copy,
the most copies of one recipient; whether every copy of a recipient carried
the same Message-ID and Idempotency-Key; kills; elapsed time and sends/s;
failed recipients and their errors; the lane jobs, their attempts and the
sweeper's revivals. A dated section is appended to
bench/results-send-chaos.md (BENCH_RESULTS), the workers' output goes to
BENCH_LOG, and the last stdout line is::

    status=<s> unreached=<n> extra_copies=<n> kills=<n> dup_recipients=<n> max_copies=<n>
    sends_s=<x> elapsed_s=<x> guarantees=<held|broken>

The script exits 1 when a guarantee broke: the batch did not complete; a
completed batch left a recipient unreached; two copies of one recipient
differ in Message-ID or Idempotency-Key; extra copies exceed kills x lanes x window.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import math
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from harness import (
    REPO,
    CpuTally,
    append_results,
    env_int,
    machine_cpu,
    machine_description,
    machine_line,
    migrate,
    postgres_pids,
    recreate_database,
    setup_django,
    stop_process,
    wait_ready,
)
from harness import WorkerProcess as BaseWorkerProcess

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_send_chaos"
SETTINGS = "bench.send_chaos_settings"
RELAX = (
    "audience_within_limit",
    "dry_run_clean",
    "seed_sent",
    "schedule_unambiguous",
    "no_other_large_batch",
)
POLL = 0.1
#: The batch statuses at which the wait ends.
STOPPED = ("completed", "failed", "paused", "cancelled")


# -- the SMTP server (python bench/send_chaos.py smtpd PORT PATH) ------------------------------


class RecordingHandler:
    """aiosmtpd handler: one line per accepted message, flushed before the 250, which comes
    ``delay`` seconds after the message (an ESP's answer time; other sessions go on)."""

    def __init__(self, path: str, delay: float) -> None:
        self.out = open(path, "a", buffering=1)  # noqa: SIM115 (open for the server's life)
        self.delay = delay

    async def handle_DATA(self, server, session, envelope) -> str:
        import asyncio
        from email.parser import BytesHeaderParser

        if self.delay:
            await asyncio.sleep(self.delay)

        headers = BytesHeaderParser().parsebytes(envelope.original_content or envelope.content)
        message_id = headers.get("Message-ID", "")
        key = headers.get("Idempotency-Key", "")
        for rcpt in envelope.rcpt_tos:
            self.out.write("%.3f\t%s\t%s\t%s\n" % (time.time(), message_id, rcpt, key))
        self.out.flush()
        return "250 Message accepted for delivery"


def run_smtpd(port: int, path: str, delay: float) -> None:
    """Serve SMTP on 127.0.0.1:``port``, recording deliveries to ``path``, until SIGTERM."""
    import logging

    from aiosmtpd.controller import Controller

    # Clients SIGKILLed mid-session make aiosmtpd log connection resets: expected here.
    logging.getLogger("mail.log").setLevel(logging.CRITICAL)
    # Wait for SIGTERM with no handler: a handler setting an Event can wait for ever on
    # the Event's lock, held by the thread it interrupted (see worker.shutdown). Blocked
    # before the controller's thread starts, so that thread inherits the mask.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    controller = Controller(
        RecordingHandler(path, delay), hostname="127.0.0.1", port=port, server_hostname="bench-smtp"
    )
    controller.start()
    print("smtp ready port=%s" % port, flush=True)
    signal.sigwait({signal.SIGTERM})
    controller.stop()


class SmtpServer:
    """The SMTP server subprocess and the deliveries it recorded."""

    def __init__(self, path: Path, delay: float) -> None:
        self.path = path
        path.write_text("")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "smtpd",
                str(self.port),
                str(path),
                str(delay),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("smtp ready"):
            raise RuntimeError(
                "the SMTP server did not start: %s%s" % (line, self.proc.stdout.read())
            )

    def size(self) -> int:
        """Return the bytes recorded so far (grows with every delivery)."""
        return self.path.stat().st_size

    def stop(self) -> None:
        stop_process(self.proc, signal.SIGTERM, 10)

    def deliveries(self) -> list[tuple[float, str, str, str]]:
        """Return (time, Message-ID, recipient, Idempotency-Key) for every accepted message."""
        with self.path.open() as f:
            rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
        return [(float(at), message_id, rcpt, key) for at, message_id, rcpt, key in rows]


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- runworker subprocesses ----------------------------------------------------------------------


class WorkerProcess(BaseWorkerProcess):
    """A ``runworker`` whose output also goes, prefixed by time and pid, to the shared log."""

    log_lock = threading.Lock()
    log_file = None

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.spawned = time.monotonic()
        #: Seconds from spawn to its "worker started" line (None: not yet).
        self.ready_s: float | None = None
        super().__init__(
            [sys.executable, "-m", "django", "runworker", "--settings=%s" % SETTINGS, *args],
            env,
            keep_lines=200,
        )

    def on_line(self, line: str) -> None:
        if self.ready_s is None and "worker started" in line:
            self.ready_s = time.monotonic() - self.spawned
        if self.log_file is not None:
            with self.log_lock:
                self.log_file.write(
                    "%s %s %s" % (dt.datetime.now().strftime("%H:%M:%S.%f")[:-3], self.pid, line)
                )


@dataclasses.dataclass
class Kill:
    at_s: float
    pid: int
    held_lane: bool
    ready: bool  # it had logged "worker started"
    sent: int


class Chaos:
    """Keeps BENCH_WORKERS workers alive and SIGKILLs one every ``every`` seconds."""

    def __init__(self, n_workers: int, target: str, args: list[str], env: dict[str, str]) -> None:
        self.target, self.args, self.env = target, args, env
        self.workers = [self.start() for _ in range(n_workers)]
        self.spawned = list(self.workers)
        self.kills: list[Kill] = []
        #: Workers that exited without being killed (pid, exit code, last lines).
        self.exits: list[tuple[int, int, str]] = []

    def start(self) -> WorkerProcess:
        return WorkerProcess(self.args, self.env)

    def replace(self, worker: WorkerProcess) -> None:
        self.workers.remove(worker)
        self.workers.append(self.start())
        self.spawned.append(self.workers[-1])

    def startup_times(self) -> list[float]:
        """Return each worker's seconds from spawn to "worker started" (the ones that got there)."""
        return sorted(w.ready_s for w in self.spawned if w.ready_s is not None)

    def replace_exited(self) -> None:
        """Restart workers that exited by themselves (as a supervisor would); note them."""
        for worker in list(self.workers):
            code = worker.proc.poll()
            if code is not None:
                self.exits.append((worker.pid, code, "\n".join(list(worker.lines)[-15:])))
                self.replace(worker)

    def kill_one(self, at_s: float, sent: int) -> None:
        """SIGKILL a worker (target "lane": one running a lane if any), start a new one at once."""
        from scheduler_app.models import Job
        from scheduler_app.sends.task_names import SEND_BATCH_TASK

        running = Job.objects.filter(task_name=SEND_BATCH_TASK, status=Job.Status.RUNNING)
        holders = {_pid(worker_id) for worker_id in running.values_list("worker_id", flat=True)}
        alive = [w for w in self.workers if w.proc.poll() is None]
        if not alive:
            return
        lane_holders = [w for w in alive if w.pid in holders]
        victim = random.choice((self.target == "lane" and lane_holders) or alive)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(10)
        self.replace(victim)
        self.kills.append(
            Kill(at_s, victim.pid, victim.pid in holders, victim.started.is_set(), sent)
        )

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()


def _pid(worker_id: str) -> int:
    """Return the pid in a default worker id ``host:pid:random`` (0 if it has none)."""
    parts = worker_id.split(":")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else 0


# -- the trial -------------------------------------------------------------------------------------


def populate(recipients: int) -> None:
    """Insert ``recipients`` customers on plan "send" (distinct addresses and names)."""
    from django.db import connection

    from tests.testapp.models import Customer

    table = Customer._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO %s (email, first_name, plan, tz, unsubscribed) "
            "SELECT 'customer' || g || '@example.com', 'Name' || g, 'send', '', false "
            "FROM generate_series(1, %%s) AS g" % table,
            [recipients],
        )
        # The suppression check of tests.settings looks customers up by email, per chunk.
        cursor.execute("CREATE INDEX bench_customer_email ON %s (email)" % table)
        cursor.execute("VACUUM ANALYZE %s" % table)


def batch_state(batch_id: int) -> dict:
    from scheduler_app.models import SendBatch

    batch = SendBatch.objects.get(pk=batch_id)
    fields = ("status", "status_reason", "sent", "failed", "skipped", "total")
    return {name: getattr(batch, name) for name in fields}


def run_trial(params: dict, url: str, smtp: SmtpServer) -> dict:
    """Schedule the batch, kill workers until it stops (or the time is up); return the timeline."""
    from django.db import transaction

    from scheduler_app import clock
    from scheduler_app.models import SendBatch
    from scheduler_app.sends.batches import schedule_batch

    env = {
        "DATABASE_URL": url,
        "BENCH_SMTP_PORT": str(smtp.port),
        "SCHEDULER_SEND_CLAIM_SECONDS": str(params["claim_seconds"]),
        "SCHEDULER_SEND_LANES": str(params["lanes"]),
        "SCHEDULER_SEND_WINDOW": str(params["window"]),
        "SCHEDULER_SEND_CHUNK_SIZE": str(params["chunk"]),
    }
    args = ["--lease", str(params["lease"])]
    if params["concurrency"]:
        args += ["--concurrency", str(params["concurrency"])]
    chaos = Chaos(params["workers"], params["kill_target"], args, env)
    try:
        wait_ready(chaos.workers)
        batch = SendBatch.objects.create(
            name="chaos send",
            subject_template="News for {{ first_name }}",
            text_template="Hi {{ first_name }}, here is the news for the {{ plan }} plan.",
            audience="tests.customers",
            audience_params={"plan": "send"},
            expected_max_audience=params["recipients"],
            provider="email",
            rate_limit_key="email",
            scheduled_at=clock.now(),
            timezone="UTC",
        )
        with transaction.atomic():
            schedule_batch(batch, relax=RELAX)
        t0, t0_wall, t0_epoch = time.monotonic(), dt.datetime.now(dt.UTC), time.time()
        m0, tally = machine_cpu(), CpuTally()
        tally.sample(parties(chaos, smtp))
        next_kill = t0 + params["kill_every"] if params["kill_every"] else float("inf")
        last_progress, progress_at = None, t0
        reason = ""
        while True:
            now = time.monotonic()
            state = batch_state(batch.pk)
            if state["status"] in STOPPED:
                break
            progress = (state["sent"], state["failed"], state["skipped"], smtp.size())
            if progress != last_progress:
                last_progress, progress_at = progress, now
            if now - progress_at > params["stall"]:
                reason = "no progress for %.0f s" % (now - progress_at)
                break
            if now - t0 > params["timeout"]:
                reason = "timed out after %.0f s" % (now - t0)
                break
            chaos.replace_exited()
            if now >= next_kill:
                chaos.kill_one(now - t0, state["sent"])
                next_kill += params["kill_every"]
                if len(chaos.kills) % 25 == 0:
                    print(
                        "  %4.0f s: kills=%s sent=%s/%s failed=%s"
                        % (
                            now - t0,
                            len(chaos.kills),
                            state["sent"],
                            state["total"],
                            state["failed"],
                        ),
                        flush=True,
                    )
            tally.sample(parties(chaos, smtp))
            time.sleep(POLL)
        ended = time.monotonic()
        m1 = machine_cpu()
        tally.sample(parties(chaos, smtp))
    finally:
        chaos.stop()
    return {
        "batch_id": batch.pk,
        "waited_s": ended - t0,
        "wait_reason": reason,
        "kills": chaos.kills,
        "startup_s": chaos.startup_times(),
        "spawned": len(chaos.spawned),
        "exits": chaos.exits,
        "machine_busy": (m1[0] - m0[0]) / max(m1[1] - m0[1], 1),
        "party_cpu": tally.spent(),
        "t0_wall": t0_wall,
        "t0_epoch": t0_epoch,
    }


def parties(chaos: Chaos, smtp: SmtpServer) -> dict[str, list[int]]:
    """Return the processes that share the machine's cores in a trial, by who they are."""
    return {
        "workers": [worker.pid for worker in chaos.workers],
        "SMTP server": [smtp.proc.pid],
        "PostgreSQL": postgres_pids(),
    }


# -- what the server received, against the markers --------------------------------------------


def analyse(batch_id: int, deliveries: list[tuple[float, str, str, str]]) -> dict:
    """Compare the server's deliveries with the batch's recipients, one address each."""
    from django.db.models import Count, Sum

    from scheduler_app.models import ControlEvent, Job, JobAttempt, Recipient, SendBatch
    from scheduler_app.sends.batches import lane_jobs

    batch = SendBatch.objects.get(pk=batch_id)
    markers = {
        address: (key, status, attempts, message_id, error)
        for key, address, status, attempts, message_id, error in Recipient.objects.filter(
            batch_id=batch_id, is_seed=False
        ).values_list(
            "recipient_key", "address", "status", "attempts", "provider_message_id", "last_error"
        )
    }
    copies: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
    for _at, message_id, rcpt, key in deliveries:
        copies[rcpt].append((message_id, key))
    unreached = collections.Counter(
        status for address, (_k, status, *_) in markers.items() if address not in copies
    )
    stray = sum(len(c) for address, c in copies.items() if address not in markers)
    counts = collections.Counter(len(c) for address, c in copies.items() if address in markers)
    inconsistent = []  # addresses whose copies differ, or carry another recipient's key
    wrong_marker = 0  # sent markers whose provider message id is not what the server got
    for address, got in copies.items():
        if address not in markers:
            continue
        key, status, _attempts, marker_id, _error = markers[address]
        if set(got) != {(got[0][0], "%s:%s" % (batch_id, key))}:
            inconsistent.append((address, sorted(set(got))))
        if status == Recipient.Status.SENT and marker_id != got[0][0]:
            wrong_marker += 1
    errors = collections.Counter(
        error for _k, status, _a, _m, error in markers.values() if status == Recipient.Status.FAILED
    )
    lanes = lane_jobs(batch_id)
    attempts = collections.Counter(
        dict(
            JobAttempt.objects.filter(job__in=lanes).values_list("outcome").annotate(n=Count("id"))
        )
    )
    return {
        "status": batch.status,
        "reason": batch.status_reason,
        "total": batch.total or 0,
        "sent": batch.sent,
        "failed": batch.failed,
        "skipped": batch.skipped,
        "finished_at": batch.finished_at,
        "deliveries": len(deliveries),
        "unreached": sum(unreached.values()),
        "unreached_by_status": dict(unreached),
        "extra": sum((n - 1) * k for n, k in counts.items()) + stray,
        "stray": stray,
        "dup_recipients": sum(k for n, k in counts.items() if n > 1),
        "max_copies": max(counts, default=0),
        "copies_histogram": dict(sorted(counts.items())),
        "inconsistent": inconsistent,
        "wrong_marker": wrong_marker,
        "failed_errors": errors.most_common(),
        "retried_recipients": sum(1 for m in markers.values() if m[2] > 1),
        "lane_jobs": dict(
            collections.Counter(dict(lanes.values_list("status").annotate(n=Count("id"))))
        ),
        "lane_job_attempts": lanes.aggregate(n=Sum("attempts"))["n"] or 0,
        "lane_attempt_outcomes": dict(attempts),
        "lane_failures": list(
            lanes.filter(status=Job.Status.FAILED).values_list("id", "attempts", "last_error")[:5]
        ),
        "revivals": ControlEvent.objects.filter(
            scope="batch", target=str(batch_id), action="revive"
        ).count(),
        "operator_events": list(
            ControlEvent.objects.filter(scope="batch", target=str(batch_id))
            .exclude(action__in=["schedule", "revive"])
            .values_list("action", "reason")
        ),
    }


def timeline(deliveries: list[tuple[float, str, str, str]], t0: float, kills: list[Kill]) -> str:
    """Return deliveries and kills per time slice since t0, e.g. "0-10 s: 120 (4 kills)"."""
    if not deliveries:
        return "no delivery"
    end = max(at for at, *_ in deliveries) - t0
    step = max(10, math.ceil(end / 40 / 10) * 10)  # at most ~40 slices
    sent = collections.Counter(int((at - t0) // step) for at, *_ in deliveries)
    killed = collections.Counter(int(k.at_s // step) for k in kills)
    first = min(at for at, *_ in deliveries) - t0
    return "first delivery after %.1f s; per %s s: %s" % (
        first,
        step,
        ", ".join("%s (%s kills)" % (sent[i], killed[i]) for i in range(int(end // step) + 1)),
    )


def broken_guarantees(result: dict, kills: int, bound: int) -> list[str]:
    """Return the guarantees of issues #10 and #31 this run broke (empty: all held); ``bound``
    is the copies one kill may cost (lanes x window)."""
    broken = []
    if result["status"] != "completed":
        broken.append("the batch did not complete (%s)" % result["status"])
    elif result["unreached"]:
        broken.append("%s recipients of a completed batch unreached" % result["unreached"])
    if result["inconsistent"]:
        broken.append(
            "%s recipients got copies with another Message-ID or key" % len(result["inconsistent"])
        )
    if result["extra"] > kills * bound:
        broken.append(
            "%s extra copies > kills x lanes x window = %s" % (result["extra"], kills * bound)
        )
    return broken


# -- results ------------------------------------------------------------------------------------


def write_results(
    path: Path,
    when: dt.datetime,
    params: dict,
    machine: dict,
    trial: dict,
    result: dict,
    broken: list[str],
    final: str,
    load_end: str,
) -> None:
    kills = trial["kills"]
    lane_kills = sum(k.held_lane for k in kills)
    unready_kills = sum(not k.ready for k in kills)
    startup = trial["startup_s"]
    lines = [
        "",
        "## %s — recipients=%s workers=%s kill_every=%ss kill_target=%s lease=%ss claim=%ss "
        "lanes=%s chunk=%s window=%s smtp_delay=%ss"
        % (
            when.strftime("%Y-%m-%d %H:%M UTC"),
            params["recipients"],
            params["workers"],
            params["kill_every"],
            params["kill_target"],
            params["lease"],
            params["claim_seconds"],
            params["lanes"],
            params["chunk"],
            params["window"],
            params["smtp_delay"],
        ),
        "",
        *(["Variant: %s" % params["label"], ""] if params["label"] else []),
        machine_line(machine),
        "The machine may be shared with other test runs: load average %s at the end; the "
        "whole machine (this trial included) was %.0f%% busy while it ran."
        % (load_end, 100 * trial["machine_busy"]),
        "",
        "| measure | result |",
        "|---|---|",
        "| batch | **%s**%s; total %s, sent %s, failed %s, skipped %s |"
        % (
            result["status"],
            " (%s)" % result["reason"] if result["reason"] else "",
            result["total"],
            result["sent"],
            result["failed"],
            result["skipped"],
        ),
        "| kills | **%s** SIGKILLs, one every %s s: %s of a worker running a lane, %s of one "
        'still starting (before its "worker started" line); %s workers exited by themselves |'
        % (
            len(kills),
            params["kill_every"] or "-",
            lane_kills,
            unready_kills,
            len(trial["exits"]),
        ),
        '| worker start-up | %s workers spawned, %s reached "worker started": median %s s, '
        "max %s s from spawn |"
        % (
            trial["spawned"],
            len(startup),
            "%.1f" % startup[len(startup) // 2] if startup else "-",
            "%.1f" % startup[-1] if startup else "-",
        ),
        "| elapsed | %.1f s from the schedule's commit to %s; **%.0f sends/s** "
        "(recipients sent / elapsed); %s deliveries at the server |"
        % (
            result["elapsed_s"],
            "finished_at"
            if result["finished_at"]
            else "the end of the wait (%s)" % trial["wait_reason"],
            result["sends_s"],
            result["deliveries"],
        ),
        "| unreached | **%s** recipients without a delivery at the server%s |"
        % (
            result["unreached"],
            " (by marker status: %s)" % result["unreached_by_status"]
            if result["unreached"]
            else "",
        ),
        "| extra copies | **%s** deliveries beyond one per recipient (bound: kills x lanes x "
        "window = %s); %s to addresses outside the batch |"
        % (result["extra"], len(kills) * params["lanes"] * params["window"], result["stray"]),
        "| duplicated recipients | %s recipients got more than one copy; at most %s copies of "
        "one; copies per recipient: %s |"
        % (result["dup_recipients"], result["max_copies"], result["copies_histogram"]),
        "| same Message-ID and key | %s; %s sent markers whose message id differs from the "
        "server's |"
        % (
            "**yes**, every copy of a recipient"
            if not result["inconsistent"]
            else "**NO**: %s recipients, e.g. %s"
            % (len(result["inconsistent"]), result["inconsistent"][:3]),
            result["wrong_marker"],
        ),
        "| failed recipients | %s%s |"
        % (
            result["failed"],
            ": " + "; ".join("%s recipients: %s" % (n, e) for e, n in result["failed_errors"][:10])
            if result["failed_errors"]
            else "",
        ),
        "| recipients retried | %s markers with more than one attempt |"
        % result["retried_recipients"],
        "| timeline | deliveries at the server (and kills) per slice since the commit: %s |"
        % result["timeline"],
        "| CPU per recipient sent | %s (CPU seconds over the trial / recipients sent%s) |"
        % (
            ", ".join(
                "%s %.2f ms" % (name, 1000 * seconds / max(result["sent"], 1))
                for name, seconds in trial["party_cpu"].items()
            ),
            "; a killed worker's up to its last sample" if kills else "",
        ),
        "| lane jobs | %s (%s attempts in all); attempt outcomes %s; sweeper revivals %s; "
        "operator events %s |"
        % (
            result["lane_jobs"],
            result["lane_job_attempts"],
            result["lane_attempt_outcomes"],
            result["revivals"],
            result["operator_events"] or "none",
        ),
        "",
        "Guarantees: %s." % ("all held" if not broken else "BROKEN: " + "; ".join(broken)),
        "",
        "Final line: `%s`" % final,
        "",
    ]
    append_results(
        path,
        "# bench/send_chaos.py results\n\nEach run appends a section; see bench/README.md "
        "and the docstring of bench/send_chaos.py for what is measured and how.\n",
        "\n".join(lines),
    )


def env_seconds(name: str, default: float, zero: str = "") -> float:
    """Return the seconds in environment variable ``name`` (or ``default``).

    Positive, or also 0 when ``zero`` says what 0 means.
    """
    value = float(os.environ.get(name, default))
    if not (value > 0 or (zero and value == 0)):
        raise SystemExit(
            "%s must be a positive number of seconds%s"
            % (name, " or 0 (%s)" % zero if zero else "")
        )
    return value


def main() -> int:
    params = {
        "recipients": env_int("BENCH_RECIPIENTS", 20_000),
        "workers": env_int("BENCH_WORKERS", 3),
        "kill_every": env_seconds("BENCH_KILL_EVERY", 2.0, zero="no kills"),
        "kill_target": os.environ.get("BENCH_KILL_TARGET", "random"),
        "lease": env_seconds("BENCH_LEASE", 4.0),
        "claim_seconds": env_seconds("BENCH_CLAIM_SECONDS", 6.0),
        "lanes": env_int("BENCH_SEND_LANES", 3),
        "chunk": env_int("BENCH_SEND_CHUNK", 100),
        "window": env_int("BENCH_SEND_WINDOW", 50),
        "smtp_delay": env_seconds("BENCH_SMTP_DELAY", 0.0, zero="answer at once"),
        "concurrency": env_int("BENCH_CONCURRENCY", 0, minimum=0),  # 0: runworker's default
        "timeout": env_seconds("BENCH_TIMEOUT", 900.0),
        "stall": env_seconds("BENCH_STALL", 300.0),
        "label": os.environ.get("BENCH_LABEL", ""),
    }
    if params["kill_target"] not in ("random", "lane"):
        raise SystemExit("BENCH_KILL_TARGET must be random or lane")
    url = os.environ.get("BENCH_DATABASE_URL") or DEFAULT_URL
    results_path = Path(os.environ.get("BENCH_RESULTS") or REPO / "bench" / "results-send-chaos.md")
    db_name = url.rsplit("/", 1)[-1]
    log_path = Path(os.environ.get("BENCH_LOG") or "/tmp/%s-workers.log" % db_name)
    deliveries_path = log_path.with_name("%s-deliveries.tsv" % db_name)
    when = dt.datetime.now(dt.UTC)
    print(
        "bench/send_chaos.py %s db=%s" % (" ".join("%s=%s" % kv for kv in params.items()), url),
        flush=True,
    )

    # The bench process enqueues the lanes (schedule_batch), so SEND_LANES applies here too.
    os.environ["SCHEDULER_SEND_LANES"] = str(params["lanes"])
    recreate_database(url)
    setup_django(url, settings_module=SETTINGS)
    migrate(run_syncdb=True)
    machine = machine_description(("synchronous_commit", "shared_buffers"))
    populate(params["recipients"])

    smtp = SmtpServer(deliveries_path, params["smtp_delay"])
    WorkerProcess.log_file = log_path.open("w", buffering=1)
    print("smtp server on 127.0.0.1:%s; worker output in %s" % (smtp.port, log_path), flush=True)
    try:
        trial = run_trial(params, url, smtp)
    finally:
        smtp.stop()
        WorkerProcess.log_file.close()
    deliveries = smtp.deliveries()
    result = analyse(trial["batch_id"], deliveries)
    result["timeline"] = timeline(deliveries, trial["t0_epoch"], trial["kills"])
    end = result["finished_at"] or trial["t0_wall"] + dt.timedelta(seconds=trial["waited_s"])
    result["elapsed_s"] = (end - trial["t0_wall"]).total_seconds()
    result["sends_s"] = result["sent"] / max(result["elapsed_s"], 1e-9)
    kills = len(trial["kills"])
    broken = broken_guarantees(result, kills, params["lanes"] * params["window"])
    for pid, code, tail in trial["exits"]:
        print("worker %s exited by itself with %s; last lines:\n%s" % (pid, code, tail))
    for lane_id, attempts, error in result["lane_failures"]:
        print("lane job %s failed after %s attempts: %s" % (lane_id, attempts, error))
    if result["failed_errors"]:
        print("failed recipients: %s" % result["failed_errors"][:10])
    if broken:
        print("GUARANTEES BROKEN: %s" % "; ".join(broken))
    final = (
        "status=%s unreached=%d extra_copies=%d kills=%d dup_recipients=%d max_copies=%d "
        "sends_s=%.0f elapsed_s=%.1f guarantees=%s"
        % (
            result["status"],
            result["unreached"],
            result["extra"],
            kills,
            result["dup_recipients"],
            result["max_copies"],
            result["sends_s"],
            result["elapsed_s"],
            "broken" if broken else "held",
        )
    )
    write_results(
        results_path,
        when,
        params,
        machine,
        trial,
        result,
        broken,
        final,
        "%.2f %.2f %.2f" % os.getloadavg(),
    )
    print(
        "batch %s: %s%s%s; deliveries=%s unreached=%s extra=%s (kills x lanes x window = %s)"
        % (
            trial["batch_id"],
            result["status"],
            " (%s)" % result["reason"] if result["reason"] else "",
            "; the wait ended: %s" % trial["wait_reason"] if trial["wait_reason"] else "",
            result["deliveries"],
            result["unreached"],
            result["extra"],
            kills * params["lanes"] * params["window"],
        )
    )
    print(final, flush=True)
    return 1 if broken else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["smtpd"]:
        run_smtpd(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]))
    else:
        sys.exit(main())
