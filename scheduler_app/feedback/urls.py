"""Public URLs of mail feedback; include them at a stable prefix of your site::

    path("mail/", include("scheduler_app.feedback.urls")),

``unsubscribe/<token>/`` is the one-click link batch messages carry (set
SCHEDULER_APP["PUBLIC_BASE_URL"] to the site's https origin); ``feedback/`` is the
signed webhook for bounces and complaints. URL names live in ``scheduler_app_feedback``.
"""

from django.urls import path

from scheduler_app.feedback.views import FeedbackWebhookView, UnsubscribeView

app_name = "scheduler_app_feedback"

urlpatterns = [
    path("unsubscribe/<str:token>/", UnsubscribeView.as_view(), name="unsubscribe"),
    path("feedback/", FeedbackWebhookView.as_view(), name="webhook"),
]
