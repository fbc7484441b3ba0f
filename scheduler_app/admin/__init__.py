"""The operator's admin: thin layers over the domain functions.

One module per area: jobs, schedules, sends, suppressions, switchboard (kill
switches), lateness, alerts, workers, overview, retention (prune runs). Importing this
package registers everything with admin.site, and gives the site's index the scheduler's
pages in groups unless the project chose an index template of its own.
"""

from django.contrib import admin as _admin

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

# Set while the admin autodiscovers, before any URLconf: a project's own
# admin.site.index_template, set in its urls.py or AdminSite, still wins.
if _admin.site.index_template is None:
    _admin.site.index_template = "admin/scheduler_app/index.html"

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
