"""The operator's admin: thin layers over the domain functions.

One module per area: jobs, schedules, sends, suppressions, switchboard (kill
switches), lateness, alerts, workers, overview, retention (prune runs). Importing this
package registers everything with admin.site.
"""

from scheduler_app.admin import (
    alerts,
    jobs,
    lateness,
    overview,
    retention,
    schedules,
    sends,
    suppressions,
    switchboard,
    workers,
)

__all__ = [
    "alerts",
    "jobs",
    "lateness",
    "overview",
    "retention",
    "schedules",
    "sends",
    "suppressions",
    "switchboard",
    "workers",
]
