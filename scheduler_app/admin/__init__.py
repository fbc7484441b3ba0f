"""The operator's admin: thin layers over the domain functions.

One module per area: jobs, schedules, sends, switchboard (kill switches),
lateness, alerts, workers, overview. Importing this package registers everything with admin.site.
"""

from scheduler_app.admin import (
    alerts,
    jobs,
    lateness,
    overview,
    schedules,
    sends,
    switchboard,
    workers,
)

__all__ = [
    "alerts",
    "jobs",
    "lateness",
    "overview",
    "schedules",
    "sends",
    "switchboard",
    "workers",
]
