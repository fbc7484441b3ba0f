"""Two connections schedule the same unique key at once: one job, both callers get it.

Each contender is a thread, so it has its own Django connection (Django
connections are per thread). The first INSERT holds the key's index entry
until its transaction ends, so the second contender's INSERT waits on a row
lock. The main thread sees that wait in pg_stat_activity before letting the
first contender finish: the two transactions provably overlap in every trial.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from scheduler_app.models import Job
from scheduler_app.scheduling import JobRequest, schedule, schedule_many
from tests.helpers import wait_until

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

TRIALS = 20
TIMEOUT = 20.0


class Rollback(Exception):
    pass


class Contender(threading.Thread):
    """Open a transaction on its own connection, run ``work``, wait for ``release``, end it."""

    def __init__(self, name, work, *, start_together, release, rollback=False):
        super().__init__(name=name, daemon=True)
        self.work = work
        self.start_together = start_together
        self.release = release
        self.rollback = rollback
        self.pid = None
        self.result = None
        self.done_before_release = None
        self.error = None

    def run(self):
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = cursor.fetchone()[0]
            self.start_together.wait(timeout=TIMEOUT)
            try:
                with transaction.atomic():
                    self.result = self.work()
                    self.done_before_release = not self.release.is_set()
                    if not self.release.wait(timeout=TIMEOUT):
                        raise AssertionError("%s was never released" % self.name)
                    if self.rollback:
                        raise Rollback
            except Rollback:
                pass
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            connection.close()


def waiting_on_a_lock(pids):
    """Return True if one of the backends ``pids`` is blocked on a lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE pid = ANY(%s) AND wait_event_type = 'Lock'",
            [list(pids)],
        )
        return cursor.fetchone()[0] > 0


def race(work_a, work_b, *, rollback_first=False):
    """Run two contenders together; return them once both have ended.

    Whichever finishes ``work`` first keeps its transaction open until the
    other is seen waiting on its lock (or has finished too, which only a
    missing unique constraint would allow); then both may end. The test
    fails unless the wait was seen.
    """
    start_together = threading.Barrier(3, timeout=TIMEOUT)
    release = threading.Event()
    contenders = [
        Contender("contender-a", work_a, start_together=start_together, release=release),
        Contender("contender-b", work_b, start_together=start_together, release=release),
    ]
    for contender in contenders:
        contender.start()
    overlapped = False
    try:
        start_together.wait()
        pids = [contender.pid for contender in contenders]

        def one_done_and_the_other_blocked_or_both_done():
            nonlocal overlapped
            if any(c.error is not None for c in contenders):
                return True
            done = [c for c in contenders if c.result is not None]
            if len(done) == 2:
                return True
            # Checked after reading `done`: a contender blocked now is still
            # blocked, since the one it waits for has not been released.
            overlapped = len(done) == 1 and waiting_on_a_lock(pids)
            return overlapped

        wait_until(
            one_done_and_the_other_blocked_or_both_done,
            timeout=TIMEOUT,
            interval=0.002,
            message="one contender to finish and the other to wait on its lock",
        )
        if rollback_first:
            first = next(c for c in contenders if c.result is not None)
            first.rollback = True
    finally:
        release.set()
        for contender in contenders:
            contender.join(timeout=TIMEOUT)
    for contender in contenders:
        assert not contender.is_alive(), "%s did not finish" % contender.name
        if contender.error is not None:
            raise contender.error
    assert overlapped, "the two transactions did not overlap"
    return contenders


@pytest.mark.parametrize("trial", range(TRIALS))
def test_concurrent_schedule_with_the_same_unique_key_makes_one_job(trial):
    key = "race:%s" % trial

    a, b = race(
        lambda: schedule("tests.noop", {"who": "a"}, unique_key=key),
        lambda: schedule("tests.noop", {"who": "b"}, unique_key=key),
    )

    jobs = list(Job.objects.filter(unique_key=key))
    assert len(jobs) == 1
    assert Job.objects.count() == 1
    assert a.result.pk == b.result.pk == jobs[0].pk
    # The contender that got in first wrote the job; the other was handed that job.
    first, second = (a, b) if a.done_before_release else (b, a)
    assert first.done_before_release and not second.done_before_release
    assert jobs[0].payload == {"who": first.name[-1]}
    assert second.result.payload == {"who": first.name[-1]}


@pytest.mark.parametrize("trial", range(5))
def test_when_the_first_holder_rolls_back_the_waiting_caller_creates_the_job(trial):
    key = "race-rollback:%s" % trial

    a, b = race(
        lambda: schedule("tests.noop", {"who": "a"}, unique_key=key),
        lambda: schedule("tests.noop", {"who": "b"}, unique_key=key),
        rollback_first=True,
    )

    first, second = (a, b) if a.done_before_release else (b, a)
    jobs = list(Job.objects.all())
    assert len(jobs) == 1
    assert second.result.pk == jobs[0].pk
    assert first.result.pk != jobs[0].pk
    assert jobs[0].payload == {"who": second.name[-1]}


@pytest.mark.parametrize("trial", range(5))
def test_concurrent_schedule_many_with_overlapping_keys_makes_one_job_per_key(trial):
    a_keys = ["bulk:%s:%s" % (trial, n) for n in range(0, 60)]
    b_keys = ["bulk:%s:%s" % (trial, n) for n in range(30, 90)]

    a, b = race(
        lambda: schedule_many("tests.noop", [JobRequest(unique_key=k) for k in a_keys]),
        lambda: schedule_many("tests.noop", [JobRequest(unique_key=k) for k in b_keys]),
    )

    stored = dict(Job.objects.values_list("unique_key", "pk"))
    assert len(stored) == Job.objects.count() == 90
    assert [job.pk for job in a.result] == [stored[k] for k in a_keys]
    assert [job.pk for job in b.result] == [stored[k] for k in b_keys]
