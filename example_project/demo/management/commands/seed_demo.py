"""Schedule a handful of demo jobs of each demo task, some now and some in a minute."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.db import transaction

from example_project.demo.models import Subscriber
from example_project.demo.tasks import flaky, send_email, slow
from scheduler_app import JobRequest, schedule_many
from scheduler_app.models import Job, SendBatch

LATER = 60


class Command(BaseCommand):
    help = (
        "Schedule demo jobs of each demo task: some due now, some in a minute. "
        "Each has a unique key, so running it again while they are unfinished adds nothing."
    )

    def handle(self, *args, **options):
        plans = {
            send_email: [
                JobRequest(
                    payload={
                        "to": f"user{n}@example.com",
                        "subject": f"Hello from scheduler_app ({n})",
                        "body": "This message was sent by a scheduled job.",
                    },
                    delay=LATER if n > 3 else None,
                    unique_key=f"seed_demo:send_email:{n}",
                )
                for n in range(1, 6)
            ],
            flaky: [
                JobRequest(
                    payload={"failure_rate": 0.5},
                    delay=LATER if n > 4 else None,
                    unique_key=f"seed_demo:flaky:{n}",
                )
                for n in range(1, 7)
            ],
            slow: [
                JobRequest(
                    payload={"seconds": seconds},
                    delay=LATER if n > 2 else None,
                    unique_key=f"seed_demo:slow:{n}",
                )
                for n, seconds in enumerate([3, 8, 5], start=1)
            ],
        }
        keys = [request.unique_key for requests in plans.values() for request in requests]
        with transaction.atomic():
            already = Job.objects.unfinished().filter(unique_key__in=keys).count()
            for demo_task, requests in plans.items():
                schedule_many(demo_task, requests)
        self._seed_newsletter()
        due_now = sum(r.delay is None for requests in plans.values() for r in requests)
        self.stdout.write(
            self.style.SUCCESS(
                f"Demo jobs: {len(keys)} ({due_now} due now, {len(keys) - due_now} in {LATER}s); "
                f"{len(keys) - already} new, {already} already pending."
            )
        )

    def _seed_newsletter(self):
        """Subscribers and a draft batch to dry-run, seed-send and schedule from the admin."""
        zones = ["Europe/London", "America/New_York", "Pacific/Auckland", "Asia/Tokyo"]
        for n in range(1, 41):
            Subscriber.objects.get_or_create(
                email="subscriber%s@example.com" % n,
                defaults={
                    "first_name": "" if n % 10 == 0 else "Reader %s" % n,
                    "timezone": zones[n % len(zones)],
                },
            )
        SendBatch.objects.get_or_create(
            name="Welcome newsletter",
            defaults={
                "subject_template": "Welcome, {{ first_name|default:'reader' }}",
                "text_template": "Hello {{ first_name|default:'there' }},\n\n"
                "thanks for subscribing to the scheduler_app demo.",
                "audience": "demo.subscribers",
                "expected_max_audience": 100,
                "seed_list": ["seed@example.com"],
                "seed_context": {"first_name": "Seed"},
            },
        )
