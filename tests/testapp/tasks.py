"""Tasks the test suite schedules; worker subprocesses import them too."""

from scheduler_app import task


@task(name="tests.noop")
def noop(job):
    return None


@task(name="tests.versioned", payload_versions=(1, 2))
def versioned(job):
    return job.payload_version
