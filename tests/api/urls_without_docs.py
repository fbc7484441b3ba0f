"""A project that routes the API's jobs but not its docs page (see test_root_and_docs)."""

from django.urls import path

from scheduler_app.api.jobs import JobViewSet

urlpatterns = [path("jobs/", JobViewSet.as_view({"get": "list"}))]
