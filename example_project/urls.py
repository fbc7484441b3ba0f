from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from scheduler_app.metrics.views import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("scheduler_app.api.urls")),
    path("mail/", include("scheduler_app.feedback.urls")),
    # Prometheus: served to METRICS_ALLOWED_IPS (localhost here) or METRICS_TOKEN.
    path("metrics", metrics_view),
    path("", RedirectView.as_view(pattern_name="admin:index")),
]
