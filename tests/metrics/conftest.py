"""Helpers for the metrics tests: scrape and parse with prometheus_client's own parser."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache
from prometheus_client.parser import text_string_to_metric_families


@pytest.fixture(autouse=True)
def _empty_cache():
    """Each test reads the database afresh: the view caches what it served."""
    cache.clear()
    yield
    cache.clear()


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Return {(sample name, sorted labels): value} of an exposition."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: Any) -> float | None:
    """Return the value of sample ``name`` with exactly ``labels``, None if absent."""
    return samples.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))


def series(samples: dict, name: str) -> list[dict[str, str]]:
    """Return the label sets of every sample called ``name``."""
    return [dict(labels) for sample_name, labels in samples if sample_name == name]
