"""Django signals projects can connect to (e.g. to alert on failures or count runs).

Sending a signal nobody listens to costs almost nothing; ``runworker
--metrics-port`` listens to the worker ones to count runs, claims and waits.
"""

from django.dispatch import Signal

#: Sent after a job failed for good (last attempt, non-retryable error, or
#: lease expired on its last attempt). kwargs: job_id, task_name, error.
job_failed = Signal()

#: Sent by a worker after a claim returned jobs. kwargs: worker_id, count.
jobs_claimed = Signal()

#: Sent by a worker after it recorded an attempt's outcome. kwargs: worker_id,
#: task_name, outcome (a JobAttempt.Outcome value), attempt, lateness (seconds
#: from due to started), duration (seconds from started to finished).
attempt_finished = Signal()

#: Sent when a send waited for the shared rate limiter. kwargs: key, seconds.
rate_limit_waited = Signal()

#: Sent when an alert opens, and again when it is re-notified. kwargs: alert (an Alert).
alert_opened = Signal()

#: Sent when an open alert's rule stopped tripping and it resolved. kwargs: alert.
alert_resolved = Signal()
