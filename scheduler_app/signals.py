"""Django signals projects can connect to (e.g. to alert on failures)."""

from django.dispatch import Signal

#: Sent after a job failed for good (last attempt, non-retryable error, or
#: lease expired on its last attempt). kwargs: job_id, task_name, error.
job_failed = Signal()

#: Sent when an alert opens, and again when it is re-notified. kwargs: alert (an Alert).
alert_opened = Signal()

#: Sent when an open alert's rule stopped tripping and it resolved. kwargs: alert.
alert_resolved = Signal()
