"""The test audience, fake provider and suppression check (real code paths, test data)."""

from __future__ import annotations

import os
import time

from django.db import transaction
from django.db.models import F, Q

from scheduler_app.sends.audience import AudienceQuery, audience
from scheduler_app.sends.providers import PermanentSendError, SlowDown, TransientSendError
from tests.testapp.models import Customer, ProviderBehaviour, ProviderCall


@audience("tests.customers")
def customers(params):
    """All customers, or those on params['plan']."""
    queryset = Customer.objects.all()
    if params.get("plan"):
        queryset = queryset.filter(plan=params["plan"])
    return AudienceQuery(
        queryset=queryset,
        key="id",
        address="email",
        timezone="tz",
        context={"first_name": "first_name", "plan": "plan"},
    )


@audience("tests.typed-customers")
def typed_customers(params):
    """All customers, with a date, datetime, decimal, time, UUID and boolean in the context."""
    return AudienceQuery(
        queryset=Customer.objects.all(),
        key="id",
        address="email",
        context={
            "first_name": "first_name",
            "renews_on": "renews_on",
            "paid_at": "paid_at",
            "balance": "balance",
            "call_at": "call_at",
            "token": "token",
            "vip": "vip",
        },
    )


class FakeProvider:
    """Records every call in ProviderCall, answers as ProviderBehaviour says."""

    def send(self, message, idempotency_key):
        with transaction.atomic():
            rule = (
                ProviderBehaviour.objects.select_for_update()
                .filter(Q(address=message.to) | Q(address=""))
                .order_by("-address")
                .first()
            )
            answer = rule.answer if rule else "ok"
            if rule and rule.times > 0:
                ProviderBehaviour.objects.filter(pk=rule.pk).update(times=F("times") - 1)
                if rule.times == 1:
                    ProviderBehaviour.objects.filter(pk=rule.pk).update(answer="ok")
        if rule and rule.delay:
            time.sleep(rule.delay)
        ProviderCall.objects.create(
            idempotency_key=idempotency_key,
            address=message.to,
            subject=message.subject,
            body=message.text,
            pid=os.getpid(),
            outcome=answer,
        )
        if answer == "transient":
            raise TransientSendError("fake provider: try again")
        if answer == "permanent":
            raise PermanentSendError("fake provider: mailbox does not exist")
        if answer == "slow_down":
            raise SlowDown("30")
        return "fake-%s" % idempotency_key


class NoopProvider:
    """Accepts everything, records nothing (benchmarks)."""

    def send(self, message, idempotency_key):
        return idempotency_key


class IdempotentNoopProvider(NoopProvider):
    """NoopProvider declaring one delivery per idempotency key (benchmarks)."""

    idempotent = True


def suppressed(addresses, batch):
    """Skip customers who unsubscribed after the freeze."""
    gone = Customer.objects.filter(email__in=addresses, unsubscribed=True)
    return {email: "unsubscribed" for email in gone.values_list("email", flat=True)}
