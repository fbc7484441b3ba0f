"""The REST API: thin Django REST framework views over scheduler_app's functions.

Include ``scheduler_app.api.urls`` under a prefix of your choosing; every
view sets its own authentication, permissions, throttling and error format,
so the project's REST_FRAMEWORK settings need no change.
"""
