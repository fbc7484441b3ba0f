from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "example_project.demo"
    label = "demo"
    verbose_name = "Scheduler demo"
    default_auto_field = "django.db.models.BigAutoField"
