from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("scheduler_app.api.urls")),
    path("mail/", include("scheduler_app.feedback.urls")),
]
