from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("scheduler_app.api.urls")),
    path("mail/", include("scheduler_app.feedback.urls")),
    path("", RedirectView.as_view(pattern_name="admin:index")),
]
