"""Template filters of the scheduler's admin pages."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()

#: The app index's groups, in order: a heading -> the model names under it.
ADMIN_GROUPS = {
    "Operations": (
        "operationsoverview",
        "latenessoverview",
        "alert",
        "job",
        "workerheartbeat",
        "prunerun",
    ),
    "Sends": ("sendbatch", "recipient", "suppression", "suppressionremoval", "feedbackevent"),
    "Schedules": ("schedule", "scheduleoccurrence"),
    "Settings": ("control", "ratelimit"),
}


@register.filter
def scheduler_groups(
    app_list: list[dict[str, Any]], with_app_name: bool = False
) -> list[dict[str, Any]]:
    """Return the scheduler app's entry of ``app_list`` as one entry per ADMIN_GROUPS heading
    (a model no group names goes under "Other"); other apps' entries as they are.

    ``with_app_name``: headings read "Scheduler: Operations", for the site's index, where
    other apps' entries stand beside them.
    """
    grouped = []
    for app in app_list:
        if app["app_label"] != "scheduler_app":
            grouped.append(app)
            continue
        models = {model["object_name"].lower(): model for model in app["models"]}
        groups = [
            (heading, [models.pop(name) for name in names if name in models])
            for heading, names in ADMIN_GROUPS.items()
        ]
        groups.append(("Other", list(models.values())))
        for heading, found in groups:
            if found:
                name = "%s: %s" % (app["name"], heading) if with_app_name else heading
                grouped.append({**app, "name": name, "models": found})
    return grouped
