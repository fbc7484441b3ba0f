"""URLs of the REST API; include them under a prefix of your choosing::

    path("api/", include("scheduler_app.api.urls")),

Routes (below the prefix): the root (links to the others); ``jobs/``, ``jobs/<id>/``,
``jobs/<id>/cancel/``, ``jobs/<id>/undo/``; ``batches/``, ``batches/<id>/`` and its ``pause/``,
``resume/``, ``cancel/`` and ``undo/``; ``messages/``; ``suppressions/``; the OpenAPI schema at
``schema/`` and its docs page at ``docs/``. URL names live in the ``scheduler_app_api`` namespace.
"""

from __future__ import annotations

import re

from django.urls import path, re_path
from rest_framework.routers import SimpleRouter

from scheduler_app.api.batches import BatchViewSet
from scheduler_app.api.jobs import JobViewSet
from scheduler_app.api.messages import MessageViewSet
from scheduler_app.api.suppressions import SuppressionViewSet
from scheduler_app.api.views import ApiRootView, DocsView, SchemaView, not_found

app_name = "scheduler_app_api"

router = SimpleRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("batches", BatchViewSet, basename="batch")
router.register("messages", MessageViewSet, basename="message")
router.register("suppressions", SuppressionViewSet, basename="suppression")

#: Each router prefix, for the catch-all below.
_PREFIXES = "|".join(re.escape(prefix) for prefix, *_ in router.registry)

urlpatterns = [
    path("", ApiRootView.as_view(), name="root"),
    *router.urls,
    # Deeper paths below a router prefix (e.g. an id containing "/") get the
    # API's 404, not the project's HTML page. Only with the trailing slash, so
    # that APPEND_SLASH still redirects "jobs/1" to "jobs/1/".
    re_path(r"^(?:%s)/.+/$" % _PREFIXES, not_found),
    path(SchemaView.route, SchemaView.as_view(patterns=router.urls), name="schema"),
    path("docs/", DocsView.as_view(), name="docs"),
]
