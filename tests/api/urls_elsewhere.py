"""A project that mounts the API under another prefix (see test_schema)."""

from django.urls import include, path

urlpatterns = [path("v2/scheduling/", include("scheduler_app.api.urls"))]
