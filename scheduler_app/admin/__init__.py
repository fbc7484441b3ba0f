"""The operator's admin: thin layers over the domain functions.

One module per area: jobs, schedules, sends, suppressions, switchboard (kill
switches), lateness. Importing this package registers everything with admin.site.
"""

from scheduler_app.admin import jobs, lateness, schedules, sends, suppressions, switchboard

__all__ = ["jobs", "lateness", "schedules", "sends", "suppressions", "switchboard"]
