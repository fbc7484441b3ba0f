from django.contrib import admin
from django.urls import include, path

from scheduler_app.metrics.views import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("scheduler_app.api.urls")),
    path("mail/", include("scheduler_app.feedback.urls")),
    path("metrics", metrics_view),
]
