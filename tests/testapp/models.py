"""Tables the test suite's handlers write to. No migrations: pytest-django creates them."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class Run(models.Model):
    """One run of a handler, recorded by the handler itself (in a worker process)."""

    job_id = models.BigIntegerField(db_index=True)
    attempt = models.PositiveIntegerField()
    pid = models.IntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return "job %s attempt %s in pid %s" % (self.job_id, self.attempt, self.pid)


class Customer(models.Model):
    """The audience of the test sends."""

    email = models.CharField(max_length=320, blank=True, default="")
    first_name = models.CharField(max_length=100, blank=True, default="")
    plan = models.CharField(max_length=20, default="free")
    tz = models.CharField(max_length=64, blank=True, default="")
    unsubscribed = models.BooleanField(default=False)
    # Typed values for the "tests.typed-customers" audience: they must reach the
    # template as they left the database (a date stays a date for |date).
    renews_on = models.DateField(null=True, blank=True)
    paid_at = models.DateTimeField(null=True, blank=True)
    balance = models.DecimalField(max_digits=10, decimal_places=2, null=True, blank=True)
    call_at = models.TimeField(null=True, blank=True)
    token = models.UUIDField(null=True, blank=True)
    vip = models.BooleanField(default=False, db_default=False)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.email


class ProviderCall(models.Model):
    """One call the fake provider received, written before it answers."""

    idempotency_key = models.CharField(max_length=300, db_index=True)
    address = models.CharField(max_length=320)
    subject = models.CharField(max_length=998)
    body = models.TextField()
    pid = models.IntegerField()
    outcome = models.CharField(max_length=20, default="ok")
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return "%s (%s)" % (self.idempotency_key, self.outcome)


class ProviderBehaviour(models.Model):
    """How the fake provider answers: 'ok', 'transient', 'permanent', 'slow_down'.

    ``address`` empty applies to everyone; ``times`` > 0 answers that way only
    that many times (then 'ok'); a ``delay`` (seconds) is slept before answering.
    """

    address = models.CharField(max_length=320, blank=True, default="")
    answer = models.CharField(max_length=20, default="ok")
    times = models.IntegerField(default=0)
    delay = models.FloatField(default=0.0)

    def __str__(self) -> str:
        return "%s -> %s" % (self.address or "*", self.answer)
