"""The demo's audience: newsletter subscribers."""

from __future__ import annotations

from django.db import models


class Subscriber(models.Model):
    email = models.EmailField(unique=True)
    first_name = models.CharField(max_length=100, blank=True, default="")
    timezone = models.CharField(max_length=64, default="UTC")

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.email
