"""The shared rate limiter: a token bucket row per provider account, in the database.

Every worker on every host takes tokens from the same row before it calls
the provider, so the rate holds across processes; an operator edits the
row's rate (admin) and workers follow within one chunk, no deploy needed.
Tokens are counted by the database's clock, never a host's: a host whose
clock runs ahead would otherwise find tokens the bucket never earned.
A key with no row, or rate 0, is unlimited.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from scheduler_app import database
from scheduler_app.db import database_now
from scheduler_app.models import RateLimit
from scheduler_app.signals import rate_limit_waited

#: Longest single wait for tokens, so a paused batch is noticed promptly.
MAX_WAIT = 1.0


def take(key: str, wanted: int) -> tuple[int, float]:
    """Take up to ``wanted`` tokens now; return (granted, seconds until the next token)."""
    now = database_now()
    with database.atomic():
        bucket = RateLimit.objects.select_for_update().filter(key=key).first()
        if bucket is None or bucket.rate <= 0:
            return wanted, 0.0
        elapsed = max((now - bucket.updated_at).total_seconds(), 0.0)
        tokens = min(bucket.burst, bucket.tokens + elapsed * bucket.rate)
        granted = max(0, min(wanted, math.floor(tokens)))
        tokens -= granted
        RateLimit.objects.filter(pk=bucket.pk).update(tokens=tokens, updated_at=now)
    wait = 0.0 if granted == wanted else (1 - tokens) / bucket.rate
    return granted, wait


def reserve(key: str, wanted: int = 1) -> float:
    """Reserve ``wanted`` tokens now; return the seconds to wait before using them.

    The bucket may go into debt, so callers queue in the order they reserved
    and the rate holds however late a sleeping worker wakes up.
    """
    now = database_now()
    with database.atomic():
        bucket = RateLimit.objects.select_for_update().filter(key=key).first()
        if bucket is None or bucket.rate <= 0:
            return 0.0
        elapsed = max((now - bucket.updated_at).total_seconds(), 0.0)
        tokens = min(bucket.burst, bucket.tokens + elapsed * bucket.rate) - wanted
        RateLimit.objects.filter(pk=bucket.pk).update(tokens=tokens, updated_at=now)
    return max(0.0, -tokens / bucket.rate)


def wait_for_token(
    key: str,
    *,
    should_stop: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], object] | None = None,
) -> bool:
    """Reserve one token and wait for its turn; False if ``should_stop()`` cut the wait short."""
    sleep = sleep or threading.Event().wait
    wait = reserve(key)
    if wait > 0:
        rate_limit_waited.send(sender=RateLimit, key=key, seconds=wait)
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        if should_stop():
            return False
        sleep(min(left, MAX_WAIT))
    return True


def is_limited(key: str) -> bool:
    """Return True if ``key`` has a rate (else sends are not throttled)."""
    return RateLimit.objects.filter(key=key, rate__gt=0).exists()


def set_rate(key: str, rate: float, *, burst: float | None = None) -> RateLimit:
    """Create or change a limit; takes effect at the workers' next take()."""
    now = database_now()
    with database.atomic():
        bucket, created = RateLimit.objects.select_for_update().get_or_create(
            key=key,
            defaults={"rate": rate, "burst": burst or max(1.0, rate), "updated_at": now},
        )
        if not created:
            # Tokens earned so far were earned at the old rate: settle them, then switch.
            elapsed = max((now - bucket.updated_at).total_seconds(), 0.0)
            earned = elapsed * bucket.rate if bucket.rate > 0 else 0.0
            bucket.rate = rate
            bucket.burst = burst if burst is not None else bucket.burst
            bucket.tokens = min(bucket.burst, bucket.tokens + earned)
            bucket.updated_at = now
            bucket.save(update_fields=["rate", "burst", "tokens", "updated_at"])
    return bucket


def chunk_size_for(key: str, default: int) -> int:
    """Return a chunk size that takes about a second at the key's rate (kill-switch latency)."""
    rate = RateLimit.objects.filter(key=key).values_list("rate", flat=True).first()
    if not rate:
        return default
    return max(1, min(default, int(rate)))
